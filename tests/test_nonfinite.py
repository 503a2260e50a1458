"""NaN and infinities are refused wherever a setting is read, and never written as JSON.

``--temperature nan`` used to be accepted, sent upstream and written into
manifest.json, job.json and calls files (which strict JSON parsers then
refuse). Each entry point is tried here: every float flag of every command
(a meta-test over the click parameters), ``-M``, ``-H/-T/-S``, the run's
config file, job files and their flags, Python's RunOptions, RunContext,
prices, plugin options, tasks and JSONL files; and the writers of the run
directory write strict JSON even when a plugin's record holds a NaN.
"""

from __future__ import annotations

import json
import logging
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import click
import pytest

import agentkit
from agentkit import (
    EventRecorder,
    HarnessResult,
    Job,
    ListTaskset,
    OptionError,
    Price,
    Rubric,
    RunContext,
    SpecError,
    Task,
    ValidationError,
    registry,
)
from agentkit._limits import dumps_finite
from agentkit._options import OptionSchema
from agentkit.cli import COMMANDS
from agentkit.cli._numbers import FiniteFloat, FiniteFloatRange
from agentkit.testing.model_server import ScriptedModelServer
from agentkit.validation import load_json, structure

ROOT = Path(__file__).resolve().parents[1]
ARITH = f"jsonl:{ROOT / 'examples' / 'jsonl' / 'arithmetic.jsonl'}"
FLEET_TASKS = ROOT / "examples" / "fleet" / "tasks.json"


def strict_json(text: str) -> Any:
    """Parse as a strict JSON parser does: NaN and Infinity are errors."""

    def refuse(name: str) -> Any:
        raise ValueError(f"{name} in JSON")

    return json.loads(text, parse_constant=refuse)


def agentkit_cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"}
    return subprocess.run(
        [sys.executable, "-m", "agentkit", *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd,
        env={**env, "NO_COLOR": "1"},
    )


def refused(proc: subprocess.CompletedProcess[str], *needles: str) -> str:
    """Exit status 2, no traceback, nothing on stdout, each needle in the error."""
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr and proc.stdout == ""
    for needle in needles:
        assert needle in proc.stderr, proc.stderr
    return proc.stderr


# -- the command line -----------------------------------------------------------------


def _all_commands() -> list[tuple[str, click.Command]]:
    import importlib

    out: list[tuple[str, click.Command]] = []
    for name, target in sorted(COMMANDS.items()):
        module, attr = target.split(":")
        command = getattr(importlib.import_module(module), attr)
        out.append((name, command))
        if isinstance(command, click.Group):
            out += [(f"{name} {n}", c) for n, c in sorted(command.commands.items())]
    return out


def test_every_float_flag_of_every_command_is_finite() -> None:
    """A new float flag given click's own float type would take nan again: none is."""
    floats = []
    for name, command in _all_commands():
        for param in command.params:
            if isinstance(param.type, click.types.FloatParamType):
                floats.append(f"{name} {param.opts[0]}")
                assert isinstance(param.type, (FiniteFloat, FiniteFloatRange)), (
                    f"agentkit {name} {param.opts[0]} takes click's float: use "
                    "agentkit.cli._numbers.FINITE_FLOAT or finite_range"
                )
    # the flags the issue named are among them
    for flag in ("--temperature", "--top-p", "--timeout", "--cost-limit", "--run-cost-limit"):
        assert f"run {flag}" in floats


@pytest.mark.parametrize(
    "flags",
    [
        ("--temperature", "nan"),
        ("--top-p", "inf"),
        ("--timeout", "nan"),
        ("--cost-limit", "nan"),
        ("--run-cost-limit", "inf"),
        ("--pass-threshold", "-inf"),
    ],
    ids=lambda f: f[0],
)
def test_a_non_finite_flag_is_a_usage_error_naming_it(
    flags: tuple[str, str], tmp_path: Path, model_server: ScriptedModelServer
) -> None:
    out = tmp_path / "run"
    proc = agentkit_cli(
        "run", ARITH, "chat", "--model", "m", "--base-url", model_server.base_url,
        "--out", str(out), *flags,
    )  # fmt: skip
    refused(proc, f"Invalid value for '{flags[0]}'", "is not a finite number")
    assert not out.exists() and model_server.requests == []


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("-M", "temperature=NaN"), "Error: -M temperature=NaN: expected a finite number"),
        (("-M", "top_p=1e999"), "Error: -M top_p=1e999: expected a finite number"),
        (
            ("-H", "request_timeout=nan"),
            "Error: -H request_timeout='nan' for harness 'chat': expected float (a finite number)",
        ),
        (
            ("-S", "ro_binds=[NaN]"),
            "Error: -S ro_binds='[NaN]' for sandbox 'local': expected list[str] | None",
        ),
        (("--price", "input=nan,output=1"), "Error: price input: expected USD per million"),
    ],
    ids=["-M nan", "-M 1e999", "-H", "-S", "--price"],
)
def test_settings_given_as_text_refuse_non_finite_numbers(
    args: tuple[str, str], message: str, tmp_path: Path
) -> None:
    proc = agentkit_cli("run", ARITH, "chat", "--model", "m", "--dry-run", *args)
    [line] = refused(proc, message).strip().splitlines()
    assert line.startswith(message), line


