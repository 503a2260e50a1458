"""A service group in verifiers' format: each rollout's trace record loaded as
verifiers' own ``WireTrace`` (what prime-rl trains on: its branches are the training
sequences, with ``sampled_mask``, ``logprobs`` and ``advantages``).

>>> service = RolloutService(env, options, group_size=4, format="verifiers")  # doctest: +SKIP
>>> async with service:  # doctest: +SKIP
...     service.request(1)
...     group_traces = traces(await service.next_group())
"""

from __future__ import annotations

from typing import Any

import verifiers.v1 as vf

from agentkit.service import ServiceGroup

__all__ = ["traces"]


def traces(group: ServiceGroup) -> list[Any]:
    """``group``'s rollouts as ``verifiers.v1.WireTrace``s (one per rollout with token
    ids), validated by verifiers' own model. The service must hand groups over in
    verifiers' format (``format="verifiers"``)."""
    if group.format != "verifiers":
        raise ValueError(
            f"group {group.group_id} is in format {group.format!r}: the service must hand "
            "groups over in verifiers' format (format='verifiers')"
        )
    return [vf.WireTrace.model_validate(record) for record in group.data]
