"""BranchPlan: where a branching run forks its episodes, and how wide (docs/branching.md)."""

from __future__ import annotations

from typing import Any

import attrs

from agentkit._errors import SpecError

__all__ = ["BranchPlan"]


def _at_least(minimum: int) -> Any:
    def check(_instance: Any, attribute: attrs.Attribute[int], value: int) -> None:
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise SpecError(
                f"BranchPlan.{attribute.name} must be an integer of at least {minimum}, "
                f"got {value!r}"
            )

    return check


@attrs.frozen(kw_only=True)
class BranchPlan:
    """How :meth:`AgentEnv.branch <agentkit.AgentEnv.branch>` branches each episode.

    ``at``: the branch step, the number of policy replies an episode takes
    before it forks (0: right after ``init()``). ``children``: how many
    episodes continue from each branch point (each is scored; they form one
    GRPO group). ``token_ids``: ask the model server for token ids and
    logprobs (vLLM's ``return_token_ids``), recorded per rollout for the
    training export. Checked when built: a bad value is a
    :class:`~agentkit.SpecError` naming the field.
    """

    at: int = attrs.field(validator=_at_least(0))
    children: int = attrs.field(validator=_at_least(1))
    token_ids: bool = False

    def to_json(self) -> dict[str, Any]:
        """The plan as the manifest's ``branching`` table records it."""
        return {"at": self.at, "children": self.children, "token_ids": self.token_ids}
