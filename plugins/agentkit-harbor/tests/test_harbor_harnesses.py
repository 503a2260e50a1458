"""The oracle, nop and stepwise harnesses in a real local sandbox."""

from __future__ import annotations

from pathlib import Path

import pytest
from agentkit_harbor import HarborTaskset, NopHarness, OracleHarness, StepwiseHarness, harbor_reward
from harbor_helpers import EXAMPLES, needs_bwrap, task_sandbox

from agentkit import ExecutionHints, HarnessResult, RunContext, Task
from agentkit import registry as agentkit_registry
from agentkit.testing.conformance import harness_conformance_test, harness_shape_problem

BASE = '[environment]\nworkdir = "/app"\nnetwork_mode = "no-network"\n'


def hello_world() -> Task:
    return HarborTaskset(str(EXAMPLES)).get_task("harbor:hello-world")


def hints_of(task: Task) -> ExecutionHints:
    return HarborTaskset(str(EXAMPLES)).execution_hints(task)


# in a local sandbox made from the task's hints (on the host userland), as the runner would
test_oracle_conforms = harness_conformance_test(
    "oracle", task=hello_world, sandbox="local", hints=hints_of, sandbox_options={"image": "host"}
)
test_nop_conforms = harness_conformance_test(
    "nop", task=hello_world, sandbox="local", hints=hints_of, sandbox_options={"image": "host"}
)


def test_harnesses_satisfy_the_contract_and_are_registered() -> None:
    for cls in (OracleHarness, NopHarness, StepwiseHarness):
        assert harness_shape_problem(cls) is None
        assert cls.requires_sandbox is True
    assert isinstance(agentkit_registry.resolve_harness("oracle"), OracleHarness)
    assert isinstance(agentkit_registry.resolve_harness("nop"), NopHarness)
    assert "harbor" in agentkit_registry.names("taskset")
    info = {p.name: p for p in agentkit_registry.plugins()}["harbor"]
    assert info.distribution == "agentkit-harbor"
    assert info.registers == {"taskset": ["harbor"], "harness": ["oracle", "nop"]}


def test_oracle_supports_only_harbor_tasks() -> None:
    ts = HarborTaskset(str(EXAMPLES))
    assert OracleHarness().supports(ts.get_task("harbor:hello-world"))
    assert not OracleHarness().supports(Task(task_id="x:y", input="hi"))


@pytest.mark.anyio
async def test_without_a_sandbox_the_result_says_so() -> None:
    task = HarborTaskset(str(EXAMPLES)).get_task("harbor:hello-world")
    result = await OracleHarness().run(task)
    assert result.status == "failed" and result.error_kind == "sandbox_missing"
    assert "needs a sandbox" in (result.error or "")


async def run_in_sandbox(tmp_path: Path, task_dir: Path, harness, events: list | None = None):
    ts = HarborTaskset(str(task_dir))
    (task,) = list(ts)
    async with task_sandbox(ts, task, tmp_path / "rollout") as sb:
        ctx = RunContext(sandbox=sb, rollout_id="r1")
        result = await harness.run(task, ctx, events.append if events is not None else None)
        reward = await harbor_reward(sb, task, result)
    return result, reward


@needs_bwrap
@pytest.mark.anyio
async def test_oracle_runs_solve_sh_with_solution_env_and_agent_user(
    make_task, tmp_path: Path, monkeypatch
) -> None:
    monkeypatch.setenv("AK_ORACLE_SECRET", "s3cret")
    task = make_task(
        "t",
        BASE
        + '[solution]\nenv = { WORD = "${AK_ORACLE_WORD:-bird}", SECRET = "${AK_ORACLE_SECRET}" }\n'
        '[agent]\nuser = "agent"\n',
        {
            # the whole solution/ is uploaded (its helper checked here: a separate
            # verifier, the default, is given the working directory, not /solution)
            "solution/solve.sh": '[ -f /solution/helper.txt ] && echo "$WORD" > /app/word; '
            'pwd; echo "$DEBIAN_FRONTEND"\n',
            "solution/helper.txt": "helper\n",
        },
        test_sh='[ "$(cat /app/word)" = bird ] '
        "&& echo 1 > /logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt\n",
    )
    live: list = []
    result, reward = await run_in_sandbox(tmp_path, task, OracleHarness(), live)
    assert isinstance(result, HarnessResult)
    assert result.status == "completed", result.error
    assert reward == {"reward": 1.0}
    assert "/app" in (result.output or "") and "noninteractive" in (result.output or "")
    assert result.raw["harbor"]["solve_exit_code"] == 0
    execs = [e for e in result.events if e.type == "sandbox.exec"]
    solve = next(e for e in execs if e.data["purpose"] == "oracle.solve")
    assert solve.data["cwd"] == "/app" and solve.data["user"] == "agent"
    assert "ran as its default user" in solve.data["note"]
    assert "SECRET" in solve.data["env_keys"]
    assert all("s3cret" not in str(e.data) for e in result.events)  # env values never logged
    assert [e.seq for e in live] == list(range(len(live)))  # delivered live, in order
    assert result.events[0].type == "harness.start"
    assert [e.type for e in result.events][-1] == "harness.end"


