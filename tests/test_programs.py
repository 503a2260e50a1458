"""agentkit.programs: the helpers harnesses use to run an agent's own program."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import anyio
import pytest

from agentkit import EventRecorder, ExecResult, HarnessError, HarnessResult, RunContext, Task, Usage
from agentkit.programs import (
    ModelCall,
    drive,
    executable_in,
    final_text,
    find_program,
    http_error_kind,
    json_int,
    json_line,
    json_object,
    json_or_text,
    prompt_text,
    read_text,
    redactor,
    run_secrets,
    scrub_sandbox_dir,
    scrub_tree,
    stderr_tail,
    telemetry_rubric,
    time_left,
    timeout_error,
    transcript,
    write_text,
)
from agentkit.testing.sandbox_fixtures import host_pids_with_arg, unique_sleep_arg

pytestmark = pytest.mark.anyio
HINT = "install it with `npm install demo-agent@1.2.3`"


def fake_program(path: Path, output: str = "demo 1.2.3", code: int = 0) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!/bin/sh\necho '{output}'\nexit {code}\n")
    path.chmod(0o755)
    return path


def find(tmp_path: Path, **kwargs: Any) -> Any:
    kwargs.setdefault("env", {"PATH": str(tmp_path / "empty")})
    return find_program("demo", env_var="DEMO_BIN", install_hint=HINT, cwd=tmp_path, **kwargs)


def test_missing_program_gives_the_install_hint(tmp_path: Path) -> None:
    with pytest.raises(HarnessError) as info:
        find(tmp_path)
    assert str(info.value) == f"the demo program was not found; {HINT}"
    with pytest.raises(HarnessError, match="was not found"):
        find(tmp_path, binary="not-on-path")


def test_option_then_variable_then_path_then_npm_install(tmp_path: Path) -> None:
    npm = fake_program(tmp_path / "node_modules" / "demo" / "bin" / "demo.js", "demo 4.0.0")
    bin_dir = tmp_path / "node_modules" / ".bin"
    bin_dir.mkdir()
    (bin_dir / "demo").symlink_to(os.path.relpath(npm, bin_dir))
    on_path = fake_program(tmp_path / "path" / "demo", "demo 3.0.0")
    from_env = fake_program(tmp_path / "env" / "demo", "demo 2.0.0")
    option = fake_program(tmp_path / "opt" / "demo", "demo 1.0.0")
    env = {"PATH": str(on_path.parent), "DEMO_BIN": str(from_env)}
    parse = {"parse_version": lambda line: line.split()[-1]}
    assert find(tmp_path, binary=str(option), env=env, **parse).version == "1.0.0"
    assert find(tmp_path, env=env, **parse).found_via == "$DEMO_BIN"
    assert find(tmp_path, env={"PATH": env["PATH"]}, **parse).version == "3.0.0"
    found = find(
        tmp_path / "deeper" if (tmp_path / "deeper").mkdir() is None else tmp_path, **parse
    )
    assert (found.version, found.path) == ("4.0.0", npm.resolve())
    # a script shows its package to the sandbox, not just its directory
    assert found.mount_dirs == (str(npm.resolve().parent.parent),)


def test_a_program_whose_version_fails_is_reported(tmp_path: Path) -> None:
    broken = fake_program(tmp_path / "demo", "cannot start", code=3)
    with pytest.raises(HarnessError, match=r"--version failed \(exit 3\).*npm install demo"):
        find(tmp_path, binary=str(broken))
    plain = tmp_path / "plain"
    plain.write_text("not executable")
    with pytest.raises(HarnessError, match="not an executable file"):
        find(tmp_path, binary=str(plain))


def test_redactor_and_scrub_tree(tmp_path: Path) -> None:
    secret = "sk-demo-1234567"
    assert redactor(secret)(f"key={secret}") == "key=***"
    assert redactor("abc")("abc") == "abc"  # too short to look for
    assert redactor(None)("x") == "x"
    (tmp_path / "home").mkdir()
    (tmp_path / "home" / "log.db").write_bytes(b"\x00" + secret.encode() + b"\x00tail")
    (tmp_path / "home" / "clean.txt").write_text("nothing")
    outside = tmp_path / "outside.txt"
    outside.write_text(secret)
    (tmp_path / "home" / "link").symlink_to(outside)  # planted: never followed
    assert scrub_tree(tmp_path / "home", secret.encode()) == 1
    assert (tmp_path / "home" / "log.db").read_bytes() == b"\x00" + b"*" * len(secret) + b"\x00tail"
    assert outside.read_text() == secret


def test_scrub_tree_under_an_open_directory(tmp_path: Path) -> None:
    secret = "sk-demo-1234567"
    (tmp_path / "home" / "sessions").mkdir(parents=True)
    (tmp_path / "home" / "sessions" / "s.jsonl").write_text(f"key {secret}")
    fd = os.open(tmp_path / "home", os.O_RDONLY | os.O_DIRECTORY)
    try:
        (tmp_path / "home").rename(tmp_path / "moved")  # the descriptor still names it
        assert scrub_tree(".", secret.encode(), dir_fd=fd) == 1
    finally:
        os.close(fd)
    assert (tmp_path / "moved" / "sessions" / "s.jsonl").read_text() == "key " + "*" * 15


async def test_time_left_timeout_error_and_stderr_tail() -> None:
    assert time_left(None, 0.0) is None
    assert time_left(5.0, 0.0) == 0.001  # long past: the least there is
    assert timeout_error("demo", 2.5) == (
        "demo did not finish within 2.5 s; its process tree was killed"
    )
    assert timeout_error("demo", None) == "demo timed out"
    recorder = EventRecorder("t:1")
    redact = redactor("sk-demo-1234567")
    stderr = " warn sk-demo-1234567\n" + "x" * 5000 + "\n"
    tail = await stderr_tail(ExecResult(exit_code=1, stderr=stderr), redact, recorder, source="d")
    assert tail == "x" * 4000
    assert await stderr_tail(ExecResult(exit_code=0, stderr=stderr[:22]), redact, recorder,
                             source="d.stderr") == "warn ***"  # fmt: skip
    assert [(e.data["source"], e.data["message"]) for e in recorder.events] == [
        ("d", "x" * 4000),
        ("d.stderr", "warn ***"),
    ]


def test_run_secrets_are_the_key_and_secret_looking_header_values() -> None:
    context = RunContext(
        api_key="sk-demo-1234567",
        headers={"X-Team": "evals-team", "X-Gateway-Key": "gw-1234567890", "Cookie": "c"},
    )
    # longest first; a public header's value and a too-short one are not secrets
    assert run_secrets(context) == ["sk-demo-1234567", "gw-1234567890"]
    assert run_secrets(RunContext()) == []
    redact = redactor(run_secrets(context))
    assert redact("sk-demo-1234567 gw-1234567890 evals-team") == "*** *** evals-team"


async def test_json_line_gives_events_and_logs_the_rest() -> None:
    recorder = EventRecorder("t:1")
    unparsed: list[str] = []

    async def read(line: str) -> Any:
        return await json_line(
            line, recorder, source="demo", redact=lambda t: t.replace("sk-x", "***"),
            unparsed=unparsed,
        )  # fmt: skip

    assert await read('  {"type": "turn", "n": 1}\n') == {"type": "turn", "n": 1}
    assert await read("   \n") is None  # blank: skipped, not logged
    assert await read("warning: key sk-x " + "z" * 3000) is None
    assert await read('{"no": "type"}') is None
    assert await read('["type"]') is None
    assert unparsed == ["warning: key sk-x " + "z" * 3000, '{"no": "type"}', '["type"]']
    logs = [e for e in recorder.events if e.type == "log"]
    assert [(e.data["level"], e.data["source"]) for e in logs] == [("info", "demo")] * 3
    assert logs[0].data["message"] == ("warning: key *** " + "z" * 3000)[:1999]


async def test_json_nested_too_deep_is_never_a_recursion_error() -> None:
    """A program's line or a model's tool arguments nested 200,000 levels deep (or just
    past MAX_NESTING_DEPTH) are logged, or kept as text; never Python's RecursionError."""
    recorder = EventRecorder("t:1")
    unparsed: list[str] = []
    for depth in (101, 200_000):
        line = '{"type": "turn", "x": ' + "[" * depth + "]" * depth + "}"
        got = await json_line(line, recorder, source="demo", redact=str, unparsed=unparsed)
        assert got is None and unparsed[-1] == line
        arguments = '{"a":' * depth + "1" + "}" * depth
        assert json_or_text(arguments) == arguments
    assert json_or_text('{"path": "a.py"}') == {"path": "a.py"} and json_or_text("ls") == "ls"


