"""Steering runs from the command line: model settings, config files, preflight, dry runs,
limits, tokens and cost, resume that retries and extends, and inspecting runs.

Every test runs the real ``agentkit`` command in a subprocess against the scripted
model server on loopback (or the built-in ``--model scripted:FILE``).
"""

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
EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def run_cli(*args: str, cwd: Path | None = None, **extra: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ENVPLUG) + os.pathsep + env.get("PYTHONPATH", "")
    env.pop("AGENTKIT_PLUGINS", None)
    env.pop("OPENAI_API_KEY", None)
    env["XDG_CACHE_HOME"] = str((cwd or Path.cwd()) / ".cache-agentkit-test")
    env.update(extra)
    return subprocess.run(
        [sys.executable, "-m", "agentkit", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd,
    )


def tasks_file(folder: Path, rows: list[dict[str, Any]] | None = None) -> Path:
    path = folder / "tasks.jsonl"
    rows = rows or [
        {"id": str(i), "input": f"What is {i} + {i}?", "target": str(2 * i)} for i in range(3)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


ANSWERS = {
    "rules": [
        {"match": {"last_user_contains": f"{i} + {i}"}, "reply": {"content": str(2 * i)}}
        for i in range(3)
    ],
    "default": {"content": "no idea"},
}


def manifest(run: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((run / "manifest.json").read_text())
    return data


def lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def test_model_settings_reach_the_endpoint_and_are_recorded(
    tmp_path: Path, model_server: ScriptedModelServer
) -> None:
    model_server.set_script(ANSWERS)
    run = tmp_path / "run"
    proc = run_cli(
        "run",
        f"jsonl:{tasks_file(tmp_path)}",
        "chat",
        "--model",
        "m",
        "--base-url",
        model_server.base_url,
        "--temperature",
        "0.2",
        "--top-p",
        "0.9",
        "--seed",
        "7",
        "--max-tokens",
        "64",
        "-M",
        "reasoning_effort=low",
        "-M",
        "top_k=20",
        "--header",
        "X-Team: evals",
        "--header",
        "Authorization-Extra: Bearer sk-header-secret-1234",
        "--out",
        str(run),
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    bodies = [r.body for r in model_server.chat_requests]
    assert len(bodies) == 3
    for body in bodies:
        assert (body["temperature"], body["top_p"], body["seed"], body["max_tokens"]) == (
            0.2,
            0.9,
            7,
            64,
        )
        assert body["reasoning_effort"] == "low" and body["top_k"] == 20
    assert all(r.headers["x-team"] == "evals" for r in model_server.chat_requests)
    context = manifest(run)["context"]
    assert context["sampling_args"] == {
        "reasoning_effort": "low",
        "top_k": 20,
        "temperature": 0.2,
        "top_p": 0.9,
        "seed": 7,
    }
    assert context["limits"]["max_tokens"] == 64
    assert context["headers"] == {"X-Team": "evals", "Authorization-Extra": "***"}
    for path in run.rglob("*"):
        if path.is_file():
            assert b"sk-header-secret" not in path.read_bytes(), path
    # the run's tokens are summed and averaged in the results
    assert "Tokens: " in proc.stdout and "per rollout" in proc.stdout


def test_max_turns_and_message_and_token_limits_end_a_rollout_with_a_reason(
    tmp_path: Path, model_server: ScriptedModelServer
) -> None:
    model_server.set_script({"default": {"content": "ok", "usage": {"prompt_tokens": 40}}})
    conversation = [{"role": "user", "content": f"question {i}"} for i in range(4)]
    source = tasks_file(tmp_path, [{"id": "chatty", "input": conversation, "target": "x"}])
    base = ("run", f"jsonl:{source}", "chat", "--model", "m", "--base-url", model_server.base_url)
    kinds = {}
    for name, flags in {
        "turns": ("--max-turns", "2"),
        "messages": ("--message-limit", "3"),
        "tokens": ("--token-limit", "50"),
    }.items():
        proc = run_cli(*base, *flags, "--out", str(tmp_path / name), "--json", cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr
        (record,) = lines(tmp_path / name / "rollouts.jsonl")
        kinds[name] = (record["status"], record["error_kind"], len(record["messages"]))
        assert record["reward"] is not None  # a limit ends the rollout; it is still scored
    # the transcript stops where the limit was reached: 2 calls; 3 messages; 2 calls of
    # 40+ tokens (the third would go over 50)
    assert kinds == {
        "turns": ("timeout", "max_turns", 5),
        "messages": ("timeout", "message_limit", 3),
        "tokens": ("timeout", "token_limit", 5),
    }


def test_cost_from_given_prices_and_the_per_rollout_cost_limit(
    tmp_path: Path, model_server: ScriptedModelServer
) -> None:
    model_server.set_script(
        {"default": {"content": "ok", "usage": {"prompt_tokens": 1000, "completion_tokens": 500}}}
    )
    conversation = [{"role": "user", "content": f"q{i}"} for i in range(3)]
    source = tasks_file(tmp_path, [{"id": "a", "input": conversation, "target": "ok"}])
    run = tmp_path / "run"
    proc = run_cli(
        "run",
        f"jsonl:{source}",
        "chat",
        "--model",
        "my-local-model",
        "--base-url",
        model_server.base_url,
        "--price",
        "input=1.0,output=2.0",
        "--cost-limit",
        "0.003",
        "--out",
        str(run),
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    (record,) = lines(run / "rollouts.jsonl")
    # each call: 1000 in at $1/M + 500 out at $2/M = $0.002; the limit stops the third call
    assert record["usage"]["cost"] == pytest.approx(0.004)
    assert record["error_kind"] == "cost_limit"
    assert "Cost: $0.0040" in proc.stdout
    assert manifest(run)["pricing"] == {
        "source": "given",
        "input": 1.0,
        "output": 2.0,
        "cached_input": None,
    }
    unpriced = run_cli(
        "run",
        f"jsonl:{source}",
        "chat",
        "--model",
        "my-local-model",
        "--base-url",
        model_server.base_url,
        "--out",
        str(tmp_path / "unpriced"),
        cwd=tmp_path,
    )
    assert unpriced.returncode == 0, unpriced.stderr
    assert "no price known for model 'my-local-model'" in unpriced.stderr
    assert "Cost: unknown" in unpriced.stdout


def test_config_file_and_pyproject_hold_settings_and_flags_override(
    tmp_path: Path, model_server: ScriptedModelServer
) -> None:
    model_server.set_script(ANSWERS)
    source = tasks_file(tmp_path)
    config = tmp_path / "run.toml"
    config.write_text(
        f'taskset = "jsonl:{source}"\n'
        'harness = "chat"\n'
        'model = "m"\n'
        f'base-url = "{model_server.base_url}"\n'
        "temperature = 0.5\n"
        "limit = 2\n"
        "[model-args]\n"
        "top_k = 3\n"
        "[harness-options]\n"
        'system_prompt = "Be brief."\n'
    )
    proc = run_cli(
        "run", "--config", str(config), "--temperature", "0.1", "--out", "a", cwd=tmp_path
    )
    assert proc.returncode == 0, proc.stderr
    bodies = [r.body for r in model_server.chat_requests]
    assert len(bodies) == 2  # limit = 2
    assert all(b["temperature"] == 0.1 and b["top_k"] == 3 for b in bodies)  # the flag won
    assert bodies[0]["messages"][0] == {"role": "system", "content": "Be brief."}
    # [tool.agentkit] in the nearest pyproject.toml, from a subdirectory
    project = tmp_path / "project"
    (project / "sub").mkdir(parents=True)
    (project / "pyproject.toml").write_text(
        "[project]\nname = 'x'\n[tool.agentkit]\n"
        + config.read_text().replace("[", "[tool.agentkit.")
    )
    model_server.clear_requests()
    proc = run_cli("run", "--out", "b", cwd=project / "sub")
    assert proc.returncode == 0, proc.stderr
    assert [r.body["temperature"] for r in model_server.chat_requests] == [0.5, 0.5]
    # a mistake names the file and the key
    config.write_text('temperature = "hot"\n')
    bad = run_cli("run", "--config", str(config), cwd=tmp_path)
    assert bad.returncode == 2
    assert "run.toml: temperature: expected a number, got the string 'hot'" in bad.stderr
    config.write_text("temprature = 0.3\n")
    bad = run_cli("run", "--config", str(config), cwd=tmp_path)
    assert bad.returncode == 2 and "unknown setting 'temprature'" in bad.stderr
    assert "Traceback" not in bad.stderr


def test_dry_run_prints_the_plan_and_runs_nothing(tmp_path: Path) -> None:
    proc = run_cli(
        "run",
        f"jsonl:{tasks_file(tmp_path)}",
        "chat",
        "--model",
        "m",
        "--base-url",
        "http://127.0.0.1:9/v1",  # nothing listens: a dry run contacts nothing
        "-n",
        "4",
        "--temperature",
        "0.3",
        "--token-limit",
        "1000",
        "--dry-run",
        "--out",
        "r",
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    assert "Dry run" in proc.stdout
    assert "Rollouts: 12 planned (3 tasks × 4), 12 to run" in proc.stdout
    assert '"temperature": 0.3' in proc.stdout and '"token_limit": 1000' in proc.stdout
    assert not (tmp_path / "r").exists()
    as_json = run_cli(
        "run", f"jsonl:{tasks_file(tmp_path)}", "chat", "--dry-run", "--json", cwd=tmp_path
    )
    plan = json.loads(as_json.stdout)
    assert plan["to_run"] == 3 and plan["tasks"] == ["tasks:0", "tasks:1", "tasks:2"]


def test_preflight_stops_a_run_that_would_fail_with_one_message(tmp_path: Path) -> None:
    source = tasks_file(tmp_path)
    # no --base-url: the hosted API needs an API key, and none is set
    proc = run_cli("run", f"jsonl:{source}", "chat", "--model", "gpt-4o-mini", cwd=tmp_path)
    assert proc.returncode == 2
    assert "needs an API key: set OPENAI_API_KEY" in proc.stderr
    assert "Traceback" not in proc.stderr and not (tmp_path / "runs").exists()
    # the harness's program is missing
    proc = run_cli(
        "run",
        f"jsonl:{source}",
        "opencode",
        "--model",
        "m",
        "--base-url",
        "http://127.0.0.1:9/v1",
        "-H",
        "binary=/nonexistent/opencode",
        cwd=tmp_path,
    )
    assert proc.returncode == 2
    assert "the run cannot start" in proc.stderr  # several problems, one message
    assert "cannot reach the model server" in proc.stderr
    assert "/nonexistent/opencode" in proc.stderr
    # the sandbox cannot start: no bubblewrap on PATH
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    proc = run_cli(
        "run", "envplug:2", "controlled", "-T", "sandboxed=true", cwd=tmp_path, PATH=str(empty)
    )
    assert proc.returncode == 2
    assert "the 'local' sandbox cannot start" in proc.stderr
    skipped = run_cli(
        "run",
        "envplug:1",
        "controlled",
        "-T",
        "sandboxed=true",
        "--sandbox",
        "host",
        "--no-preflight",
        cwd=tmp_path,
    )
    assert skipped.returncode == 0, skipped.stderr


def test_the_scripted_model_runs_the_examples_in_one_terminal(tmp_path: Path) -> None:
    run = tmp_path / "run"
    proc = run_cli(
        "run",
        f"jsonl:{EXAMPLES / 'jsonl' / 'arithmetic.jsonl'}",
        "chat",
        "--model",
        f"scripted:{EXAMPLES / 'scripts' / 'arithmetic.json'}",
        "--out",
        str(run),
        "--json",
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    assert summary["mean_reward"] == 1.0 and summary["usage"]["cost"] == 0.0
    assert manifest(run)["context"]["model"].startswith("scripted:")
    missing = run_cli("run", "envplug:1", "controlled", "--model", "scripted:nope.json")
    assert missing.returncode == 2 and "no script file 'nope.json'" in missing.stderr


def test_resume_reruns_what_could_not_run_and_errors_on_request(
    tmp_path: Path, model_server: ScriptedModelServer
) -> None:
    source = tasks_file(tmp_path)
    run = tmp_path / "run"
    # task 0 cannot run (the endpoint fails), task 1 errors (a bad request), task 2 passes
    model_server.set_script(
        {
            "rules": [
                {"match": {"last_user_contains": "0 + 0"}, "reply": {"fail": "server_error"}},
                {"match": {"last_user_contains": "1 + 1"}, "reply": {"status": 400}},
                *ANSWERS["rules"][2:],
            ],
        }
    )
    base = ("--max-retries", "0")
    proc = run_cli(
        "run",
        f"jsonl:{source}",
        "chat",
        "--model",
        "m",
        "--base-url",
        model_server.base_url,
        "--out",
        str(run),
        *base,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    assert "See why: agentkit show" in proc.stderr
    failed = run_cli("show", str(run), "--failed", cwd=tmp_path)
    assert "model_server_error" in failed.stdout and "[could not run]" in failed.stdout
    assert "model_bad_request" in failed.stdout
    model_server.set_script(ANSWERS)  # the endpoint is fixed
    again = run_cli("run", "--resume", str(run), *base, "--json", cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    summary = json.loads(again.stdout)
    assert summary["this_session"]["rerun"] == 1  # only the rollout that could not run
    assert summary["errors"] == 1
    errors = run_cli("run", "--resume", str(run), "--retry-errors", "--json", cwd=tmp_path)
    assert errors.returncode == 0, errors.stderr
    summary = json.loads(errors.stdout)
    assert summary["this_session"]["rerun"] == 1 and summary["errors"] == 0
    assert summary["mean_reward"] == 1.0 and summary["finished"] == 3
    # every rollout id has its last line win; show reads the run as it is now
    shown = json.loads(run_cli("show", str(run), "--json", cwd=tmp_path).stdout)
    assert shown["errors"] == 0 and shown["finished"] == 3
    assert len(lines(run / "rollouts.jsonl")) == 5


def test_resume_extends_lets_the_endpoint_move_and_names_what_differs(
    tmp_path: Path, model_server: ScriptedModelServer, model_server_factory: Any
) -> None:
    model_server.set_script(ANSWERS)
    source = tasks_file(tmp_path)
    run = tmp_path / "run"
    first = run_cli(
        "run",
        f"jsonl:{source}",
        "chat",
        "--model",
        "m",
        "--base-url",
        model_server.base_url,
        "--temperature",
        "0.2",
        "--out",
        str(run),
        cwd=tmp_path,
    )
    assert first.returncode == 0, first.stderr
    moved = model_server_factory(ANSWERS)
    extended = run_cli(
        "run",
        "--resume",
        str(run),
        "-n",
        "2",
        "--base-url",
        moved.base_url,
        "--model",
        "m2",
        "--json",
        cwd=tmp_path,
    )
    assert extended.returncode == 0, extended.stderr
    summary = json.loads(extended.stdout)
    assert summary["finished"] == 6 and summary["this_session"]["ran"] == 3
    assert len(moved.chat_requests) == 3 and all(
        r.body["model"] == "m2" for r in moved.chat_requests
    )
    assert all(r.body["temperature"] == 0.2 for r in moved.chat_requests)  # kept from the run
    m = manifest(run)
    assert m["plan"]["rollouts_per_task"] == 2
    assert m["resumes"][-1]["changed"]["context.model"] == {"was": "m", "now": "m2"}
    groups = lines(run / "groups.jsonl")
    last = {g["task_id"]: g for g in groups}
    assert all(len(g["rollout_ids"]) == 2 for g in last.values())
    # what changes results is refused, naming the setting as the user gives it
    hotter = run_cli("run", "--resume", str(run), "--temperature", "0.9", cwd=tmp_path)
    assert hotter.returncode == 2
    assert "--temperature differs: the run used 0.2, now 0.9" in hotter.stderr
    other = run_cli("run", "--resume", str(run), "--task", "tasks:1", cwd=tmp_path)
    assert other.returncode == 2 and "the tasks differ (--task differ)" in other.stderr
    assert "digest" not in other.stderr
    fewer = run_cli("run", "--resume", str(run), "-n", "1", cwd=tmp_path)
    assert fewer.returncode == 2 and "has 2 rollouts per task" in fewer.stderr
    retry_alone = run_cli("run", "envplug:1", "controlled", "--retry-errors", cwd=tmp_path)
    assert retry_alone.returncode == 2 and "give --resume DIR" in retry_alone.stderr


def test_run_token_limit_stops_cleanly_and_resume_continues(
    tmp_path: Path, model_server: ScriptedModelServer
) -> None:
    model_server.set_script(
        {"default": {"content": "x", "usage": {"prompt_tokens": 90, "completion_tokens": 10}}}
    )
    rows = [{"id": str(i), "input": f"q{i}", "target": "x"} for i in range(6)]
    source = tasks_file(tmp_path, rows)
    run = tmp_path / "run"
    common = ("-c", "1", "--max-retries", "0")
    proc = run_cli(
        "run",
        f"jsonl:{source}",
        "chat",
        "--model",
        "m",
        "--base-url",
        model_server.base_url,
        "--run-token-limit",
        "250",
        "--out",
        str(run),
        *common,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    assert "Stopped: the run used 300 tokens, reaching its limit of 250" in proc.stderr
    summary = json.loads((run / "summary.json").read_text())
    assert summary["finished"] == 3 and summary["complete"] is False
    more = run_cli("run", "--resume", str(run), "--run-token-limit", "5000", "--json", cwd=tmp_path)
    assert more.returncode == 0, more.stderr
    assert json.loads(more.stdout)["complete"] is True


def test_show_one_rollout_the_failed_ones_and_the_list_of_runs(
    tmp_path: Path, model_server: ScriptedModelServer
) -> None:
    model_server.set_script(
        {
            "rules": [
                {
                    "match": {"last_user_contains": "0 + 0"},
                    "reply": {"tool_calls": [{"name": "calc", "arguments": {"x": "0+0"}}]},
                },
                *ANSWERS["rules"][1:2],
            ],
            "default": {"content": "wrong"},
        }
    )
    runs = tmp_path / "runs"
    for name in ("a", "b"):
        proc = run_cli(
            "run",
            f"jsonl:{tasks_file(tmp_path)}",
            "chat",
            "--model",
            f"model-{name}",
            "--base-url",
            model_server.base_url,
            "--out",
            str(runs / name),
            cwd=tmp_path,
        )
        assert proc.returncode == 0, proc.stderr
    (runs / "not-a-run").mkdir()
    shown = run_cli("show", str(runs / "a"), "--rollout", "1-", cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    out = shown.stdout
    assert "== Task ==" in out and "What is 1 + 1?" in out and "Target: 2" in out
    assert "[assistant] 2" in out and "core.correct: 1" in out
    assert "Tokens:" in out and "Timings:" in out and "Steps:" in out
    tool = run_cli("show", str(runs / "a"), "--rollout", "0-", cwd=tmp_path).stdout
    assert "-> tool call calc(" in tool
    ambiguous = run_cli("show", str(runs / "a"), "--rollout", "nope", cwd=tmp_path)
    assert ambiguous.returncode == 2 and "no rollout 'nope'" in ambiguous.stderr
    failed = run_cli("show", str(runs / "a"), "--failed", cwd=tmp_path)
    assert "2 of 3 rollouts did not pass" in failed.stdout and "scored 0" in failed.stdout
    listing = run_cli("runs", str(runs), "--json", cwd=tmp_path)
    rows = json.loads(listing.stdout)
    assert [r["model"] for r in rows] == ["model-b", "model-a"]  # newest first
    assert rows[0]["finished"] == 3 and rows[0]["planned"] == 3
    assert rows[0]["mean_reward"] == pytest.approx(1 / 3)
    table = run_cli("runs", cwd=tmp_path)  # default folder: runs/
    assert "model-a" in table.stdout and "not-a-run" not in table.stdout


def test_export_writes_beside_the_run_by_default(tmp_path: Path) -> None:
    run = tmp_path / "run"
    assert run_cli("run", "envplug:2", "controlled", "--out", str(run)).returncode == 0
    proc = run_cli("export", str(run), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert (run / "train.jsonl").is_file() and str(run / "train.jsonl") in proc.stdout


def test_listings_and_help_speak_plainly(tmp_path: Path) -> None:
    sandboxes = run_cli("list", "sandboxes", cwd=tmp_path).stdout
    assert "``" not in sandboxes and ":data:" not in sandboxes
    described = run_cli("describe", "envplug:2", "controlled", cwd=tmp_path)
    assert "Compiled rubric: envplug:2 × controlled" in described.stdout
    helped = run_cli("run", "--help", cwd=tmp_path).stdout
    for flag in ("--temperature", "--top-p", "--seed", "--max-tokens", "--max-turns", "-M,"):
        assert flag in helped
    assert "--header" in helped and "--config" in helped and "--dry-run" in helped
    one = run_cli("run", "envplug:1", "controlled", "--out", str(tmp_path / "one"), cwd=tmp_path)
    assert "1 rollout to run (1 task × 1)" in one.stderr
    assert one.stdout.count("Run directory") == 1 and "Run directory" not in one.stderr
