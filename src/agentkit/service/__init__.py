"""Train live: a rollout service that keeps rollouts of any harness in flight for a trainer.

A trainer opens a :class:`RolloutService` over an :class:`~agentkit.AgentEnv`
(a taskset and any harness, agent programs included), asks for groups (a
task × N rollouts) and takes finished groups as they finish, each with the
training records ``agentkit export`` writes (exact token ids, logprobs,
masks, rewards, advantages) in its format (SkyRL, Tinker, verifiers). It
announces each new policy with :meth:`RolloutService.set_policy`; every model
call's record names the version that answered it (``ModelCall.policy_version``),
and ``max_staleness`` keeps groups that are too old from ever reaching it.
A trainer in another process reaches it over HTTP through a :class:`ServiceFront`,
or through a Ray actor's handle (:func:`serve_on_ray`).
See docs/training-live.md.

>>> service = RolloutService(env, options, group_size=4, max_staleness=2)  # doctest: +SKIP
>>> async with service:  # doctest: +SKIP
...     service.request(8)
...     async for group in service.groups():
...         ...
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from agentkit._lazy import lazy_attribute
from agentkit._policy import Policy
from agentkit.service._formats import TRAINER_FORMATS, RecordOptions, TrainerFormat
from agentkit.service._group import ServiceGroup, ServiceReport

if TYPE_CHECKING:
    from agentkit.service._http import ServiceFront, group_json
    from agentkit.service._ray import ServiceActor, serve_on_ray
from agentkit.service._service import OnStale, RolloutService, ServiceError, ServiceFailed

__all__ = [
    "TRAINER_FORMATS",
    "OnStale",
    "Policy",
    "RecordOptions",
    "RolloutService",
    "ServiceActor",
    "ServiceError",
    "ServiceFailed",
    "ServiceFront",
    "ServiceGroup",
    "ServiceReport",
    "TrainerFormat",
    "group_json",
    "serve_on_ray",
]


#: Names loaded on first use: the HTTP front's server (aiohttp) loads only for a
#: trainer that uses it, not for every process that runs the service.
_LAZY = {
    "ServiceFront": "agentkit.service._http",
    "group_json": "agentkit.service._http",
    "ServiceActor": "agentkit.service._ray",
    "serve_on_ray": "agentkit.service._ray",
}


def __getattr__(name: str) -> Any:
    # deferred: aiohttp's web server, for the HTTP front only
    return lazy_attribute("agentkit.service", _LAZY, globals(), name)
