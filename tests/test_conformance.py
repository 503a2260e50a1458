"""The conformance suite on the built-in harness, and a meta-test: every harness that a
first-party distribution registers runs the suite in its own tests."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from agentkit import HarnessResult, RunContext, Task, registry
from agentkit.testing.conformance import (
    CONFORMANCE_API_KEY,
    ConformanceError,
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


def test_every_first_party_harness_runs_the_conformance_suite() -> None:
    sources = _conformance_sources()
    first_party = {"agentkit"} | {p.name for p in (ROOT / "plugins").iterdir() if p.is_dir()}
    missing = []
    for plugin in registry.plugins():
        if plugin.distribution not in first_party:
            continue
        for name in plugin.registers.get("harness", []):
            pattern = rf"harness_conformance_test\(\s*[\"']{re.escape(name)}[\"']"
            if not re.search(pattern, sources):
                missing.append(f"{name} ({plugin.distribution})")
    assert not missing, (
        "these harnesses have no conformance test; add one line to their tests: "
        "test_conformance = harness_conformance_test(NAME, script=...): " + ", ".join(missing)
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
