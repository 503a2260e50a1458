"""What the tests of agent-program harnesses share (``codex``, ``claude-code``,
``opencode``, ``mini-swe-agent``): each plugin's tests drive its real program
against the scripted model server and use these to set up and to look.

- :func:`unique_task` and :func:`bound_sandbox` (a local sandbox that shows
  the program's host directories read-only) set up one run;
- :func:`sandbox_processes`, :func:`processes_with` and
  :func:`host_processes_with` look for processes left behind;
  :func:`files_containing` for a secret left in files;
  :func:`cancel_when_running` cancels a run once a command it started runs,
  :func:`cancel_while_the_model_is_called` once the program waits for a model
  answer that is held back; :func:`time_out_while_the_model_is_called` checks
  that a harness's own timeout ended a run while the program waited so;
- :func:`need_harbor_task` skips a test without the Harbor plugin or task;
  :func:`harbor_rollout` runs a harness on one Harbor task through
  :class:`~agentkit.AgentEnv`, :func:`agentkit_run` through the
  ``agentkit run`` command; :func:`telemetry_weights` and
  :func:`assert_key_only_reached_the_model` check what every such run must;
- :func:`assert_calls_carry_the_server_tokens` checks a rollout's model calls,
  as the model proxy recorded them, against what the server logged it sent;
  :func:`assert_exports_carry_the_server_tokens` checks what ``agentkit
  export`` writes for SkyRL, Tinker and verifiers against the same log, for a
  run of :func:`hello_world_token_script` (a merged call and a prefix break);
  :func:`assert_exports_hold_the_calls_tokens` checks that ``agentkit export``'s
  SkyRL, Tinker and verifiers files hold exactly those tokens, and
  :func:`exported_sequences` reads the sequences back out of such a file.

:func:`agentkit.testing.program_suite.program_harness_suite` builds the suite
every such plugin runs from these.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import agentkit.runs
from agentkit._calls import ModelCall
from agentkit._events import Event
from agentkit._result import HarnessResult
from agentkit._sandbox import ExecutionHints, Sandbox
from agentkit._task import Task
from agentkit.env import AgentEnv, RolloutRecord
from agentkit.testing.model_server import RecordedRequest, ScriptedModelServer

__all__ = [
    "TELEMETRY_WEIGHTS",
    "agentkit_run",
    "assert_calls_carry_the_server_tokens",
    "assert_exports_carry_the_server_tokens",
    "assert_exports_hold_the_calls_tokens",
    "assert_key_only_reached_the_model",
    "bound_sandbox",
    "cancel_when_running",
    "cancel_while_the_model_is_called",
    "exported_sequences",
    "files_containing",
    "harbor_rollout",
    "hello_world_token_script",
    "host_processes_with",
    "need_harbor_task",
    "processes_with",
    "sandbox_processes",
    "telemetry_weights",
    "time_out_while_the_model_is_called",
    "unique_task",
]

#: The weight-0 ``harness.*`` metrics of a program harness (``telemetry_rubric``).
TELEMETRY_WEIGHTS: dict[str, float] = {
    "harness.turns": 0.0,
    "harness.tool_calls": 0.0,
    "harness.tool_errors": 0.0,
    "harness.tokens": 0.0,
}

_LIST = "for p in /proc/[0-9]*; do tr '\\000' ' ' < $p/cmdline 2>/dev/null; echo; done"


def unique_task(prefix: str, text: str, namespace: str = "demo") -> Task:
    """A text task whose id (``<namespace>:<prefix>-<random>``) no other test uses,
    so a program's process or session can be found by it."""
    return Task(task_id=f"{namespace}:{prefix}-{uuid.uuid4().hex[:12]}", input=text)


