"""``agentkit run``, ``describe`` and ``show`` as users run them: real subprocesses."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from agentkit.testing.model_server import ScriptedModelServer

ENVPLUG = Path(__file__).parent / "fixtures" / "envplug"
SECRET = "sk-cli-secret-5d2b9a77"


def cli_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ENVPLUG) + os.pathsep + env.get("PYTHONPATH", "")
    env["AGENTKIT_PLUGINS"] = "envplug"
    env.pop("AGENTKIT_DISABLE_PLUGINS", None)
    env.update(extra)
    return env


def agentkit(*args: str, cwd: Path | None = None, **extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agentkit", *args],
        env=cli_env(**extra),
        capture_output=True,
        text=True,
        timeout=60,
        cwd=cwd,
    )


@pytest.fixture
def tasks_file(tmp_path: Path) -> Path:
    path = tmp_path / "arith.jsonl"
    rows = [{"id": str(i), "input": f"What is {i} + {i}?", "target": str(2 * i)} for i in range(4)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_run_chat_on_jsonl_against_the_scripted_server(
    tmp_path: Path, tasks_file: Path, model_server: ScriptedModelServer
) -> None:
    model_server.set_script(
        {
            "rules": [
                {"match": {"last_user_contains": "2 + 2"}, "reply": {"content": "4"}},
                {"match": {"last_user_contains": "1 + 1"}, "reply": {"content": "2"}},
            ],
            "default": {"content": "no idea"},
        }
    )
    out = tmp_path / "run"
    model_server.set_api_key(SECRET)
    proc = agentkit(
        "run",
        f"jsonl:{tasks_file}",
        "chat",
        "-n",
        "2",
        "-c",
        "4",
        "--model",
        "scripted-model",
        "--base-url",
        model_server.base_url,
        "--api-key-env",
        "CLI_KEY",
        "--out",
        str(out),
        "--progress",
        CLI_KEY=SECRET,
    )
    assert proc.returncode == 0, proc.stderr
    assert "arith:2" in proc.stdout and "pass@2" in proc.stdout and "overall" in proc.stdout
    assert f"Run directory: {out}" in proc.stdout
    assert "rollouts" in proc.stderr and "8/8" in proc.stderr  # the progress bar
    summary = json.loads((out / "summary.json").read_text())
    assert summary["finished"] == 8 and summary["mean_reward"] == 0.5
    by_task = {t["task_id"]: t for t in summary["tasks"]}
    assert by_task["arith:1"]["pass_at_k"] == {"1": 1.0, "2": 1.0}
    assert by_task["arith:3"]["mean_reward"] == 0.0
    # the server received the key; the run directory never holds it
    assert len(model_server.chat_requests) == 8
    assert all(r.api_key_sent for r in model_server.chat_requests)
    for path in out.rglob("*"):
        if path.is_file():
            assert SECRET not in path.read_text(errors="replace"), path
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["context"]["api_key_env"] == "CLI_KEY"
    assert manifest["harness"]["name"] == "chat" and manifest["taskset"]["spec"].startswith(
        "jsonl:"
    )
    shown = agentkit("show", str(out))
    assert shown.returncode == 0 and "[complete]" in shown.stdout and "arith:0" in shown.stdout


def test_json_prints_only_the_summary(tmp_path: Path) -> None:
    proc = agentkit(
        "run",
        "envplug:3",
        "controlled",
        "-n",
        "2",
        "--out",
        str(tmp_path / "r"),
        "--json",
        "-H",
        "wrong=true",
    )
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    assert summary["finished"] == 6 and summary["mean_reward"] == 0.0
    assert summary["pass_at_k"] == {"1": 0.0, "2": 0.0}
    assert "rollouts" not in proc.stderr  # no progress bar unless asked


def test_stdout_holds_only_the_commands_output_whatever_else_prints(tmp_path: Path) -> None:
    # the harness prints to stdout by print, file descriptor 1, a child process and
    # another thread, and to stderr: all of it lands on stderr, with --json and without
    chatty, quiet = tmp_path / "chatty", tmp_path / "quiet"
    run = ("run", "envplug:2", "controlled", "--no-progress")
    as_json = agentkit(*run, "-H", "chatter=true", "--out", str(chatty), "--json")
    assert as_json.returncode == 0, as_json.stderr
    assert json.loads(as_json.stdout) == json.loads((chatty / "summary.json").read_text())
    for i in range(2):
        for way in ("print", "fd", "child", "thread", "stderr"):
            assert f"chatter {way} envplug:{i}" in as_json.stderr, way
    table = agentkit(*run, "-H", "chatter=true", "--out", str(tmp_path / "chatty-table"))
    plain = agentkit(*run, "--out", str(quiet))
    assert table.returncode == plain.returncode == 0, table.stderr + plain.stderr
    assert "chatter" in table.stderr and "overall" in table.stdout
    assert table.stdout.replace(str(tmp_path / "chatty-table"), "RUN") == plain.stdout.replace(
        str(quiet), "RUN"
    )


def test_options_are_checked_against_the_plugin_schema(tmp_path: Path) -> None:
    bad = agentkit("run", "envplug:2", "controlled", "-H", "dealy=1", "--out", str(tmp_path / "a"))
    assert bad.returncode == 2
    assert "unknown option 'dealy' for harness 'controlled'" in bad.stderr
    assert "delay (float)" in bad.stderr
    bad = agentkit("run", "envplug:2", "controlled", "-H", "delay=soon")
    assert bad.returncode == 2 and "expected float" in bad.stderr
    bad = agentkit("run", "envplug:2", "controlled", "-T", "sandboxed=maybe")
    assert bad.returncode == 2 and "sandboxed" in bad.stderr
    assert not (tmp_path / "a").exists()


def test_out_of_range_run_settings_are_refused_before_anything_runs(tmp_path: Path) -> None:
    for args, message in [
        (("-n", "0"), "rollouts_per_task must be at least 1, got 0"),
        (("--timeout", "0"), "timeout must be a number of seconds above 0, got 0.0"),
        (("--timeout", "-1"), "timeout must be a number of seconds above 0, got -1.0"),
        # a number that is not finite is the flag's error (as click's own range errors)
        (("--timeout", "inf"), "Invalid value for '--timeout': 'inf' is not a finite number"),
        (("--timeout", "nan"), "Invalid value for '--timeout': 'nan' is not a finite number"),
        (
            ("--pass-threshold", "nan"),
            "Invalid value for '--pass-threshold': 'nan' is not a finite number",
        ),
        (
            ("--pass-threshold", "-inf"),
            "Invalid value for '--pass-threshold': '-inf' is not a finite number",
        ),
        (
            ("-S", "max_memory_mb=-5", "-T", "sandboxed=true"),
            "option 'max_memory_mb' for sandbox 'local': expected a number above 0, got -5",
        ),
        (
            ("-S", "max_output_mb=0"),  # refused even when no task needs a sandbox
            "option 'max_output_mb' for sandbox 'local': expected a number above 0, got 0",
        ),
    ]:
        out = tmp_path / f"run{'-'.join(args)}"
        proc = agentkit("run", "envplug:2", "controlled", *args, "--out", str(out))
        assert proc.returncode == 2, (args, proc.stderr)
        assert message in proc.stderr and "Traceback" not in proc.stderr
        assert not out.exists()


def test_an_error_quoting_the_api_key_is_not_printed_with_it(tmp_path: Path) -> None:
    """The results table and --json show the first error: redacted like the run directory."""
    base = ("run", "envplug:2", "controlled", "-H", "echo_key=true", "-H", "raise_on=1")
    for extra in ((), ("--json",)):
        out = tmp_path / f"run{len(extra)}"
        proc = agentkit(*base, *extra, "--out", str(out), OPENAI_API_KEY=SECRET)
        assert proc.returncode == 0, proc.stderr
        assert "harness exploded on envplug:1" in proc.stdout and "key=***" in proc.stdout
        assert SECRET not in proc.stdout + proc.stderr
        for path in out.rglob("*"):
            if path.is_file():
                assert SECRET not in path.read_text(errors="replace"), path


def test_an_unusable_out_path_is_one_clear_message(tmp_path: Path) -> None:
    a_file = tmp_path / "a-file"
    a_file.write_text("not a directory")
    for out in (a_file, a_file / "run"):
        proc = agentkit("run", "envplug:2", "controlled", "--out", str(out), "--no-progress")
        assert proc.returncode == 2, proc.stderr
        assert "Traceback" not in proc.stderr
        assert f"cannot create the run directory {out}" in proc.stderr
    assert a_file.read_text() == "not a directory"


def test_credentials_in_the_base_url_are_not_stored(
    tmp_path: Path, tasks_file: Path, model_server: ScriptedModelServer
) -> None:
    """A proxy URL with user:password keeps the password out of the run directory."""
    model_server.set_script({"default": {"content": "2"}})
    port = model_server.base_url.split(":")[2].split("/")[0]
    url = f"http://bob:pw-5ecret-77@127.0.0.1:{port}/v1"
    out = tmp_path / "run"
    spec = f"jsonl:{tasks_file}"
    proc = agentkit("run", spec, "chat", "--model", "m", "--base-url", url, "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["context"]["base_url"] == f"http://bob:***@127.0.0.1:{port}/v1"
    for path in out.rglob("*"):
        if path.is_file():
            assert "5ecret" not in path.read_text(errors="replace"), path
    # resuming needs the real URL again, and accepts it
    again = agentkit("run", "--resume", str(out))
    assert again.returncode == 2 and "pass it again with --base-url" in again.stderr
    assert "5ecret" not in again.stderr
    again = agentkit("run", "--resume", str(out), "--base-url", url)
    assert again.returncode == 0, again.stderr


def test_unknown_names_give_one_clear_message(tmp_path: Path) -> None:
    proc = agentkit("run", "nosuch:x", "controlled", cwd=tmp_path)
    assert proc.returncode == 2
    assert "unknown taskset provider 'nosuch'" in proc.stderr and "envplug" in proc.stderr
    assert "Traceback" not in proc.stderr
    proc = agentkit("run", "envplug:2", "nosuch", cwd=tmp_path)
    assert proc.returncode == 2 and "unknown harness 'nosuch'" in proc.stderr
    proc = agentkit("run", "envplug:2", "controlled", "--task", "envplug:99", cwd=tmp_path)
    assert proc.returncode == 2 and "unknown task 'envplug:99'" in proc.stderr
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


def test_unreachable_model_server(tmp_path: Path, tasks_file: Path) -> None:
    import socket

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = agentkit(
        "run",
        f"jsonl:{tasks_file}",
        "chat",
        "--model",
        "m",
        "--base-url",
        f"http://127.0.0.1:{port}/v1",
        "--out",
        str(tmp_path / "r"),
    )
    assert proc.returncode == 2
    assert f"cannot reach the model server at http://127.0.0.1:{port}/v1" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "r").exists()  # nothing was created


def test_missing_api_key_variable(tmp_path: Path) -> None:
    proc = agentkit("run", "envplug:1", "controlled", "--api-key-env", "NOT_SET_ANYWHERE_X")
    assert proc.returncode == 2 and "'NOT_SET_ANYWHERE_X'" in proc.stderr


def test_default_run_directory_and_limit_and_task(tmp_path: Path) -> None:
    proc = agentkit("run", "envplug:5", "controlled", "--limit", "2", "--no-progress", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    (run,) = (tmp_path / "runs").iterdir()
    assert run.name.endswith("-controlled")
    lines = (run / "rollouts.jsonl").read_text().splitlines()
    assert sorted(json.loads(x)["task_id"] for x in lines) == ["envplug:0", "envplug:1"]
    proc = agentkit(
        "run",
        "envplug:5",
        "controlled",
        "--task",
        "envplug:3",
        "--task",
        "envplug:4",
        "--out",
        str(tmp_path / "two"),
        "--json",
    )
    assert [t["task_id"] for t in json.loads(proc.stdout)["tasks"]] == ["envplug:3", "envplug:4"]


def test_describe_prints_the_compiled_rubric() -> None:
    proc = agentkit("describe", "envplug:2", "controlled")
    assert proc.returncode == 0, proc.stderr
    assert "core.exact" in proc.stdout and "Total reward" in proc.stdout
    proc = agentkit("describe", "envplug:2", "controlled", "--json")
    data = json.loads(proc.stdout)
    assert [m["name"] for m in data["metrics"]] == ["core.exact"]
    assert data["metrics"][0]["function"] == "agentkit_envplug.exact"


def test_show_a_partial_run_and_failures(tmp_path: Path) -> None:
    out = tmp_path / "r"
    proc = agentkit(
        "run", "envplug:3", "controlled", "-n", "2", "-H", "raise_on=1", "--out", str(out)
    )
    assert proc.returncode == 0, proc.stderr
    assert "2 rollouts with harness_exception" in proc.stdout
    assert "RuntimeError: harness exploded on envplug:1" in proc.stdout
    # cut the run short: drop the last two lines as if it had been killed
    path = out / "rollouts.jsonl"
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join(lines[:-2]) + lines[-2][:10])
    shown = agentkit("show", str(out), "--json")
    data: dict[str, Any] = json.loads(shown.stdout)
    assert data["complete"] is False and data["finished"] == 4
    assert "half-written" in data["repair_note"]
    assert path.read_text().endswith(lines[-2][:10])  # show never modifies a run
    shown = agentkit("show", str(out))
    assert "partial" in shown.stdout
    bad = agentkit("show", str(tmp_path))
    assert bad.returncode == 2 and "not an agentkit run directory" in bad.stderr


def test_sandboxed_tasks_get_a_sandbox_per_rollout(tmp_path: Path) -> None:
    out = tmp_path / "r"
    proc = agentkit(
        "run",
        "envplug:2",
        "controlled",
        "-T",
        "sandboxed=true",
        "--sandbox",
        "dirsandbox",
        "-n",
        "2",
        "--out",
        str(out),
        "--keep-sandboxes",
    )
    assert proc.returncode == 0, proc.stderr
    dirs = sorted(p.name for p in (out / "rollouts").iterdir())
    assert len(dirs) == 4
    for d in dirs:
        assert (out / "rollouts" / d / "work" / "answer.txt").exists()
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["sandbox"] == {"used": True, "name": "dirsandbox", "options": {}}
    bad = agentkit(
        "run",
        "envplug:1",
        "controlled",
        "-T",
        "sandboxed=true",
        "--sandbox",
        "nosuch",
        "--out",
        str(tmp_path / "x"),
    )
    assert bad.returncode == 2 and "unknown sandbox 'nosuch'" in bad.stderr
