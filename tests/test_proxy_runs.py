"""Runs through the model proxy: every model call recorded in the run directory, read back
by agentkit.runs and agentkit show, with no secret in any file (chat harness, JSONL)."""

from __future__ import annotations

import json
import os
import ssl
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
from click.testing import CliRunner

import agentkit.runs
from agentkit import HarnessResult, ListTaskset, RunContext, SpecError, Task
from agentkit.cli._show_cmd import show_cmd
from agentkit.env import AgentEnv
from agentkit.secrets import registered_secrets
from agentkit.testing.model_server import ScriptedModelServer
from agentkit.testing.programs import assert_calls_carry_the_server_tokens, files_containing

pytestmark = pytest.mark.anyio

KEY = "sk-proxy-run-key-0c4f1e8b2d"
SCRIPT = {
    "rules": [
        {"match": {"turn": 0}, "reply": {"content": "first answer", "reasoning": "hmm"}},
        {"match": {"turn": 1}, "reply": {"content": f"second, and the key is {KEY}"}},
    ]
}


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def tasks_file(tmp_path: Path) -> Path:
    path = tmp_path / "qa.jsonl"
    rows = [
        {
            "id": "two",
            "input": [{"role": "user", "content": "one?"}, {"role": "user", "content": "two?"}],
        },
        {"id": "one", "input": "just one?"},
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


async def test_every_call_is_recorded_and_no_secret_is(
    tmp_path: Path,
    tasks_file: Path,
    model_server: ScriptedModelServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The chat harness's calls, through the proxy with token ids: in calls/, with the
    server's ids, the real key sent upstream only (the server even echoes it back)."""
    monkeypatch.setenv("AGENTKIT_TEST_PROXY_KEY", KEY)
    model_server.set_script(SCRIPT)
    model_server.set_api_key(KEY)
    run = tmp_path / "run"
    env = AgentEnv.from_names(f"jsonl:{tasks_file}", "chat", stream=True)
    results = await env.evaluate(
        model="scripted-model",
        base_url=model_server.base_url,
        api_key_env="AGENTKIT_TEST_PROXY_KEY",
        out=run,
        token_ids=True,
        cache_salt="policy-3",
    )
    assert {r.status for r in results.rollouts} == {"completed"}
    assert all(r.api_key_sent for r in model_server.model_requests)
    reader = agentkit.runs.open(run)
    two = reader.rollout("two")
    assert two.calls == 2 and two.calls_file == f"calls/{two.rollout_id}.jsonl"
    calls = [c for r in reader.rollouts(0, 10) for c in reader.calls(r.rollout_id)]
    assert assert_calls_carry_the_server_tokens(calls, model_server) == calls
    by_id = {r.rollout_id: reader.calls(r.rollout_id) for r in reader.rollouts(0, 10)}
    first, second = by_id[two.rollout_id]
    assert (first.index, second.index) == (0, 1) and first.started_at <= second.started_at
    assert first.session_id == second.session_id and first.session_id.startswith(two.rollout_id)
    assert first.forwarded["cache_salt"] == "policy-3" and first.stream
    assert first.response["choices"][0]["message"]["reasoning_content"] == "hmm"
    # the key the server echoed is redacted in the record; it is in no file of the run
    assert KEY not in json.dumps(second.response) and "***" in json.dumps(second.response)
    assert files_containing(run, KEY) == []
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["options"]["token_ids"] is True
    assert manifest["context"]["base_url"] == model_server.base_url  # the real endpoint

    runner = CliRunner()
    shown = runner.invoke(show_cmd, [str(run), "--rollout", "two"])
    assert shown.exit_code == 0, shown.output
    assert "Model calls: 2" in shown.output
    assert "Token ids: complete (2 calls, 2 sequences)" in shown.output
    listed = runner.invoke(show_cmd, [str(run), "--rollout", "two", "--calls"])
    assert listed.exit_code == 0, listed.output
    lines = listed.output.splitlines()
    assert lines[1].startswith("[0] chat stream scripted-model  200 stop  ttft ")
    assert "token ids: " in lines[2] and "(with logprobs)" in lines[2]
    dumped = runner.invoke(show_cmd, [str(run), "--rollout", "two", "--calls", "--json"])
    assert [c["index"] for c in json.loads(dumped.output)] == [0, 1]
    refused = runner.invoke(show_cmd, [str(run), "--calls"])
    assert refused.exit_code == 2 and "give --rollout ID" in refused.output


async def test_route_keys_do_not_pile_up_in_the_redactor(
    tmp_path: Path, tasks_file: Path, model_server: ScriptedModelServer
) -> None:
    """The chat harness is given each rollout's route key as its API key; the chat client
    registers the keys it is given as secrets, but not a route key (no secret: it opens
    nothing once its rollout ends), or every rollout of a run would add one more string
    that every later line written must be searched for."""
    before = registered_secrets()
    env = AgentEnv.from_names(f"jsonl:{tasks_file}", "chat")
    results = await env.evaluate(
        model="scripted-model", base_url=model_server.base_url, out=tmp_path / "run"
    )
    assert len(results.rollouts) == 2 and len(model_server.model_requests) == 3
    added = registered_secrets() - before
    assert not [s for s in added if s.startswith("akp-")]


async def test_a_rollout_without_token_ids_says_which_calls_and_why(
    tmp_path: Path, tasks_file: Path, model_server: ScriptedModelServer
) -> None:
    run = tmp_path / "run"
    env = AgentEnv.from_names(f"jsonl:{tasks_file}", "chat")
    await env.evaluate(model="scripted-model", base_url=model_server.base_url, out=run)
    two = agentkit.runs.open(run).rollout("two")
    note = "token ids were not asked for (the run's token_ids option is off)"
    assert two.calls_without_tokens == [{"note": note, "calls": [0, 1]}]
    shown = CliRunner().invoke(show_cmd, [str(run), "--rollout", "two"])
    assert (
        f"Token ids: incomplete (2 calls, 0 sequences): 2 calls not trained (call 0: {note}"
    ) in shown.output


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
async def test_a_completion_missing_token_ids_is_recorded_as_not_exact(
    tmp_path: Path, tasks_file: Path, model_server: ScriptedModelServer, stream: bool
) -> None:
    """The server loses the ids of one piece of the first answer (as vLLM's tool parsers
    lost streamed chunks; its usage still counts them): the call records no ids but a
    note saying what differs, the rollout is incomplete, ``--require-token-ids``
    refuses it, and the agent got the answer as the server sent it."""
    gap = {"content": "first answer", "chunk_size": 4, "drop_token_chunks": [1]}
    model_server.set_script({"rules": [{"match": {"turn": 0}, "reply": gap}, *SCRIPT["rules"][1:]]})
    run = tmp_path / "run"
    env = AgentEnv.from_names(f"jsonl:{tasks_file}", "chat", stream=stream)
    results = await env.evaluate(
        model="scripted-model", base_url=model_server.base_url, out=run, token_ids=True
    )
    assert {r.status for r in results.rollouts} == {"completed"}
    reader = agentkit.runs.open(run)
    two = reader.rollout("two")
    first, second = reader.calls(two.rollout_id)
    assert first.prompt_token_ids is None and first.completion_token_ids is None
    assert first.completion_logprobs is None and first.token_source == "none"
    note = (
        "the completion's token ids are not all there: 4 ids, but usage.completion_tokens "
        "is 5 (the server lost some, as vLLM's tool parsers did with streamed chunks)"
    )
    assert first.token_note == note
    assert first.response["choices"][0]["message"]["content"] == "first answer"
    assert second.has_tokens and second.token_note is None
    assert two.calls_without_tokens == [{"note": note, "calls": [0]}]
    shown = CliRunner().invoke(show_cmd, [str(run), "--rollout", "two"])
    assert f"Token ids: incomplete (2 calls, 1 sequences): 1 calls not trained (call 0: {note}" in (
        shown.output
    )
    refused = subprocess.run(
        [sys.executable, "-m", "agentkit", "export", str(run), "--require-token-ids",
         "--out", str(tmp_path / "out.jsonl")],
        capture_output=True, text=True, check=False, timeout=120,
    )  # fmt: skip
    assert refused.returncode == 2 and f"call 0: {note}" in refused.stderr
    assert not (tmp_path / "out.jsonl").exists()


async def test_ids_that_disagree_with_their_logprobs_are_recorded_as_not_exact(
    tmp_path: Path, tasks_file: Path, model_server: ScriptedModelServer
) -> None:
    """A completion with 3 ids, a usage of 3, and 2 logprobs: not exact either."""
    entries = [{"token": t, "logprob": -0.5, "top_logprobs": []} for t in ("fi", "ne")]
    body = {
        "id": "c1", "object": "chat.completion", "model": "scripted-model",
        "prompt_token_ids": [1, 2],
        "choices": [{"index": 0, "finish_reason": "stop", "token_ids": [7, 8, 9],
                     "message": {"role": "assistant", "content": "fine"},
                     "logprobs": {"content": entries}}],
        "usage": {"prompt_tokens": 2, "completion_tokens": 3, "total_tokens": 5},
    }  # fmt: skip
    model_server.set_script({"default": {"body": body}})
    path = tmp_path / "one.jsonl"
    path.write_text(json.dumps({"id": "one", "input": "hi"}) + "\n")
    env = AgentEnv.from_names(f"jsonl:{path}", "chat")
    results = await env.evaluate(
        model="scripted-model", base_url=model_server.base_url, token_ids=True
    )
    (call,) = results.rollouts[0].model_calls
    assert not call.has_tokens and call.token_note == (
        "the completion's token ids are not all there: 3 ids, but 2 logprobs "
        "(one per sampled token)"
    )


async def test_the_chat_harness_keeps_its_own_token_fields(
    tasks_file: Path, model_server: ScriptedModelServer
) -> None:
    """A harness that asks for token ids itself gets them through the proxy, untouched
    (``-H token_ids=true``), and the proxy records them too: no run directory, so the
    records stay on the rollout in memory."""
    env = AgentEnv.from_names(f"jsonl:{tasks_file}", "chat", token_ids=True)
    results = await env.evaluate(model="scripted-model", base_url=model_server.base_url)
    two = next(r for r in results.rollouts if r.task_id.endswith(":two"))
    assert two.calls == 2 and two.calls_file is None
    first, second = two.model_calls
    assert first.forwarded == {} and first.request["return_token_ids"] is True
    assert two.raw["prompt_token_ids"] == first.prompt_token_ids
    assert two.raw["completion_token_ids"][-len(second.completion_token_ids) :] == (
        second.completion_token_ids
    )


async def test_without_the_proxy_nothing_is_recorded(
    tmp_path: Path, tasks_file: Path, model_server: ScriptedModelServer
) -> None:
    run = tmp_path / "run"
    env = AgentEnv.from_names(f"jsonl:{tasks_file}", "chat")
    results = await env.evaluate(
        model="scripted-model", base_url=model_server.base_url, out=run, model_proxy=False
    )
    assert {r.calls for r in results.rollouts} == {0}
    assert not (run / "calls").exists()
    assert all("x-session-id" not in r.headers for r in model_server.model_requests)
    assert agentkit.runs.open(run).calls("two") == []


async def test_a_harness_with_its_own_endpoint_is_not_proxied(
    tmp_path: Path, tasks_file: Path, model_server: ScriptedModelServer
) -> None:
    env = AgentEnv.from_names(f"jsonl:{tasks_file}", "chat", base_url=model_server.base_url)
    results = await env.evaluate(
        model="scripted-model", base_url="http://127.0.0.1:9/v1", preflight=False
    )
    assert {r.status for r in results.rollouts} == {"completed"}
    assert {r.calls for r in results.rollouts} == {0}


def test_a_bad_session_header_is_one_clear_error(tasks_file: Path) -> None:
    with pytest.raises(SpecError, match="session_header must be an HTTP header name"):
        AgentEnv.from_names(f"jsonl:{tasks_file}", "chat").plan(session_header="X Session")
    proc = subprocess.run(
        [sys.executable, "-m", "agentkit", "run", f"jsonl:{tasks_file}", "chat",
         "--model", "m", "--session-header", "bad header", "--dry-run"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    assert "session_header must be an HTTP header name" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_an_https_endpoint_is_reached_through_the_proxy(tmp_path: Path, tasks_file: Path) -> None:
    """The real endpoint speaks https (a certificate of the test's own authority, trusted
    through SSL_CERT_FILE): the harness calls the proxy, the proxy the endpoint over TLS."""
    trustme = pytest.importorskip("trustme")
    authority = trustme.CA()
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    authority.issue_cert("127.0.0.1").configure_cert(context)
    bundle = tmp_path / "ca.pem"
    authority.cert_pem.write_to_path(str(bundle))
    run = tmp_path / "run"
    with ScriptedModelServer(SCRIPT, ssl=context, api_key=KEY) as server:
        assert server.base_url.startswith("https://")
        proc = subprocess.run(
            [sys.executable, "-m", "agentkit", "run", f"jsonl:{tasks_file}", "chat",
             "--model", "scripted-model", "--base-url", server.base_url,
             "--api-key-env", "AGENTKIT_TEST_PROXY_KEY", "--no-preflight", "--out", str(run)],
            capture_output=True, text=True, check=False, timeout=120,
            env={**os.environ, "SSL_CERT_FILE": str(bundle), "AGENTKIT_TEST_PROXY_KEY": KEY},
        )  # fmt: skip
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert len(server.model_requests) == 3 and all(
            r.api_key_sent for r in server.model_requests
        )
    reader = agentkit.runs.open(run)
    statuses = [c.status for r in reader.rollouts(0, 10) for c in reader.calls(r.rollout_id)]
    assert statuses == [200, 200, 200]


async def test_every_rollout_shares_one_connection_pool(
    tmp_path: Path, model_server: ScriptedModelServer
) -> None:
    """Through the proxy each rollout has a key of its own; the chat harness still keeps
    one pool of connections for the endpoint (the key goes with each request), not one
    pool per rollout left open after it."""
    import psutil

    path = tmp_path / "many.jsonl"
    path.write_text("".join(json.dumps({"id": f"q{i}", "input": "hi"}) + "\n" for i in range(24)))
    env = AgentEnv.from_names(f"jsonl:{path}", "chat")
    before = {c.laddr for c in psutil.Process().net_connections("tcp")}
    results = await env.evaluate(
        model="scripted-model", base_url=model_server.base_url, concurrency=2
    )
    assert {r.calls for r in results.rollouts} == {1}
    server_port = int(model_server.base_url.rsplit(":", 1)[1].split("/")[0])
    left = [
        c
        for c in psutil.Process().net_connections("tcp")
        if c.laddr not in before and c.raddr and c.raddr.port != server_port
    ]
    assert len(left) <= 2, left  # the pool's connections to the proxy, at most concurrency


def test_resume_keeps_the_proxy_settings_unless_given_again(tasks_file: Path) -> None:
    def run(*args: str) -> dict[str, object]:
        proc = subprocess.run(
            [sys.executable, "-m", "agentkit", "run", *args, "--json"],
            capture_output=True, text=True, check=False, timeout=120,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        return json.loads(proc.stdout)

    run_dir = tasks_file.parent / "run"
    script = Path(__file__).resolve().parents[1] / "examples" / "scripts" / "echo.json"
    run(f"jsonl:{tasks_file}", "chat", "--model", f"scripted:{script}", "--out", str(run_dir),
        "--token-ids", "--session-header", "X-Rollout", "--cache-salt", "s1",
        "--translate-to-chat")  # fmt: skip
    keys = ("model_proxy", "token_ids", "session_header", "cache_salt", "translate_to_chat")
    plan = run("--resume", str(run_dir), "--dry-run")["options"]
    assert {k: plan[k] for k in keys} == {  # type: ignore[index]
        "model_proxy": True,
        "token_ids": True,
        "session_header": "X-Rollout",
        "cache_salt": "s1",
        "translate_to_chat": True,
    }
    plan = run("--resume", str(run_dir), "--dry-run", "--no-session-header")["options"]
    assert plan["session_header"] is None and plan["token_ids"] is True  # type: ignore[index]


class ProbingAgent:
    """An agent that tries its key's authority before its one model call: it deletes a
    file of the account, then hides a call in a body Python's parser takes and the record
    could not show as a server reads it (``NaN``)."""

    async def run(
        self, task: Task, context: RunContext | None = None, on_event: Any = None
    ) -> HarnessResult:
        assert context is not None and context.base_url is not None
        headers = {"Authorization": f"Bearer {context.api_key}"}
        async with httpx.AsyncClient(
            base_url=context.base_url, headers=headers, timeout=30
        ) as client:
            deleted = await client.delete("/files/file-abc")
            hidden = await client.post(
                "/chat/completions",
                content=b'{"model": "scripted-model", "temperature": NaN, "messages": '
                b'[{"role": "user", "content": "what no record shows"}]}',
                headers={"content-type": "application/json"},
            )
            answer = await client.post(
                "/chat/completions",
                json={"model": context.model, "messages": [{"role": "user", "content": "hi"}]},
            )
        statuses = [deleted.status_code, hidden.status_code, answer.status_code]
        text = answer.json()["choices"][0]["message"]["content"]
        return HarnessResult(status="completed", output=text, raw={"statuses": statuses})


async def test_what_the_proxy_refuses_is_in_the_runs_records_and_never_trained(
    tmp_path: Path, model_server: ScriptedModelServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A whole run: the agent's refused requests (a path no model call has: 403; a body
    that is not strict JSON: 400) never reach the server, which checks the real key; the
    run's calls file has all three requests, agentkit show lists them, and agentkit export
    trains the one model call: the rollout is complete."""
    monkeypatch.setenv("AGENTKIT_TEST_PROXY_KEY", KEY)
    model_server.set_api_key(KEY)
    taskset = ListTaskset("t", [Task(task_id="t:1", input="hi")])
    run = tmp_path / "run"
    results = await AgentEnv(taskset, ProbingAgent(), contributors=()).evaluate(
        model="scripted-model",
        base_url=model_server.base_url,
        api_key_env="AGENTKIT_TEST_PROXY_KEY",
        out=run,
        token_ids=True,
    )
    [rollout] = results.rollouts
    assert rollout.status == "completed" and rollout.raw["statuses"] == [403, 400, 200]
    # the server saw the one model call, with the real key (and the run's look at its
    # model listing before the rollouts)
    seen = [(r.method, r.path, r.api_key_sent) for r in model_server.requests]
    assert [s for s in seen if s[:2] != ("GET", "/v1/models")] == [
        ("POST", "/v1/chat/completions", True)
    ]
    calls = agentkit.runs.open(run).calls(rollout.rollout_id)
    assert [(c.protocol, c.method, c.path, c.status) for c in calls] == [
        ("other", "DELETE", "/v1/files/file-abc", 403),
        ("chat", "POST", "/v1/chat/completions", 400),
        ("chat", "POST", "/v1/chat/completions", 200),
    ]
    assert "NaN is not a JSON number" in (calls[1].error or "")
    assert calls[0].request is None and calls[1].request is None and calls[2].has_tokens
    assert files_containing(run, KEY) == []

    listed = CliRunner().invoke(show_cmd, [str(run), "--rollout", rollout.rollout_id, "--calls"])
    assert listed.exit_code == 0, listed.output
    assert " 403 " in listed.output and " 400 " in listed.output
    out = tmp_path / "out.jsonl"
    exported = subprocess.run(
        [sys.executable, "-m", "agentkit", "export", str(run), "--require-token-ids",
         "--out", str(out)],
        capture_output=True, text=True, check=False, timeout=120,
    )  # fmt: skip
    assert exported.returncode == 0, exported.stderr
    [record] = [json.loads(line) for line in out.read_text().splitlines()]
    assert record["calls"] == [2] and record["token_issues"] == []