async def bound_sandbox(
    sandbox_factory: Any,
    mount_dirs: Iterable[str | Path],
    server: ScriptedModelServer,
    *,
    workdir: str = "/app",
) -> Sandbox:
    """A started local sandbox (from the ``sandbox_factory`` fixture) working in
    ``workdir``, showing ``mount_dirs`` (the program's, from its binary or runtime)
    read-only, and forwarding the model endpoint of ``server``."""
    sandbox: Sandbox = await sandbox_factory(
        "local",
        hints=ExecutionHints(workdir=workdir, ro_binds=[str(d) for d in mount_dirs]),
        model_endpoint=server.base_url,
    )
    return sandbox


async def sandbox_processes(sandbox: Sandbox, needle: str) -> list[str]:
    """Command lines of the processes in ``sandbox``'s own pid namespace that contain
    ``needle`` (the listing command itself excluded)."""
    listing = await sandbox.exec(["/bin/sh", "-c", _LIST], timeout=60)
    return [line for line in listing.stdout.splitlines() if needle in line and "/proc/" not in line]


def processes_with(marker: str) -> list[tuple[int, str]]:
    """Live host processes (pid, command line) whose command line contains ``marker``
    (zombies have none; this process is left out)."""
    found: list[tuple[int, str]] = []
    me = os.getpid()
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == me:
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdline = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if marker in cmdline:
            found.append((int(entry), cmdline))
    return found


def host_processes_with(marker: str) -> list[str]:
    """The command lines of :func:`processes_with`."""
    return [cmdline for _, cmdline in processes_with(marker)]


async def cancel_when_running(
    run: Callable[[], Awaitable[object]], marker: str, *, within: float
) -> None:
    """Start ``run()`` (a harness run), wait (at most ``within`` seconds) until a host
    process whose command line contains ``marker`` runs (a command the program
    started), then cancel the run as a runner's timeout does. The run must not
    have finished, and no process with ``marker`` may be left."""
    import anyio

    sleeping = anyio.Event()

    async def watch() -> None:
        while not processes_with(marker):
            await anyio.sleep(0.1)
        sleeping.set()

    finished: list[object] = []

    async def start() -> None:
        finished.append(await run())

    async with anyio.create_task_group() as tg:
        tg.start_soon(watch)
        tg.start_soon(start)
        with anyio.fail_after(within):
            await sleeping.wait()
        tg.cancel_scope.cancel()
    assert finished == []
    assert not processes_with(marker)


async def cancel_while_the_model_is_called(
    run: Callable[[], Awaitable[object]],
    server: ScriptedModelServer,
    marker: str,
    *,
    within: float,
) -> list[RecordedRequest]:
    """Hold ``server``'s answers back, start ``run()`` (a harness run), wait until a
    model request whose body contains ``marker`` (the task's prompt, say) has reached
    the server, then cancel the run as a runner's timeout does: the program was
    waiting for the model when it was stopped. The run must not have finished;
    returns the model requests received. The answers stay held back (a program the
    cancellation failed to kill cannot finish on its own and leave no trace), until
    the caller's ``server.release()`` or the server's end. ``within`` seconds only
    bound the wait (a hang guard); the wait itself is on the server's signal."""
    import anyio

    server.hold()
    finished: list[object] = []
    received: list[RecordedRequest] = []

    async def start() -> None:
        finished.append(await run())
        tg.cancel_scope.cancel()  # it ended without its model's answer: said below

    reached = False
    async with anyio.create_task_group() as tg:
        tg.start_soon(start)
        with anyio.move_on_after(within):  # a hang guard
            count = 1
            while not any(marker in json.dumps(r.body, ensure_ascii=False) for r in received):
                received = await server.wait_for_requests(count)
                count = len(received) + 1
            reached = True
        tg.cancel_scope.cancel()
    ended = [getattr(r, "error", r) for r in finished]
    assert finished == [], f"the run ended before its model answered: {ended}"
    assert reached, (
        f"no model request with {marker!r} reached the server within {within:g} s "
        f"(it received {len(received)})"
    )
    return received


