"""``agentkit serve`` as a real process, driven by a trainer in a second process over HTTP
(urllib on loopback), the service running the chat harness against the scripted model
server. Every wait is on a process's output or exit, never on the clock."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from _trainer_client import client

from agentkit.testing.model_server import ScriptedModelServer

# a bound on a hang (a bug), never a wait
HANG = 120

TRAINER = (
    client(100)
    + r"""
url, token_file, groups, take = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
token = open(token_file).read().strip()

out = {"unauthorized": call("GET", "/report", key="wrong")[0]}
if groups:
    out["requested"] = call("POST", "/groups", {"groups": groups})
out["groups"] = []
for _ in range(take):
    status, body = call("POST", "/groups/next")
    if status != 200:
        out["stopped"] = [status, body]
        break
    out["groups"].append(body)
    if len(out["groups"]) == 1:
        out["policy"] = call("POST", "/policy", {"version": 1, "model": "policy-1"})
        if out["policy"][0] != 200:
            out["stopped"] = out["policy"]
            break
if "stopped" not in out:  # else the service stopped: serve ends once it told us
    out["report"] = call("GET", "/report")
print(json.dumps(out))
"""
)


def _tasks(tmp_path: Path) -> Path:
    path = tmp_path / "tasks.jsonl"
    path.write_text(json.dumps({"id": "a", "input": "2+2?", "target": "4"}) + "\n")
    return path


def _serve_args(tasks: Path, server: ScriptedModelServer, run: Path, *extra: str) -> list[str]:
    return [
        "serve",
        f"jsonl:{tasks}",
        "chat",
        "--model",
        "scripted-model",
        "--base-url",
        server.base_url,
        "-n",
        "2",
        "-c",
        "2",
        "--token-ids",
        "--no-preflight",
        "--out",
        str(run),
        "--json",
        *extra,
    ]


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("AGENTKIT_PLUGINS", None)
    return env


def _trainer(url: str, token_file: str, groups: int, take: int) -> dict:
    """The trainer's process: asks for ``groups`` groups, then takes up to ``take``."""
    done = subprocess.run(
        [sys.executable, "-c", TRAINER, url, token_file, str(groups), str(take)],
        capture_output=True,
        text=True,
        timeout=HANG,
    )
    assert done.returncode == 0, done.stderr
    result: dict = json.loads(done.stdout)
    return result


def _files(directory: Path) -> Iterator[Path]:
    return (p for p in directory.rglob("*") if p.is_file())