def test_a_taskset_option_refuses_nan() -> None:
    proc = agentkit_cli(
        "run", f"fleet:{FLEET_TASKS}", "fleet-tool-call", "--model", "m", "--dry-run",
        "-T", "eval_ratio=inf",
    )  # fmt: skip
    refused(
        proc, "-T eval_ratio='inf' for taskset provider 'fleet': expected float (a finite number)"
    )


@pytest.mark.parametrize(
    ("toml", "message"),
    [
        ("temperature = nan\n", "run.toml: temperature: expected a finite number, got nan"),
        ("timeout = inf\n", "run.toml: timeout: expected a finite number, got inf"),
        (
            "[model-args]\ntop_p = nan\n",
            "run.toml: model-args.top_p: expected a finite number, got nan",
        ),
        (
            "[harness-options]\nrequest_timeout = -inf\n",
            "run.toml: harness-options.request_timeout: expected a finite number, got -inf",
        ),
    ],
    ids=["temperature", "timeout", "model-args", "harness-options"],
)
def test_the_run_config_file_refuses_nan(tmp_path: Path, toml: str, message: str) -> None:
    (tmp_path / "run.toml").write_text(toml)
    proc = agentkit_cli(
        "run", ARITH, "chat", "--model", "m", "--dry-run", "--config", "run.toml", cwd=tmp_path
    )
    [line] = refused(proc).strip().splitlines()
    assert line == f"Error: {message}", line


# -- job files and their flags ----------------------------------------------------------

JOB = f"""
[job]
name = "nan"

[[tasksets]]
spec = "{ARITH}"

[[harnesses]]
name = "chat"

[[models]]
name = "m"
"""


@pytest.mark.parametrize(
    ("extra", "flags", "message"),
    [
        (
            "[override]\nsampling_args = {temperature = nan}\n",
            (),
            "job.toml: override.sampling_args.temperature: expected a finite number, got nan",
        ),
        ("[override]\ntimeout = inf\n", (), "job.toml: override.timeout: expected a finite number"),
        (
            '[matrix]\n"sampling_args.temperature" = [0.5, nan]\n',
            (),
            "job.toml: matrix.sampling_args.temperature[1]: expected a finite number, got nan",
        ),
        (
            '[matrix]\n"sampling_args.temperature" = [{label = "x", value = -inf}]\n',
            (),
            "job.toml: matrix.sampling_args.temperature[0].value: expected a finite number",
        ),
        (
            "[override]\nharness_options = {request_timeout = nan}\n",
            (),
            "job.toml: cell 'arithmetic.chat.m': harness: option 'request_timeout' for harness "
            "'chat': expected a finite number, got nan",
        ),
        (
            "",
            ("--set", "sampling_args.temperature=nan"),
            "job.toml: override.sampling_args.temperature: expected a finite number, got nan",
        ),
        (
            "",
            ("--matrix", "sampling_args.top_p=0.9,inf"),
            "job.toml: matrix.sampling_args.top_p[1]: expected a finite number, got inf",
        ),
        ("", ("--set", "timeout=nan"), "--set timeout: expected a finite number, got nan"),
    ],
    ids=[
        "sampling-args",
        "timeout",
        "matrix",
        "matrix-labelled",
        "harness-options",
        "--set",
        "--matrix",
        "--set-typed",
    ],
)
def test_job_files_and_flags_refuse_nan(
    tmp_path: Path, extra: str, flags: tuple[str, ...], message: str
) -> None:
    (tmp_path / "job.toml").write_text(JOB + extra)
    proc = agentkit_cli("job", "run", "job.toml", "--dry-run", *flags, cwd=tmp_path)
    [line] = refused(proc).strip().splitlines()
    assert line.startswith(f"Error: {message}"), line


def test_a_job_from_python_refuses_nan() -> None:
    data = {
        "tasksets": [{"spec": ARITH}],
        "harnesses": [{"name": "chat"}],
        "models": [{"name": "m", "sampling_args": {"temperature": math.nan}}],
    }
    with pytest.raises(ValidationError, match=r"models\[0\]\.sampling_args\.temperature: "):
        Job.from_mapping(data)


# -- Python -----------------------------------------------------------------------------


def exact(output: str | None, target: Any) -> float:
    return 1.0 if output == str(target) else 0.0


