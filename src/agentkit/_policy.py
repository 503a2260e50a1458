"""Policy versions: which policy the model endpoint serves now, announced by a trainer.

A trainer that trains while rollouts run (``agentkit.service``) tells the
service each time a new policy is being served: a version number that only
grows, and where the policy is served (a new endpoint's base URL, a new model
or LoRA adapter name, or neither: the same endpoint with new weights). The
:class:`PolicyBoard` holds the current :class:`Policy`; the model proxy's
routes that follow a board (``ProxyRoute.follow``) send each call to the
current policy's endpoint and model and record its version on the call
(``ModelCall.policy_version``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import attrs

from agentkit._errors import SpecError

__all__ = ["CallWatcher", "Policy", "PolicyBoard", "Publisher"]


def _version(_instance: object, attribute: attrs.Attribute[int], value: int) -> None:
    if type(value) is not int or value < 0:
        raise SpecError(f"{attribute.name} must be a whole number (0 or more), got {value!r}")


def _text(_instance: object, attribute: attrs.Attribute[str | None], value: str | None) -> None:
    if value is not None and (type(value) is not str or not value.strip()):
        raise SpecError(f"{attribute.name} must be a non-empty string or None, got {value!r}")


@attrs.frozen(kw_only=True)
class Policy:
    """One policy version as the endpoint serves it.

    ``version``: the trainer's number for it (0 or more; each announcement's
    is larger than the last). ``base_url``: where it is served (None: the
    run's endpoint). ``model``: the model name calls are sent with (a new
    model or LoRA adapter; None: the name the agent sends).
    """

    version: int = attrs.field(validator=_version)
    base_url: str | None = attrs.field(default=None, validator=_text)
    model: str | None = attrs.field(default=None, validator=_text)


#: Told of each call as it starts: the rollout's id and the version the call goes to.
CallWatcher = Callable[[str, int], None]

#: Given each policy announced, sends it where other processes read it (awaited).
Publisher = Callable[[Policy], Awaitable[object]]


class PolicyBoard:
    """The policy served now; the routes that follow it read it at each call and tell it
    (:meth:`called`) which version each call goes to. ``on_call``: told of each call in
    this process (the rollout service watches for rollouts the staleness bound dooms).
    Rollouts in other processes (the Ray executor's workers) read a board of their own
    that asks where the policy is kept (:meth:`refresh`); :meth:`publish` sends each new
    policy there. Neither the watcher nor the publishers are carried when the board is
    pickled for another process."""

    def __init__(self, first: Policy, *, on_call: CallWatcher | None = None) -> None:
        self._current = first
        self.on_call = on_call
        self._publishers: list[Publisher] = []

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["on_call"] = None  # the watcher belongs to this process
        state["_publishers"] = []
        return state

    def add_publisher(self, publisher: Publisher) -> None:
        """Send every policy announced from now on to ``publisher`` too (awaited by
        :meth:`publish`): an executor whose rollouts run in other processes keeps their
        boards current with it."""
        self._publishers.append(publisher)

    async def publish(self) -> None:
        """Wait until the current policy is where every rollout reads it: the publishers
        have it. The rollout service awaits it after each :meth:`announce`."""
        for publisher in self._publishers:
            await publisher(self._current)

    async def refresh(self) -> None:
        """Bring :attr:`current` up to date before a call starts (the model proxy awaits
        it). This board holds the policy itself; a board in another process asks."""

    def called(self, rollout_id: str, version: int) -> None:
        """A call of rollout ``rollout_id`` starts, sent to policy ``version``."""
        if self.on_call is not None:
            self.on_call(rollout_id, version)

    @property
    def current(self) -> Policy:
        """The policy served now."""
        return self._current

    @property
    def version(self) -> int:
        """The current policy's version."""
        return self._current.version

    def announce(self, policy: Policy) -> None:
        """A new policy is served from now on; its version must be larger than the
        current one's (a :class:`~agentkit.SpecError` otherwise)."""
        if policy.version <= self._current.version:
            raise SpecError(
                f"policy version must grow: {policy.version} announced after "
                f"{self._current.version}"
            )
        self._current = policy
