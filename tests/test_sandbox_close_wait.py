"""A rollout waits for its sandbox's close: a slow close is logged with the step it is
at and waited for on (not cut off, which left a compose project behind under load);
only the run's ``sandbox_close_timeout`` cuts it, and says what may be left."""

from __future__ import annotations

import asyncio
import logging

import pytest

from agentkit import RunContext
from agentkit.env import _attempt
from agentkit.env._attempt import RolloutWork
from agentkit.env._rubric_compile import CompiledRubric

pytestmark = pytest.mark.anyio


class _HeldClose:
    """A sandbox whose close is held until the test lets it go (a slow engine)."""

    def __init__(self) -> None:
        self.rollout_id = "held-r0"
        self.close_step: str | None = None
        self.release = asyncio.Event()
        self.closed = False
        self.cancelled = False

    async def __aexit__(self, *exc: object) -> None:
        self.close_step = "docker compose down of agentkit-test"
        try:
            await self.release.wait()
        except asyncio.CancelledError:
            self.cancelled = True
            raise
        self.closed = True


def _work(timeout: float) -> RolloutWork:
    return RolloutWork(
        harness=object(), rubric=CompiledRubric(), context=RunContext(),
        sandbox_close_timeout=timeout,
    )  # fmt: skip


async def test_a_slow_close_is_logged_with_its_step_and_waited_for(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(_attempt, "SLOW_CLOSE_SEC", 0.0)
    box = _HeldClose()
    caplog.set_level(logging.WARNING, logger="agentkit")
    closing = asyncio.ensure_future(_work(timeout=3600).close_sandbox(box))
    # the note comes while the close is held; then the close is let go
    while not any("takes longer" in r.getMessage() for r in caplog.records):
        await asyncio.sleep(0)  # a turn of the loop, not a wait for time
    assert not closing.done()
    box.release.set()
    await closing
    assert box.closed and not box.cancelled
    messages = [r.getMessage() for r in caplog.records]
    assert any(
        "closing sandbox held-r0 takes longer than 0 s (at: docker compose down of "
        "agentkit-test); waiting for it up to 3600 s" in m
        for m in messages
    ), messages
    assert not any("did not finish" in m for m in messages), messages


async def test_only_the_close_timeout_cuts_a_close_short(
    caplog: pytest.LogCaptureFixture,
) -> None:
    box = _HeldClose()  # never let go
    caplog.set_level(logging.WARNING, logger="agentkit")
    await _work(timeout=0.05).close_sandbox(box)
    assert box.cancelled and not box.closed
    messages = [r.getMessage() for r in caplog.records]
    assert any(
        "closing sandbox held-r0 did not finish in 0 s (at: docker compose down of "
        "agentkit-test): what it runs may be left behind" in m
        for m in messages
    ), messages


def test_the_default_close_timeout_outlasts_a_compose_down() -> None:
    """A compose project's down is bounded at 300 s itself: a rollout waits that long."""
    from agentkit.env._runner import RunnerOptions

    assert RunnerOptions().sandbox_close_timeout >= 300.0
    assert RunnerOptions().sandbox_close_timeout > _attempt.SLOW_CLOSE_SEC