def test_python_entry_points_refuse_nan(tmp_path: Path) -> None:
    env = agentkit.AgentEnv(
        ListTaskset(
            "ts",
            [Task(task_id="ts:0", input="q", target="0")],
            default_grading_spec=Rubric([exact]),
        ),
        registry.resolve_harness("chat"),
    )
    with pytest.raises(SpecError, match=r"sampling_args\.temperature must be a finite number"):
        env.run(model="m", sampling_args={"temperature": math.nan}, out=tmp_path / "run")
    with pytest.raises(SpecError, match=r"sampling_args\.temperature must be a finite number"):
        env.run(context=RunContext(sampling_args={"temperature": math.inf}))
    assert not (tmp_path / "run").exists()
    with pytest.raises(SpecError, match=r"price output: expected USD per million tokens >= 0"):
        Price(input=1.0, output=math.nan)
    # a plugin's options, from Python or the command line
    schema = OptionSchema.from_callable("harness 'x'", _factory)
    with pytest.raises(OptionError, match=r"option 'timeout' for harness 'x': expected a finite"):
        schema.validate({"timeout": math.nan})
    with pytest.raises(OptionError, match=r"option 'config.a\[0\]' for harness 'x': expected a"):
        schema.validate({"config": {"a": [math.inf]}})
    with pytest.raises(OptionError, match="expected any"):
        schema.parse_cli(["config=NaN"])
    # the strict converter: a typed float, and anywhere in a free-form object
    with pytest.raises(ValidationError, match="expected a finite number, got nan"):
        structure(math.nan, float)
    with pytest.raises(ValidationError, match=r"^a\.b\[1\]: expected a finite number, got inf"):
        structure({"a": {"b": [1, math.inf]}}, dict[str, Any])


def _factory(timeout: float = 1.0, config: Any = None) -> None:
    """A plugin factory with a float option and a free-form one."""


def test_tasks_and_task_files_refuse_nan(tmp_path: Path) -> None:
    for field, value, where in [
        ("metadata", {"weight": math.nan}, "metadata.weight"),
        ("input", {"x": [math.inf]}, r"input.x\[0\]"),
        ("target", math.nan, "target"),
        ("grading_spec", {"threshold": -math.inf}, "grading_spec.threshold"),
    ]:
        with pytest.raises(ValidationError, match=f"^{where}: expected a finite number"):
            Task(**{"task_id": "ts:0", "input": "q", field: value})
    # JSON task files: NaN is not JSON, nor is a number too large for a float
    with pytest.raises(ValidationError, match=r"tasks\.jsonl: NaN is not a JSON number"):
        load_json('{"input": "q", "metadata": {"w": NaN}}', "tasks.jsonl")
    with pytest.raises(ValidationError, match=r"tasks\.jsonl: the number 1e999 is too large"):
        load_json('{"input": "q", "metadata": {"w": 1e999}}', "tasks.jsonl")
    lines = tmp_path / "tasks.jsonl"
    lines.write_text(
        '{"id": "a", "input": "q", "target": 1}\n'
        '{"id": "b", "input": "r", "metadata": {"w": -1e999}}\n'
    )
    taskset = registry.resolve_taskset(f"jsonl:{lines}")
    assert [t.item_id for t in taskset] == ["a"]  # the bad line is a problem, the other loads
    assert any("too large" in str(p) for p in taskset.problems)


# -- what agentkit writes -----------------------------------------------------------------


class NaNHarness:
    """A plugin harness whose result holds NaN and infinity (a bug of the plugin's)."""

    async def run(self, task: Task, context: Any = None, on_event: Any = None) -> HarnessResult:
        recorder = EventRecorder(task.task_id, context.rollout_id, on_event)
        await recorder.emit("log", score=math.nan)
        return HarnessResult(
            status="completed",
            output=str(task.target),
            events=recorder.events,
            raw={"score": math.nan, "spread": [1.0, math.inf]},
        )


def test_the_run_directory_is_strict_json_even_when_a_record_holds_nan(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    env = agentkit.AgentEnv(
        ListTaskset(
            "ts",
            [Task(task_id="ts:0", input="q", target="0")],
            default_grading_spec=Rubric([exact]),
        ),
        NaNHarness(),
    )
    with caplog.at_level(logging.WARNING, logger="agentkit"):
        env.run(out=tmp_path / "run")
    files = [p for p in (tmp_path / "run").rglob("*.json*") if p.is_file()]
    assert {p.name for p in files} >= {"manifest.json", "rollouts.jsonl", "summary.json"}
    for path in files:
        text = path.read_text()
        for line in text.splitlines() if path.suffix == ".jsonl" else [text]:
            strict_json(line)  # no NaN, no Infinity
    record = strict_json((tmp_path / "run" / "rollouts.jsonl").read_text())
    assert record["raw"] == {"score": None, "spread": [1.0, None]}
    # written as null, and said so: not silently
    assert any("is not a finite number" in r.getMessage() for r in caplog.records)


def test_dumps_finite_is_strict_and_says_what_it_replaced(
    caplog: pytest.LogCaptureFixture,
) -> None:
    assert dumps_finite({"a": [1.5, "é"]}) == '{"a":[1.5,"é"]}'
    with caplog.at_level(logging.WARNING, logger="agentkit"):
        assert dumps_finite({"a": {"b": [0.0, math.nan]}}) == '{"a":{"b":[0.0,null]}}'
    assert "nan at a.b[1] is not a finite number" in caplog.text
