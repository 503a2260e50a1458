"""Codex by name through AgentEnv and ``agentkit run`` on a Harbor example task,
graded by its own verifier (local sandbox): agentkit's suite for program harnesses,
and what is Codex's own (it retries a stream that broke)."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from agentkit_codex import CODEX_VERSION

import agentkit.runs
from agentkit import AgentEnv
from agentkit.programs import ProgramBinary
from agentkit.testing.model_server import ScriptedModelServer
from agentkit.testing.program_suite import (
    SUITE_API_KEY,
    SUITE_API_KEY_ENV,
    hello_world_script,
    program_harness_suite,
)
from agentkit.testing.programs import harbor_rollout, need_harbor_task
from agentkit.testing.sandbox_fixtures import requires_bwrap

EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "harbor"

HELLO_WORLD = hello_world_script(tool="exec_command", command_key="cmd")

#: Its calls are the Responses API, streamed: the token ids the server's
#: ``enable_response_messages`` answer carried, no logprobs (a note says why);
#: translated, served from chat completions with ids and logprobs.
TestCodex = program_harness_suite(
    "codex",
    tasks=EXAMPLES,
    fixtures=("codex_bin",),
    script=HELLO_WORLD,
    raw={"codex_version": CODEX_VERSION},
    protocol="responses",
    stream=True,
    tokens="ids",
    token_note="logprobs",
    translated=True,
)


#: The hello-world script with the model reasoning first (translated: a reasoning item),
#: its first answer breaking off after two chunks, once (codex retries). A server that
#: returns token ids counts a completion's tokens as its ids (vLLM's usage): no rule keeps
#: a completion_tokens of its own, which the proxy would take for ids that went missing.
BROKEN_ONCE: dict[str, Any] = copy.deepcopy(HELLO_WORLD)
BROKEN_ONCE["rules"][0]["reply"]["reasoning"] = "Write it with printf."
for _rule in BROKEN_ONCE["rules"]:
    _rule["reply"]["usage"].pop("completion_tokens")
BROKEN_ONCE["rules"].insert(
    0,
    {
        "match": {"after_tool": False},
        "times": 1,
        "reply": {"content": "I will create the file with printf.", "fail": "broken_stream"},
    },
)


@requires_bwrap
@pytest.mark.anyio
@pytest.mark.model_script(BROKEN_ONCE)
async def test_a_stream_that_breaks_is_retried_and_only_the_retry_is_trained(
    model_server: ScriptedModelServer,
    codex_bin: ProgramBinary,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The server breaks codex's first stream after two chunks; codex retries the same
    request. The broken call keeps its two sampled tokens apart (never a completion), the
    retry continues the rollout's sequence as if the broken call had not happened, and
    ``agentkit export`` writes one sequence of the retry and the next call, the rollout
    complete (translation mode, token ids)."""
    need_harbor_task(EXAMPLES / "hello-world")
    monkeypatch.setenv(SUITE_API_KEY_ENV, SUITE_API_KEY)
    model_server.set_api_key(SUITE_API_KEY)
    model_server.set_apis({"chat"})
    run_dir = tmp_path / "run"
    rollout = await harbor_rollout(
        AgentEnv.from_names(f"harbor:{EXAMPLES}", "codex"),
        "harbor:hello-world",
        server=model_server,
        out=run_dir,
        api_key_env=SUITE_API_KEY_ENV,
        sandbox_options={"image": "host"},
        token_ids=True,
        translate_to_chat=True,
    )
    assert rollout.rewards["core.reward"] == 1.0
    broken, retry, *rest = agentkit.runs.open(run_dir).calls(rollout.rollout_id)
    assert broken.error is not None and broken.error.startswith("the answer broke off")
    assert broken.completion_token_ids is None and len(broken.partial_token_ids or []) == 2
    assert retry.prompt_token_ids == broken.prompt_token_ids  # the same request again
    assert retry.has_tokens and rest and all(c.has_tokens for c in rest)
    out = tmp_path / "export.jsonl"
    exported = subprocess.run(
        [sys.executable, "-m", "agentkit", "export", str(run_dir), "--out", str(out)],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert exported.returncode == 0, exported.stderr
    assert "incomplete" not in exported.stderr
    [record] = [json.loads(line) for line in out.read_text().splitlines()]
    assert record["calls"] == [retry.index, *(c.index for c in rest)]
    assert record["token_issues"] == [] and record["sequence_start"] == "first"
