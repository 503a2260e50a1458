"""Policy versions for rollouts on Ray workers: the rollout service's board, kept by an
actor.

The rollout service announces each policy on its own
:class:`~agentkit._policy.PolicyBoard`, in the driver. When its rollouts run
on Ray, their model proxies run in worker processes, so the Ray executor
keeps the policy in a :class:`PolicyKeeper` actor as well: the driver's board
sends it each new policy before ``set_policy`` returns (a publisher), and the
workers' routes follow a :class:`RemoteBoard`, which asks the actor for the
current policy as each call starts (so a call that starts after
``set_policy`` returned goes to the new policy, as on the local executor) and
tells it which version each call went to. The driver takes those notes from
the actor as they come (:func:`relay_calls`, a long poll) and tells its own
board, so the service sees the calls on workers as it sees its own (the
staleness bound's early stop).

This module is imported on worker nodes too; it imports Ray only inside functions.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from agentkit._policy import Policy, PolicyBoard

__all__ = ["PolicyKeeper", "RemoteBoard", "relay_calls", "start_keeper"]

_log = logging.getLogger("agentkit.executors")


class PolicyKeeper:
    """The actor (an async Ray actor) that holds the current policy for the workers and
    the calls' notes for the driver."""

    def __init__(self, first: Policy) -> None:
        self._policy = first
        self._notes: list[tuple[str, int]] = []
        self._arrived: asyncio.Event | None = None

    async def current(self) -> Policy:
        """The policy served now."""
        return self._policy

    async def announce(self, policy: Policy) -> None:
        """A new policy (the driver's board checked that its version grows)."""
        self._policy = policy

    async def called(self, rollout_id: str, version: int) -> None:
        """A call of rollout ``rollout_id`` started, sent to ``version``."""
        self._notes.append((rollout_id, version))
        if self._arrived is not None:
            self._arrived.set()

    async def take_notes(self) -> list[tuple[str, int]]:
        """The calls' notes not taken yet, waiting until there is one (the driver is
        the one taker)."""
        while not self._notes:
            self._arrived = asyncio.Event()
            await self._arrived.wait()
        notes, self._notes = self._notes, []
        return notes


class RemoteBoard(PolicyBoard):
    """A worker's board: the policy asked of the :class:`PolicyKeeper` before each call,
    each call told to it."""

    def __init__(self, keeper: Any, first: Policy) -> None:
        super().__init__(first)
        self._keeper = keeper

    async def refresh(self) -> None:
        """The keeper's current policy."""
        self._current = await self._keeper.current.remote()

    def called(self, rollout_id: str, version: int) -> None:
        """Told to the keeper (the driver's service hears of it from there)."""
        self._keeper.called.remote(rollout_id, version)


def start_keeper(ray: Any, board: PolicyBoard) -> Any:
    """A :class:`PolicyKeeper` actor holding ``board``'s policy, which ``board`` keeps
    current from now on (its publisher); its handle."""
    keeper = ray.remote(num_cpus=0)(PolicyKeeper).remote(board.current)
    board.add_publisher(lambda policy: keeper.announce.remote(policy))
    return keeper


async def relay_calls(keeper: Any, board: PolicyBoard) -> None:
    """Tell ``board`` of every call the workers tell ``keeper`` of, as they come, until
    cancelled (or the actor is gone)."""
    while True:
        try:
            notes = await keeper.take_notes.remote()
        except Exception as exc:  # the actor is gone (the run is closing, or it died)
            _log.debug("agentkit: the policy keeper stopped answering: %s", exc)
            return
        for rollout_id, version in notes:
            board.called(rollout_id, version)