async def time_out_while_the_model_is_called(
    run: Callable[[], Awaitable[HarnessResult]],
    server: ScriptedModelServer,
    marker: str,
    *,
    timeout: float,
    within: float,
) -> HarnessResult:
    """Hold ``server``'s answers back and run ``run()`` (a harness run whose own timeout
    is ``timeout`` seconds) to its end: that timeout must have ended it while the program
    waited for the model. When the run returned, a model request whose body contains
    ``marker`` (the task's prompt, say) had reached the server and had not been answered
    (it is in :attr:`~agentkit.testing.model_server.ScriptedModelServer.held`), and the
    result is the timeout (status and error kind ``timeout``, an error saying ``within
    <timeout> s``). ``timeout`` must outlast the program's start-up (until its first
    model request); ``within`` seconds only bound the run (a hang guard). The answers
    stay held back until the caller's ``server.release()`` or the server's end. Returns
    the run's result."""
    import anyio

    server.hold()
    with anyio.fail_after(within):  # a hang guard: the harness's timeout must end the run
        result = await run()
    held = server.held
    received = server.model_requests

    def asks(request: RecordedRequest) -> bool:
        return marker in json.dumps(request.body, ensure_ascii=False)

    ended = f"{result.status} ({result.error_kind}): {result.error}"
    assert any(asks(r) for r in received), (
        f"the run ended before a model request with {marker!r} reached the server (it "
        f"received {len(received)}; was the {timeout:g} s timeout shorter than the "
        f"program's start-up?): {ended}"
    )
    assert any(asks(r) for r in held), (
        f"the model request with {marker!r} was answered, not held back, before the run "
        f"ended: {ended}"
    )
    assert (result.status, result.error_kind) == ("timeout", "timeout"), ended
    assert f"within {timeout:g} s" in (result.error or ""), ended
    return result


def files_containing(root: Path, needle: str) -> list[Path]:
    """Every regular file under ``root`` whose bytes contain ``needle``."""
    hits: list[Path] = []
    data = needle.encode()
    for path in root.rglob("*"):
        try:
            if path.is_file() and not path.is_symlink() and data in path.read_bytes():
                hits.append(path)
        except OSError:
            continue
    return hits


def telemetry_weights(env: AgentEnv) -> dict[str, float]:
    """The ``harness`` metrics of ``env``'s rubric and their weights (for a program
    harness: :data:`TELEMETRY_WEIGHTS`)."""
    metrics = env.describe_rubric()["metrics"]
    return {m["name"]: m["weight"] for m in metrics if m["namespace"] == "harness"}


def need_harbor_task(task_dir: Path) -> None:
    """Skip the running test (saying why) when the Harbor plugin is not installed
    or the Harbor task ``task_dir`` (an example of this repository) is missing."""
    import pytest

    pytest.importorskip("agentkit_harbor", reason="the Harbor plugin is not installed")
    if not (task_dir / "task.toml").exists():
        pytest.skip(f"the Harbor examples are not at {task_dir.parent}")


async def harbor_rollout(
    env: AgentEnv,
    task_id: str,
    *,
    server: ScriptedModelServer,
    out: Path,
    api_key_env: str | None = None,
    sandbox_options: Mapping[str, Any] | None = None,
    token_ids: bool = False,
    translate_to_chat: bool = False,
) -> RolloutRecord:
    """Evaluate ``env`` (a Harbor taskset and a harness, by name) on one task with
    the scripted model ``scripted-model`` of ``server``; the one rollout, which
    must have completed and been graded (its error or scoring errors say why
    not) and make the task's group. ``token_ids``, ``translate_to_chat``: the
    run's options (the model proxy asks the server for token ids; it serves
    Messages and Responses calls from the server's chat completions)."""
    kwargs: dict[str, Any] = {"api_key_env": api_key_env} if api_key_env else {}
    if token_ids:
        kwargs["token_ids"] = True
    if translate_to_chat:
        kwargs["translate_to_chat"] = True
    if sandbox_options is not None:
        kwargs["sandbox_options"] = dict(sandbox_options)
    results = await env.evaluate(
        task_ids=[task_id], model="scripted-model", base_url=server.base_url, out=out, **kwargs
    )
    [rollout] = results.rollouts
    assert rollout.status == "completed", rollout.error
    # A grading failure (the verifier's own error, a timeout) says so here.
    assert not rollout.scoring_errors, rollout.scoring_errors
    [group] = results.groups
    assert group.rollouts == [rollout]
    return rollout