def test_json_fields_and_http_error_kinds() -> None:
    assert json_object({"a": 1}) == {"a": 1}
    assert json_object([1]) == {} and json_object(None) == {}
    assert json_int(7) == 7 and json_int(True) == 0 and json_int("7") == 0 and json_int(None) == 0
    kinds = {s: http_error_kind(s) for s in (400, 401, 403, 404, 429, 500, 503)}
    assert kinds == {
        400: "model_request_error",
        401: "model_auth",
        403: "model_auth",
        404: "model_request_error",
        429: "model_rate_limit",
        500: "model_server_error",
        503: "model_server_error",
    }


def test_prompt_text_of_each_input_kind() -> None:
    assert prompt_text(Task(task_id="t:1", input="Fix the bug.")) == "Fix the bug."
    chat = Task(
        task_id="t:2",
        input=[
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": [{"type": "text", "text": "Fix "}, {"text": "it."}]},
            {"role": "assistant", "content": "ok"},
        ],
    )
    assert prompt_text(chat) == "Be brief.\n\nFix it."
    assert prompt_text(Task(task_id="t:3", input={"a": 1})) == '{\n  "a": 1\n}'


def test_transcript_and_final_text_of_model_calls() -> None:
    call = {"id": "c1", "type": "function", "function": {"name": "sh", "arguments": "{}"}}
    calls = [
        ModelCall(0, "m0", texts=["Let me ", "look."], reasoning=["think"], tool_calls=[call],
                  tool_messages=[{"role": "tool", "tool_call_id": "c1", "content": "ok"}]),
        ModelCall(1, "m1"),  # began, said nothing: left out
        ModelCall(2, "m2", tool_calls=[call]),
    ]  # fmt: skip
    assert transcript("Do it.", calls) == [
        {"role": "user", "content": "Do it."},
        {
            "role": "assistant",
            "content": "Let me look.",
            "reasoning_content": "think",
            "tool_calls": [call],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "ok"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
    ]
    assert final_text(calls) == "Let me look."
    assert final_text(calls[1:]) is None


def test_telemetry_rubric_reads_raw_counters_or_the_transcript() -> None:
    rubric = telemetry_rubric("demo")
    by_name = {f.name: f for f in rubric.functions}
    assert sorted(by_name) == ["tokens", "tool_calls", "tool_errors", "turns"]
    assert all(f.weight == 0.0 for f in rubric.functions)
    counted = HarnessResult(
        status="completed",
        raw={"turns": 3, "tool_calls": 2, "tool_errors": 1},
        usage=Usage(input_tokens=10, output_tokens=5),
    )
    assert [by_name[n].fn(counted) for n in ("turns", "tool_calls", "tool_errors", "tokens")] == [
        3.0,
        2.0,
        1.0,
        15.0,
    ]
    transcript = HarnessResult(
        status="completed",
        messages=[
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": None, "tool_calls": [{"id": "a"}, {"id": "b"}]},
            {"role": "assistant", "content": "done"},
        ],
    )
    assert by_name["turns"].fn(transcript) == 2.0
    assert by_name["tool_calls"].fn(transcript) == 2.0


@pytest.mark.usefixtures("requires_bwrap_here")
async def test_drive_feeds_lines_live_and_kills_the_tree_when_cancelled(
    sandbox_factory: Any, tmp_path: Path
) -> None:
    sandbox = await sandbox_factory("local")
    recorder = EventRecorder("t:1")
    sleep = unique_sleep_arg()
    script = f"read line; echo got $line; sh -c 'sleep {sleep}' & echo started; wait"
    proc = await sandbox.start(["/bin/sh", "-c", script])
    lines: list[str] = []
    started = anyio.Event()

    async def on_line(line: str) -> None:
        lines.append(line)
        if line == "started":
            started.set()
        if line == "boom":
            raise ValueError("reader bug")

    async with anyio.create_task_group() as tg:

        async def run() -> None:
            await drive(proc, on_line=on_line, timeout=None, stdin=b"hello\n", recorder=recorder)

        tg.start_soon(run)
        await started.wait()
        while not host_pids_with_arg(sleep):  # forked, maybe not yet exec'd
            await anyio.sleep(0.02)
        tg.cancel_scope.cancel()
    assert lines == ["got hello", "started"]
    assert not host_pids_with_arg(sleep)


@pytest.mark.usefixtures("requires_bwrap_here")
async def test_drive_times_out_and_reports_a_failing_reader(sandbox_factory: Any) -> None:
    sandbox = await sandbox_factory("local")
    recorder = EventRecorder("t:1")
    proc = await sandbox.start(["/bin/sh", "-c", "echo boom; exec sleep 1000"])

    async def on_line(line: str) -> None:
        raise ValueError(f"cannot read {line}")

    outcome = await drive(proc, on_line=on_line, timeout=0.5, recorder=recorder)
    assert outcome.timed_out
    [warning] = [e for e in recorder.events if e.type == "log"]
    assert "ValueError: cannot read boom" in warning.data["message"]


@pytest.mark.usefixtures("requires_bwrap_here")
async def test_files_in_and_out_of_a_sandbox(sandbox_factory: Any, tmp_path: Path) -> None:
    exe = fake_program(tmp_path / "tools" / "demo")
    program = find(tmp_path, binary=str(exe))
    recorder = EventRecorder("t:1")
    bound = await sandbox_factory("local", ro_binds=[str(exe.parent)])
    assert await executable_in(bound, program, "/tmp/.demo/demo", recorder) == (str(exe), False)
    unbound = await sandbox_factory("local")
    path, staged = await executable_in(unbound, program, "/tmp/.demo/demo", recorder)
    assert (path, staged) == ("/tmp/.demo/demo", True)
    assert (await unbound.exec([path, "--version"])).stdout.strip() == "demo 1.2.3"
    assert "not visible in the sandbox" in recorder.events[-1].data["message"]

    secret = "sk-demo-7654321"
    await write_text(unbound, "/logs/agent/demo/config.toml", f'key = "{secret}"\n')
    assert await read_text(unbound, "/logs/agent/demo/config.toml") == f'key = "{secret}"\n'
    assert await read_text(unbound, "/logs/agent/demo/missing") is None
    assert await scrub_sandbox_dir(unbound, "/logs/agent/demo", secret, recorder) == 1
    assert secret not in (await unbound.exec(["cat", "/logs/agent/demo/config.toml"])).stdout


@pytest.fixture
def requires_bwrap_here() -> None:
    import shutil

    if shutil.which("bwrap") is None:
        pytest.skip("bubblewrap (bwrap) is not installed")