def test_serve_hands_groups_to_a_trainer_in_another_process_and_stops_on_sigterm(
    tmp_path: Path, model_server: ScriptedModelServer
) -> None:
    model_server.set_script({"default": {"content": "4"}})
    run = tmp_path / "run"
    proc = subprocess.Popen(
        [sys.executable, "-m", "agentkit", *_serve_args(_tasks(tmp_path), model_server, run)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(),
    )
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()  # written once the front listens
        assert first, proc.communicate(timeout=HANG)
        ready = json.loads(first)
        assert ready["url"].startswith("http://127.0.0.1:") and ready["url"].endswith("/v1")
        assert ready["run_dir"] == str(run)
        token_file = Path(ready["token_file"])
        assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
        token = token_file.read_text().strip()
        assert len(token) >= 32

        out = _trainer(ready["url"], str(token_file), groups=2, take=2)
        proc.send_signal(signal.SIGTERM)
        stdout, stderr = proc.communicate(timeout=HANG)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, stderr
    assert out["unauthorized"] == 401
    assert out["requested"] == [200, {"group_ids": [0, 1]}]
    assert "stopped" not in out and len(out["groups"]) == 2
    first_group = out["groups"][0]["group"]
    assert first_group["rewards"] == [1.0, 1.0]
    assert first_group["data"]["response_ids"]  # SkyRL's GeneratorOutput, the default
    assert out["policy"][1]["policy"]["version"] == 1
    assert out["report"][1]["delivered"] == 2 and out["report"][1]["policy_version"] == 1
    # the end: the report on stdout; the token file gone; the token nowhere
    report = json.loads(stdout.strip().splitlines()[-1])["report"]
    assert report["delivered"] == 2 and report["rollouts_finished"] == 4
    assert "SIGTERM" in stderr and "Traceback" not in stderr
    assert not token_file.exists() and not token_file.parent.exists()
    assert token not in first + stdout + stderr
    for path in _files(run):
        assert token.encode() not in path.read_bytes(), path
    assert len((run / "rollouts.jsonl").read_text().splitlines()) == 4


def test_serve_refuses_a_token_file_that_exists_and_bad_settings_in_one_line(
    tmp_path: Path, model_server: ScriptedModelServer
) -> None:
    tasks = _tasks(tmp_path)
    taken = tmp_path / "token"
    taken.write_text("someone else's\n")
    for extra, expected in [
        (["--token-file", str(taken)], f"--token-file {taken}: the file exists"),
        (["--max-staleness", "-1"], "--max-staleness"),
        (["--format", "csv"], "--format"),
        (["--model-proxy", "--no-model-proxy"], "needs the model proxy"),
    ]:
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "agentkit",
                *_serve_args(tasks, model_server, tmp_path / "run", *extra),
            ],
            capture_output=True,
            text=True,
            timeout=HANG,
            env=_env(),
        )
        assert done.returncode == 2, (extra, done.stderr)
        assert expected in done.stderr, (extra, done.stderr)
        assert "Traceback" not in done.stderr, done.stderr
    assert taken.read_text() == "someone else's\n"


def test_a_full_disk_stops_serve_with_one_message_and_the_trainer_is_told(
    tmp_path: Path, model_server: ScriptedModelServer
) -> None:
    """A real full disk (a tmpfs over the run directory in a private mount namespace):
    the trainer's next group is a 503 naming it; serve exits 2 with one line."""
    if shutil.which("unshare") is None:
        pytest.skip("unshare (util-linux) is not installed")
    model_server.set_script({"default": {"content": "4 " + "x" * 3000}})
    disk = tmp_path / "disk"
    disk.mkdir()
    args = _serve_args(_tasks(tmp_path), model_server, disk / "run")
    command = (
        f"mount -t tmpfs -o size=256k tmpfs {shlex.quote(str(disk))} || exit 3; "
        f"exec {shlex.quote(sys.executable)} -m agentkit {shlex.join(args)}"
    )
    proc = subprocess.Popen(
        ["unshare", "-rm", "bash", "-c", command],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(),
    )
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()
        if not first and proc.wait(timeout=HANG) == 3:
            pytest.skip("no private mount namespace here")
        ready = json.loads(first)
        _trainer(ready["url"], ready["token_file"], groups=100, take=0)
        # the disk fills while the trainer is away; serve says so and waits for it
        assert proc.stderr is not None
        said = [proc.stderr.readline() for _ in range(2)]
        assert "ready" in said[0] and "the rollout service stopped" in said[1], said
        out = _trainer(ready["url"], ready["token_file"], groups=0, take=100)
        stdout, rest = proc.communicate(timeout=HANG)
        stderr = "".join(said) + rest
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    status, body = out["stopped"]
    assert status == 503, out["stopped"]
    assert body["error"].startswith("the rollout service stopped: ")
    assert "No space left on device" in body["error"]
    assert body["error"].endswith(
        f"; every rollout and group it finished before is in {disk / 'run'} "
        "(rollouts.jsonl, groups.jsonl)"
    )
    assert "--resume" not in body["error"]  # a run's advice: a service does not resume
    assert 0 < len(out["groups"]) < 100  # the groups finished before are handed over
    assert proc.returncode == 2, stderr
    errors = [line for line in stderr.splitlines() if line.startswith("Error: ")]
    assert len(errors) == 1 and "No space left on device" in errors[0], stderr
    assert "Traceback" not in stderr, stderr
    report = json.loads(stdout.strip().splitlines()[-1])["report"]
    assert "No space left on device" in report["error"]
