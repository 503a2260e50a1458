"""A slow or overloaded model server: `request_timeout` bounds a whole model call (a server
dripping its answer never holds a rollout past it), and a server's Retry-After decides when
the runner tries again."""

from __future__ import annotations

import email.utils
import time
from pathlib import Path
from typing import Any

import pytest

from agentkit import RunContext, Task
from agentkit.env import AgentEnv
from agentkit.harnesses.chat import ChatHarness, retry_after_seconds
from agentkit.testing.model_server import ScriptedModelServer

pytestmark = pytest.mark.anyio

#: The server sends one byte every DRIP seconds: each read is quick, the whole answer
#: takes far longer than TIMEOUT (about 250 bytes of body, 12 s).
DRIP = {"content": "x" * 100, "chunk_size": 1, "chunk_delay": 0.05}
TIMEOUT = 0.5
ARITHMETIC = Path(__file__).parent.parent.parent / "examples" / "jsonl" / "arithmetic.jsonl"


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
async def test_a_dripping_server_cannot_hold_a_call_past_request_timeout(
    model_server: ScriptedModelServer, stream: bool
) -> None:
    model_server.set_script({"default": DRIP})
    harness = ChatHarness(request_timeout=TIMEOUT, stream=stream)
    async with harness:
        result = await harness.run(
            Task(task_id="t:1", input="hi"), RunContext(model="m", base_url=model_server.base_url)
        )
    assert result.status == "failed" and result.error_kind == "model_connection"
    assert f"request_timeout={TIMEOUT:g}s" in (result.error or "")
    assert result.usage.requests == 0  # no answer was taken from the half-read reply


async def test_through_agentenv_the_timed_out_call_is_an_infrastructure_failure(
    model_server: ScriptedModelServer,
) -> None:
    model_server.set_script({"default": DRIP})
    env = AgentEnv.from_names(f"jsonl:{ARITHMETIC}", "chat", request_timeout=TIMEOUT)
    results = await env.evaluate(
        limit=1, model="m", base_url=model_server.base_url, max_retries=1, retry_base_delay=0.01
    )
    rec = results.rollouts[0]
    assert rec.error_kind == "model_connection" and rec.infra_error and rec.attempts == 2
    assert "request_timeout=0.5s" in (rec.error or "")


@pytest.mark.parametrize("status", [429, 503])
async def test_the_runner_waits_as_long_as_retry_after_says(
    model_server: ScriptedModelServer, status: int
) -> None:
    model_server.set_script(
        {
            "rules": [{"times": 1, "reply": {"status": status, "retry_after": 1.5}}],
            "default": {"content": "4"},
        }
    )
    env = AgentEnv.from_names(f"jsonl:{ARITHMETIC}", "chat")
    results = await env.evaluate(
        limit=1,
        model="m",
        base_url=model_server.base_url,
        retry_base_delay=0.001,  # without Retry-After the runner would retry at once
        retry_max_delay=0.01,
    )
    rec = results.rollouts[0]
    assert rec.status == "completed" and rec.attempts == 2
    assert rec.retries[0]["retry_after"] == 1.5 and rec.retries[0]["delay_s"] == 1.5
    first, second = model_server.chat_requests
    assert second.timestamp - first.timestamp >= 1.5


def test_retry_after_is_read_as_the_openai_client_reads_it() -> None:
    assert retry_after_seconds({"retry-after": "7"}) == 7.0
    assert retry_after_seconds({"retry-after-ms": "250", "retry-after": "7"}) == 0.25
    date = email.utils.formatdate(time.time() + 30, usegmt=True)
    wait = retry_after_seconds({"retry-after": date})
    assert wait is not None and 25 <= wait <= 30
    past = email.utils.formatdate(time.time() - 30, usegmt=True)
    assert retry_after_seconds({"retry-after": past}) == 0.0
    bad: dict[str, Any] = {"retry-after": "soon"}
    assert retry_after_seconds(bad) is None
    assert retry_after_seconds({"retry-after": "nan"}) is None
    assert retry_after_seconds({"retry-after": "-3"}) is None
    assert retry_after_seconds({}) is None