def agentkit_run(
    *args: str, env: Mapping[str, str] | None = None, timeout: float = 280
) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    """Run ``agentkit run ARGS`` (in this interpreter, ``env`` added to the
    environment) with ``--out DIR`` among ``args``; it must succeed with one
    rollout. Its process (for its output) and that rollout's record."""
    proc = subprocess.run(
        [sys.executable, "-m", "agentkit", "run", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        env={**os.environ, **(env or {})},
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = Path(args[list(args).index("--out") + 1])
    [line] = (out / "rollouts.jsonl").read_text().splitlines()
    record: dict[str, Any] = json.loads(line)
    return proc, record


def _sent_body(call: ModelCall) -> Any:
    """The body the proxy sent the server for ``call``: the agent's request with what the
    proxy added, or for a call the proxy translated, its ``upstream_request``."""
    if call.upstream_protocol is not None:
        return call.upstream_request
    return {**call.request, **call.forwarded}


def assert_calls_carry_the_server_tokens(
    calls: Sequence[ModelCall], server: ScriptedModelServer
) -> list[ModelCall]:
    """Each recorded model call is one request ``server`` logged (the body the proxy
    sent: the agent's request with what the proxy added, or for a call the proxy
    translated, its ``upstream_request``), every logged model
    request is one of the calls, and each call carries exactly the token ids and
    logprobs the server's answer carried (its log's ``sent``), call by call; a call
    whose answer carried none has none, and a ``token_note`` saying why. Returns the
    calls that carry token ids."""
    logged = list(server.model_requests)
    assert len(calls) == len(logged), (
        f"{len(calls)} calls recorded, {len(logged)} model requests reached the server"
    )
    with_ids = []
    for call in calls:
        match = next((r for r in logged if r.body == _sent_body(call)), None)
        assert match is not None, (
            f"call {call.index} ({call.path}) matches no request the server got"
        )
        logged.remove(match)
        sent = match.sent
        assert call.prompt_token_ids == sent.get("prompt_token_ids"), f"call {call.index}"
        assert call.completion_token_ids == sent.get("completion_token_ids"), f"call {call.index}"
        assert call.completion_logprobs == sent.get("completion_logprobs"), f"call {call.index}"
        if call.has_tokens:
            assert call.token_source == "server"
            with_ids.append(call)
        else:
            assert call.token_note, f"call {call.index} has no token ids and no note saying why"
    return with_ids


def hello_world_token_script(
    *, describe: bool, submit: str | None, tool: str = "bash", command_key: str = "command"
) -> dict[str, Any]:
    """A model script for the Harbor ``hello-world`` task in three calls whose token
    ids make two training sequences: the first writes the file (a ``bash`` tool
    call), the second looks at it (its prompt shows the first tool call as it was
    sampled: it extends the first call, one sequence), the third finishes (its
    prompt shows the tool calls as JSON, not as sampled, ``tool_calls_in_prompt:
    json``: a prefix break, a second sequence). Arguments are compact JSON text,
    as programs that parse and write them again (opencode) send them back.
    ``describe``: the calls carry a ``description`` argument (opencode's bash
    tool asks for one, Claude Code's ``Bash`` too); ``submit``: the command the last
    call runs to finish (mini-swe-agent), or None for an answer without a tool call
    (opencode, Claude Code, codex); ``tool`` and ``command_key``: the name of the
    program's shell tool and of its command argument (Claude Code: ``Bash``,
    ``command``; codex: ``exec_command``, ``cmd``)."""

    def bash(command: str, description: str) -> dict[str, Any]:
        arguments = {command_key: command, **({"description": description} if describe else {})}
        return {"name": tool, "arguments": json.dumps(arguments, separators=(",", ":"))}

    write = bash("printf 'Hello, world!\\n' > /app/hello.txt", "Write the greeting")
    last: dict[str, Any] = {"content": "Created /app/hello.txt."}
    if submit is not None:
        last["tool_calls"] = [bash(submit, "Submit")]
    return {
        "rules": [
            {
                "match": {"turn": 0},
                "reply": {"content": "I will create it.", "tool_calls": [write]},
            },
            {
                "match": {"turn": 1},
                "reply": {
                    "content": "Let me check it.",
                    "tool_calls": [bash("cat /app/hello.txt", "Read it")],
                },
            },
            {"match": {"turn": 2}, "reply": {**last, "tool_calls_in_prompt": "json"}},
        ]
    }


def _sent_by_call(calls: Sequence[ModelCall], server: ScriptedModelServer) -> list[dict[str, Any]]:
    """What the server logged it sent for each call (matched by the body it got: for a
    call the proxy translated, its ``upstream_request``)."""
    logged = list(server.model_requests)
    out = []
    for call in calls:
        match = next(r for r in logged if r.body == _sent_body(call))
        logged.remove(match)
        out.append(match.sent)
    return out


def _expected_sequences(sent: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The training sequences of one agent's calls, worked out from the server's log
    alone: a call continues the sequence before it when the prompt ids the server
    saw start with that sequence's tokens (the last call's prompt and completion),
    else it starts one. Each: ``calls``, ``prompt``, ``tokens`` (prompt and
    everything after), ``sampled`` (position in ``tokens`` -> logprob)."""
    out: list[dict[str, Any]] = []
    for index, s in enumerate(sent):
        prompt, completion = s["prompt_token_ids"], s["completion_token_ids"]
        lps = s["completion_logprobs"]
        last = out[-1] if out else None
        if last is None or prompt[: len(last["tokens"])] != last["tokens"]:
            last = {"calls": [], "prompt": prompt, "tokens": [], "sampled": {}}
            out.append(last)
        last["calls"].append(index)
        last["tokens"] = prompt + completion
        last["sampled"].update({len(prompt) + i: lp for i, lp in enumerate(lps)})
    return out


def _export(run_dir: Path, fmt: str) -> Path:
    out = run_dir / f"export.{fmt}"
    done = subprocess.run(
        [sys.executable, "-m", "agentkit", "export", str(run_dir), "--format", fmt,
         "--out", str(out), "--require-token-ids"],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, f"agentkit export --format {fmt}: {done.stderr}"
    return out


def assert_exports_carry_the_server_tokens(
    run_dir: Path, rollout_id: str, server: ScriptedModelServer
) -> list[list[int]]:
    """``agentkit export --require-token-ids`` of the run, to ``skyrl``, ``tinker`` and
    ``verifiers``, holds for the rollout (one agent's calls, none parallel) exactly
    the ids and logprobs the server logged it sent, call by call: each sequence's
    tokens are its last call's prompt and completion ids as the server sent them,
    its prompt its first call's, and the tokens marked sampled (with their logprobs)
    are exactly the calls' completions. The sequences are worked out from the
    server's log alone: a call whose prompt ids do not extend the previous call's
    prompt and completion starts a new one (a prefix break). The files are left in
    the run directory as ``export.skyrl``, ``export.tinker`` and
    ``export.verifiers``. Returns each sequence's calls (indices)."""
    calls = agentkit.runs.open(run_dir).calls(rollout_id)
    assert_calls_carry_the_server_tokens(calls, server)
    expected = _expected_sequences(_sent_by_call(calls, server))

    def mask_of(seq: dict[str, Any]) -> list[int]:
        return [int(i in seq["sampled"]) for i in range(len(seq["tokens"]))]

    skyrl = json.loads(_export(run_dir, "skyrl").read_text())
    rows = [i for i, m in enumerate(skyrl["env_metrics"]) if m["rollout_id"] == rollout_id]
    assert [skyrl["env_metrics"][i]["calls"] for i in rows] == [e["calls"] for e in expected]
    for i, seq in zip(rows, expected, strict=True):
        n = len(seq["prompt"])
        assert skyrl["prompt_token_ids"][i] == seq["prompt"]
        assert skyrl["response_ids"][i] == seq["tokens"][n:]
        assert skyrl["loss_masks"][i] == mask_of(seq)[n:]
        logprobs = [seq["sampled"].get(j, 0.0) for j in range(n, len(seq["tokens"]))]
        assert skyrl["rollout_logprobs"][i] == logprobs

    datums = [json.loads(x) for x in _export(run_dir, "tinker").read_text().splitlines()]
    mine = [d for d in datums if d["agentkit"]["rollout_id"] == rollout_id]
    assert [d["agentkit"]["calls"] for d in mine] == [e["calls"] for e in expected]
    for datum, seq in zip(mine, expected, strict=True):
        tokens = seq["tokens"]
        (chunk,) = datum["model_input"]["chunks"]
        inputs = datum["loss_fn_inputs"]
        assert chunk["tokens"] == tokens[:-1] and inputs["target_tokens"]["data"] == tokens[1:]
        assert set(inputs) == {"target_tokens", "logprobs", "advantages"}  # no mask
        assert datum["mask"]["data"] == [float(m) for m in mask_of(seq)[1:]]
        lps = [seq["sampled"].get(j, 0.0) for j in range(1, len(tokens))]
        assert inputs["logprobs"]["data"] == lps

    traces = [json.loads(x) for x in _export(run_dir, "verifiers").read_text().splitlines()]
    (trace,) = [t for t in traces if t["id"] == rollout_id]
    nodes = trace["nodes"]
    parents = {n["parent"] for n in nodes}
    chains = []
    for leaf in [i for i in range(len(nodes)) if i not in parents]:
        path: list[dict[str, Any]] = []
        at: int | None = leaf
        while at is not None:
            path.insert(0, nodes[at])
            at = nodes[at]["parent"]
        tokens = [t for n in path for t in n["token_ids"]]
        mask = [int(m) for n in path for m in n["mask"]]
        logprobs = [lp for n in path for lp in n.get("logprobs") or []]
        chains.append((tokens, mask, logprobs))
    assert chains == [
        (e["tokens"], mask_of(e), [e["sampled"][j] for j in sorted(e["sampled"])]) for e in expected
    ]
    return [e["calls"] for e in expected]


def assert_key_only_reached_the_model(
    api_key: str,
    *,
    server: ScriptedModelServer,
    run_dir: Path,
    events: Iterable[Event] = (),
) -> None:
    """The API key went with every model request and nowhere else: ``server`` was
    given that key (``server.set_api_key(api_key)`` before the run, so it refused
    any other key, a program's placeholder too) and received at least one model
    request, each carrying exactly it; the key is in no file of the run directory
    (events, artifacts, the program's kept files) and in none of the ``events``
    seen live."""
    assert server.api_key == api_key, "give the server the key first: server.set_api_key(key)"
    requests = server.model_requests
    assert requests, "no model request reached the server"
    refused = [r.path for r in requests if not r.api_key_sent]
    assert not refused, f"requests without the run's key (refused with a 401): {refused}"
    assert files_containing(run_dir, api_key) == []
    assert api_key not in json.dumps([e.data for e in events])


#: One exported training sequence: its tokens, which of them were sampled, and the
#: sampled tokens' logprobs (None: the file has none).
Sequence_ = tuple[list[int], list[bool], list[float] | None]


def exported_sequences(path: Path, fmt: str) -> list[Sequence_]:
    """The sequences of an ``agentkit export --format FMT`` file (``skyrl``, ``tinker``,
    ``verifiers``), in file order, each as (tokens, sampled, sampled logprobs)."""
    out: list[Sequence_] = []
    if fmt == "skyrl":
        data = json.loads(path.read_text())
        logprobs = data.get("rollout_logprobs")
        for i, (prompt, response, mask) in enumerate(
            zip(data["prompt_token_ids"], data["response_ids"], data["loss_masks"], strict=True)
        ):
            sampled = [False] * len(prompt) + [bool(m) for m in mask]
            kept = (
                None
                if logprobs is None
                else [v for v, m in zip(logprobs[i], mask, strict=True) if m]
            )
            out.append((prompt + response, sampled, kept))
        return out
    lines = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
    if fmt == "tinker":
        for line in lines:
            inputs = line["loss_fn_inputs"]
            [chunk] = line["model_input"]["chunks"]
            targets = inputs["target_tokens"]["data"]
            mask = [bool(m) for m in line["mask"]["data"]]
            tokens = chunk["tokens"][:1] + targets
            values = inputs.get("logprobs", {}).get("data")
            kept = None if values is None else [v for v, m in zip(values, mask, strict=True) if m]
            out.append((tokens, [False, *mask], kept))
        return out
    if fmt == "verifiers":
        for trace in lines:
            for node in trace["nodes"]:
                if node.get("parent") is None:
                    out.append(([], [], []))
                tokens, sampled, kept = out[-1]
                tokens += node.get("token_ids") or []
                sampled += [bool(m) for m in node.get("mask") or []]
                if kept is not None:
                    kept += node.get("logprobs") or []
        return out
    raise ValueError(f"no sequences to read in format {fmt!r}")


def assert_exports_hold_the_calls_tokens(
    run_dir: Path,
    calls: Sequence[ModelCall],
    formats: Iterable[str] = ("skyrl", "tinker", "verifiers"),
) -> dict[str, list[Sequence_]]:
    """``agentkit export RUN_DIR --format F`` (a run of one rollout whose model ``calls``
    all carry token ids) for each format: every call's prompt and completion ids start
    one exported sequence, its completion's tokens marked sampled there; the sampled
    tokens of each sequence are its calls' completions, in order, with their logprobs,
    and nothing else. Returns the sequences of each format."""
    found: dict[str, list[Sequence_]] = {}
    for fmt in formats:
        path = run_dir / f"export.{fmt}"
        proc = subprocess.run(
            [sys.executable, "-m", "agentkit", "export", str(run_dir), "--format", fmt,
             "--out", str(path)],
            capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stdout + proc.stderr
        sequences = found[fmt] = exported_sequences(path, fmt)
        owned: dict[int, list[ModelCall]] = {}
        for call in sorted(calls, key=lambda c: c.index):
            prompt, completion = call.prompt_token_ids or [], call.completion_token_ids or []
            whole, start = prompt + completion, len(prompt)
            at = next(
                (
                    n
                    for n, (tokens, sampled, _) in enumerate(sequences)
                    if tokens[: len(whole)] == whole and all(sampled[start : len(whole)])
                ),
                None,
            )
            assert at is not None, f"{fmt}: call {call.index}'s tokens start no sequence"
            owned.setdefault(at, []).append(call)
        for n, (tokens, sampled, logprobs) in enumerate(sequences):
            mine = owned.get(n, [])
            ids = [t for t, m in zip(tokens, sampled, strict=True) if m]
            assert ids == [t for c in mine for t in c.completion_token_ids or []], (
                f"{fmt}: sequence {n}'s sampled tokens are not its calls' completions"
            )
            if logprobs is not None:
                assert logprobs == [v for c in mine for v in c.completion_logprobs or []], fmt
    return found