@needs_bwrap
@pytest.mark.anyio
async def test_oracle_timeout_failure_and_missing_solution(make_task, tmp_path: Path) -> None:
    slow = make_task(
        "slow",
        BASE + "[agent]\ntimeout_sec = 0.5\n",
        {"solution/solve.sh": "sleep 20\n"},
        test_sh="echo 0 > /logs/verifier/reward.txt\n",
    )
    result, reward = await run_in_sandbox(tmp_path / "a", slow, OracleHarness())
    assert result.status == "timeout" and result.error_kind == "agent_timeout"
    assert "0.5 s" in (result.error or "") and reward == {"reward": 0.0}

    crash = make_task("crash", BASE, {"solution/solve.sh": "echo oops >&2; exit 3\n"})
    result, _ = await run_in_sandbox(tmp_path / "b", crash, OracleHarness())
    assert result.status == "failed" and result.error_kind == "agent_error"
    assert "exited with code 3" in (result.error or "") and "oops" in (result.output or "")

    none = make_task("none", BASE)
    result, _ = await run_in_sandbox(tmp_path / "c", none, OracleHarness())
    assert result.status == "failed" and result.error_kind == "no_solution"


@needs_bwrap
@pytest.mark.anyio
async def test_oracle_unset_solution_env_is_a_task_error(
    make_task, tmp_path: Path, monkeypatch
) -> None:
    monkeypatch.delenv("AK_ORACLE_UNSET", raising=False)
    task = make_task(
        "t",
        BASE + '[solution]\nenv = { TOKEN = "${AK_ORACLE_UNSET}" }\n',
        {"solution/solve.sh": "true\n"},
    )
    result, _ = await run_in_sandbox(tmp_path, task, OracleHarness())
    assert result.status == "failed" and result.error_kind == "task_error"
    assert "solution.env.TOKEN" in (result.error or "") and "AK_ORACLE_UNSET" in (
        result.error or ""
    )
    assert "could not place" not in (result.error or "")


@needs_bwrap
@pytest.mark.anyio
async def test_environment_healthcheck_gates_the_agent(make_task, tmp_path: Path) -> None:
    task = make_task(
        "t",
        BASE + '[environment.healthcheck]\ncommand = "test -f /app/ready"\ninterval_sec = 0.05\n'
        "retries = 2\n",
        {"solution/solve.sh": "true\n"},
    )
    result, _ = await run_in_sandbox(tmp_path, task, OracleHarness())
    assert result.status == "failed" and result.error_kind == "healthcheck_failed"


@needs_bwrap
@pytest.mark.anyio
async def test_nop_does_nothing_and_examples_fail(tmp_path: Path) -> None:
    result, reward = await run_in_sandbox(tmp_path, EXAMPLES / "hello-world", NopHarness())
    assert result.status == "completed" and reward == {"reward": 0.0}
    assert not [e for e in result.events if e.data.get("purpose") == "oracle.solve"]


class WriteFileHarness:
    """A tiny harness that solves the build-a-tool steps by reading the instruction."""

    name = "write-file"
    seen: list[str]

    def __init__(self) -> None:
        self.seen = []

    async def run(self, task, context=None, on_event=None):
        self.seen.append(str(task.input))
        sb = context.sandbox
        text = str(task.input)
        if "prints `hello`" in text and "NAME" not in text:
            await sb.exec(
                "printf '#!/usr/bin/env bash\\necho hello\\n' > greet.sh; chmod +x greet.sh"
            )
        elif "NAME" in text:
            await sb.exec(
                'printf \'#!/usr/bin/env bash\\nif [ $# -gt 0 ]; then echo "hello, $1"; '
                "else echo hello; fi\\n' > greet.sh"
            )
        else:
            await sb.exec("echo 'use ./greet.sh NAME' > README.md")
        if on_event is not None:
            await on_event_call(on_event, task)
        return HarnessResult(status="completed", output="ok")


async def on_event_call(on_event, task):
    from agentkit import Event

    res = on_event(
        Event(
            type="log",
            rollout_id="",
            task_id=task.task_id,
            seq=0,
            timestamp=0.0,
            data={"message": "inner"},
        )
    )
    if res is not None:
        await res


@needs_bwrap
@pytest.mark.anyio
async def test_stepwise_wraps_any_harness(tmp_path: Path) -> None:
    inner = WriteFileHarness()
    result, reward = await run_in_sandbox(
        tmp_path, EXAMPLES / "build-a-tool", StepwiseHarness(inner)
    )
    assert result.status == "completed", result.error
    assert len(inner.seen) == 3 and "template" in inner.seen[0]
    assert reward["reward"] == 1.0 and reward["steps_completed"] == 3.0
    assert any(e.type == "log" and e.data.get("message") == "inner" for e in result.events)
    seqs = [e.seq for e in result.events]
    assert seqs == sorted(set(seqs))
