"""The step protocol: a harness's loop driven one model response at a time.

``Harness.run`` owns the model calls. Training stacks (SkyRL, Tinker loops)
own them instead: they sample the policy themselves and hand each response
to the environment. A harness that supports this offers
``episode(task, context=None, on_event=None)``, returning an
:class:`Episode`; the caller then does::

    episode = harness.episode(task, context)
    chat_history, metadata = await episode.init()
    try:
        while True:
            action = policy(chat_history)            # the caller's model call
            out = await episode.step(action)         # StepOutput
            chat_history += [{"role": "assistant", "content": action}, *out.observations]
            if out.done:
                break
    finally:
        await episode.close()

The shapes follow skyrl-gym's ``BaseTextEnv`` (``init`` returns the chat
history and metadata, ``step`` returns observations, reward, done and
metadata), so a bridge only converts types.

A harness whose episode needs the task's taskset (the terminal harness: its
sandbox is made from the taskset's execution hints, and it grades itself with
the taskset's rubric) takes it as the keyword ``taskset=``. A caller that has
the taskset opens episodes with :func:`open_episode`, which passes it to the
harnesses that take it and leaves the others as they are.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

import attrs

from agentkit._context import RunContext
from agentkit._errors import HarnessError
from agentkit._events import EventCallback
from agentkit._task import Task

__all__ = [
    "Episode",
    "EpisodeForkError",
    "ForkableEpisode",
    "StepCapableHarness",
    "StepOutput",
    "fork_episode",
    "is_step_capable",
    "open_episode",
]


class EpisodeForkError(HarnessError):
    """An episode cannot fork: its harness offers no ``fork``, or not in its present state
    (not started, over, closed), or its environment cannot copy its state (a hosted one)."""


@attrs.frozen(kw_only=True)
class StepOutput:
    """One step's result, shaped like skyrl-gym's ``BaseTextEnvStepOutput``.

    Read it as attributes (``out.done``) or, like skyrl-gym's TypedDict, by
    key (``out["done"]``, ``out.get("metadata")``).

    ``observations`` are the messages to append after the action (tool
    results, a format reminder; possibly none); ``reward`` is the reward
    earned by this step (0.0 until the end for harnesses that score the
    whole rollout); ``done`` ends the episode; ``metadata`` is the harness's
    own per-step detail (JSON-serializable).
    """

    observations: list[dict[str, Any]]
    reward: float
    done: bool
    metadata: dict[str, Any] = attrs.field(factory=dict)

    #: The keys ``out["..."]`` accepts: those of skyrl-gym's ``BaseTextEnvStepOutput``.
    KEYS = ("observations", "reward", "done", "metadata")

    def __getitem__(self, key: str) -> Any:
        """``out["observations"]``, ``out["reward"]``...: read like skyrl-gym's TypedDict,
        as training loops written for it (SkyRL's, the Tinker loop) do."""
        if key not in StepOutput.KEYS:
            raise KeyError(key)
        return getattr(self, key)

    def get(self, key: str, default: Any = None) -> Any:
        """``out.get("metadata", {})``, like a dict."""
        return getattr(self, key) if key in StepOutput.KEYS else default

    def keys(self) -> tuple[str, ...]:
        """``observations``, ``reward``, ``done``, ``metadata``."""
        return StepOutput.KEYS

    def __contains__(self, key: object) -> bool:
        return key in StepOutput.KEYS


@runtime_checkable
class Episode(Protocol):
    """One rollout of one task, advanced by the caller's model responses.

    Call :meth:`init` once, then :meth:`step` until a step says ``done``,
    and always :meth:`close` (also after a failure or an early stop).
    """

    async def init(self) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        """Start the rollout; the chat history to prompt the policy with, and metadata."""
        ...

    async def step(self, action: str) -> StepOutput:
        """Apply the policy's response text ``action``."""
        ...

    async def close(self) -> None:
        """Release the rollout's resources (idempotent)."""
        ...


@runtime_checkable
class ForkableEpisode(Episode, Protocol):
    """An episode that can branch: an optional capability beside :class:`Episode`.

    A harness whose episode can copy its state (chat history, counters and
    environment) offers :meth:`fork`; others simply have none. Callers go
    through :func:`fork_episode`.
    """

    async def fork(self, n: int, *, rollout_ids: Sequence[str] | None = None) -> list[Episode]:
        """``n`` new, started episodes continuing from this one's state now.

        ``rollout_ids`` names the children (default: this episode's rollout
        id with ``.b<i>``).

        Each has this episode's chat history, turn count and counters, and a
        copy of its environment (files, databases) as it is at the fork; they
        are independent of this episode and of each other afterwards (what
        one does, none of the others sees), and closing any of them, or this
        one, affects no other. This episode goes on as before. The caller
        closes every child. Raises :class:`EpisodeForkError` when it cannot
        fork now (not started, over, closed), leaving it as it was.
        """
        ...


@runtime_checkable
class StepCapableHarness(Protocol):
    """A harness whose loop the caller can drive one model response at a time."""

    def episode(
        self,
        task: Task,
        context: RunContext | None = None,
        on_event: EventCallback | None = None,
    ) -> Episode:
        """A fresh, not yet started :class:`Episode` of ``task``.

        ``context`` supplies limits (``max_turns``), the sandbox and the
        rollout id; its model fields are unused, since the caller samples.
        ``on_event`` receives the episode's events as in ``Harness.run``.
        A harness may also take the task's taskset as the keyword
        ``taskset=`` (see :func:`open_episode`).
        """
        ...


def is_step_capable(harness: Any) -> bool:
    """True when ``harness`` offers ``episode(task, context=None, on_event=None)``."""
    return callable(getattr(harness, "episode", None))


def _takes_taskset(episode: Any) -> bool:
    try:
        params = inspect.signature(episode).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(
        p.kind is inspect.Parameter.VAR_KEYWORD
        or (p.name == "taskset" and p.kind is not inspect.Parameter.POSITIONAL_ONLY)
        for p in params
    )


def open_episode(
    harness: Any,
    task: Task,
    context: RunContext | None = None,
    on_event: EventCallback | None = None,
    *,
    taskset: Any = None,
) -> Episode:
    """``harness.episode(task, context, on_event)``, with ``taskset=`` when it takes one.

    ``taskset`` is the task's taskset, passed only to a harness whose
    ``episode`` declares a ``taskset`` keyword (the terminal harness makes its
    sandbox from the taskset's execution hints and grades with its rubric);
    others never see it. A harness that is not step-capable is a
    :class:`~agentkit.HarnessError` naming it.
    """
    if not is_step_capable(harness):
        raise HarnessError(
            f"harness {getattr(harness, 'name', None) or type(harness).__name__!r} is not "
            "step-capable: it offers no episode(task, context=None, on_event=None) returning "
            "an agentkit.Episode (async init()/step(action)/close()); the terminal and "
            "fleet-tool-call harnesses do"
        )
    if taskset is not None and _takes_taskset(harness.episode):
        episode: Episode = harness.episode(task, context, on_event, taskset=taskset)
    else:
        episode = harness.episode(task, context, on_event)
    return episode


def _who(episode: Any) -> str:
    harness = getattr(episode, "harness_name", None)
    return str(harness) if harness else type(episode).__name__


async def fork_episode(
    episode: Any, n: int, *, rollout_ids: Sequence[str] | None = None
) -> list[Episode]:
    """``episode.fork(n)``: ``n`` independent episodes continuing from ``episode``'s state.

    ``n`` must be at least 1; ``rollout_ids`` (``n`` of them) names the
    children, passed on only when given. An episode without ``fork`` (its harness cannot
    copy its state) raises :class:`EpisodeForkError` naming it, as the
    episode's own ``fork`` does when it cannot fork now (see
    :class:`ForkableEpisode`).
    """
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise EpisodeForkError(f"fork_episode: n must be a positive integer, got {n!r}")
    fork = getattr(episode, "fork", None)
    if not callable(fork):
        raise EpisodeForkError(
            f"episode of {_who(episode)!r} cannot fork: {type(episode).__name__} has no "
            "fork(n); the terminal and fleet-tool-call harnesses' episodes can"
        )
    if rollout_ids is not None:
        ids = list(rollout_ids)
        if len(ids) != n:
            raise EpisodeForkError(f"fork_episode: {len(ids)} rollout ids for {n} children")
        named: list[Episode] = await fork(n, rollout_ids=ids)
        return named
    children: list[Episode] = await fork(n)
    return children
