"""The conformance suite on the built-in harness, and a meta-test: every harness that a
first-party distribution registers runs the suite in its own tests."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from agentkit import (
    EventRecorder,
    HarnessError,
    HarnessResult,
    RunContext,
    StepOutput,
    Task,
    registry,
)
from agentkit.testing.conformance import (
    CONFORMANCE_API_KEY,
    ConformanceError,
    check_episode,
    check_harness,
    harness_conformance_test,
)

ROOT = Path(__file__).resolve().parents[1]

test_chat_conforms = harness_conformance_test("chat", script="Hello from the chat harness.")
test_chat_stream_conforms = harness_conformance_test(
    "chat", options={"stream": True}, script={"default": {"content": "Hi", "reasoning": "hm"}}
)


def _rate_limited(result: HarnessResult) -> None:
    assert result.error_kind == "model_rate_limit"


test_chat_failure_conforms = harness_conformance_test(
    "chat", script={"default": {"fail": "rate_limit"}}, expect_status="failed", check=_rate_limited
)


def _conformance_sources() -> str:
    files = [*ROOT.glob("tests/**/*.py"), *ROOT.glob("plugins/*/tests/**/*.py")]
    return "\n".join(p.read_text() for p in files)


def _without(factory: str, step_capable_only: bool = False) -> list[str]:
    """First-party harnesses (``name (distribution)``) no test opts in with ``factory(NAME``."""
    sources = _conformance_sources()
    first_party = {"agentkit"} | {p.name for p in (ROOT / "plugins").iterdir() if p.is_dir()}
    missing = []
    for plugin in registry.plugins():
        if plugin.distribution not in first_party:
            continue
        for name in plugin.registers.get("harness", []):
            built_by = registry.get("harness", name).factory
            if step_capable_only and not callable(getattr(built_by, "episode", None)):
                continue
            if not re.search(rf"{factory}\(\s*[\"']{re.escape(name)}[\"']", sources):
                missing.append(f"{name} ({plugin.distribution})")
    return missing


def test_every_first_party_harness_runs_the_conformance_suite() -> None:
    missing = _without("harness_conformance_test")
    assert not missing, (
        "these harnesses have no conformance test; add one line to their tests: "
        "test_conformance = harness_conformance_test(NAME, script=...): " + ", ".join(missing)
    )


def test_every_first_party_step_capable_harness_runs_the_episode_checks() -> None:
    missing = _without("episode_conformance_test", step_capable_only=True)
    assert not missing, (
        "these step-capable harnesses have no episode conformance test; add one line to "
        "their tests: test_episode_conformance = episode_conformance_test(NAME, task=..., "
        "actions=[...]): " + ", ".join(missing)
    )


@pytest.mark.anyio
async def test_conformance_catches_a_bad_transcript_and_usage() -> None:
    from agentkit import Usage

    class Sloppy:
        async def run(
            self, task: Task, context: RunContext | None = None, on_event: object = None
        ) -> HarnessResult:
            task.require_payload()
            return HarnessResult(
                status="timeout",
                error="slow",
                messages=[
                    {"role": "robot", "content": "beep"},
                    {"role": "assistant", "tool_calls": [{"id": 1, "function": {"name": "x"}}]},
                    {"role": "tool", "tool_call_id": "nope", "content": ""},
                ],
                usage=Usage(input_tokens=5, cached_tokens=9, output_tokens=1, reasoning_tokens=2),
            )

    context = RunContext(api_key=CONFORMANCE_API_KEY)
    with pytest.raises(ConformanceError) as info:
        await check_harness(Sloppy(), Task(task_id="demo:1", input="hi"), context)
    message = str(info.value)
    for expected in (
        "without an error_kind",
        "messages[0].role is 'robot'",
        "messages[1].tool_calls[0].id must be a string",
        "messages[1].tool_calls[0].function.arguments must be JSON text",
        "messages[2].tool_call_id 'nope' answers no earlier tool call",
        "cached_tokens (9) exceeds input_tokens (5)",
        "reasoning_tokens (2) exceeds output_tokens (1)",
    ):
        assert expected in message


class _Countdown:
    """A step-capable harness whose episode is right, or broken on purpose (``sloppy``)."""

    name = "countdown"

    def __init__(self, sloppy: bool = False) -> None:
        self.sloppy = sloppy

    def episode(
        self, task: Task, context: RunContext | None = None, on_event: Any = None
    ) -> _CountdownEpisode:
        if not self.sloppy:
            task.require_payload()
        context = context or RunContext()
        return _CountdownEpisode(
            task, self.sloppy, EventRecorder(task.task_id, context.rollout_id, on_event)
        )

    async def run(
        self, task: Task, context: RunContext | None = None, on_event: Any = None
    ) -> HarnessResult:
        return HarnessResult(status="failed", error="stepped only", error_kind="harness_setup")


class _CountdownEpisode:
    def __init__(self, task: Task, sloppy: bool, recorder: EventRecorder) -> None:
        self.task, self.sloppy, self.recorder = task, sloppy, recorder
        self.left, self.started, self.closed = 2, False, 0

    async def init(self) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        self.started = True
        await self.recorder.emit("countdown.start")
        role = "robot" if self.sloppy else "user"
        return [{"role": role, "content": str(self.task.input)}], {"left": self.left}

    async def step(self, action: str) -> StepOutput:
        if not self.sloppy and (not self.started or self.left == 0):
            raise HarnessError("not steppable now")
        self.left -= 1
        done = self.left == 0
        if self.sloppy:
            return StepOutput(
                observations=[{"role": "user", "content": CONFORMANCE_API_KEY}],
                reward=float("nan"),
                done=False,
                metadata={"when": object()},
            )
        observations = [] if done else [{"role": "user", "content": f"{self.left} to go"}]
        return StepOutput(observations=observations, reward=float(done), done=done)

    async def close(self) -> None:
        self.closed += 1


@pytest.mark.anyio
async def test_episode_conformance_passes_a_right_episode_and_catches_a_broken_one() -> None:
    task = Task(task_id="demo:1", input="count down")
    context = RunContext(api_key=CONFORMANCE_API_KEY, rollout_id="r-1")
    outputs = await check_episode(_Countdown(), task, ["one", "two"], context)
    assert [o.reward for o in outputs] == [0.0, 1.0]
    with pytest.raises(ConformanceError) as info:
        await check_episode(_Countdown(sloppy=True), task, ["one", "two"], context)
    message = str(info.value)
    for expected in (
        "episode() of a bare reference task (no input) did not raise",
        "step() before init() did not raise",
        "init(): messages[0].role is 'robot'",
        "step 1: reward nan is not a finite number",
        "step 1's metadata is not JSON",
        "no step said done within the 2 actions given",
        "the API key appears in a step's output or an event",
    ):
        assert expected in message, message
    with pytest.raises(ConformanceError, match="is not step-capable"):
        await check_episode(registry.resolve_harness("chat"), task, ["hi"])
