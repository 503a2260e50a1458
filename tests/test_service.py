"""The rollout service (agentkit.service) with real processes: the scripted model server on
loopback, the chat harness through AgentEnv and the model proxy, a run directory.

Every wait is on an event (the server's request log, the service's own groups),
never on the clock.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import attrs
import pytest

from agentkit import SpecError
from agentkit.env import AgentEnv, RunOptions
from agentkit.runs import open_run
from agentkit.service import RolloutService, ServiceError, ServiceGroup
from agentkit.testing.model_server import ScriptedModelServer
from agentkit.training import export_run

pytestmark = pytest.mark.anyio

# every wait below is on an event; this only turns a hang (a bug) into a failure
HANG = 60


def _tasks(tmp_path: Path, rows: list[dict[str, Any]]) -> Path:
    path = tmp_path / "tasks.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _options(server: ScriptedModelServer, tmp_path: Path, **changes: Any) -> RunOptions:
    fields: dict[str, Any] = {
        "model": "scripted-model",
        "base_url": server.base_url,
        "concurrency": 4,
        "token_ids": True,
        "out": tmp_path / "run",
        "preflight": False,
    }
    fields.update(changes)
    return RunOptions(**fields)


TWO_TURNS = {
    "id": "two",
    "input": [{"role": "user", "content": "first"}, {"role": "user", "content": "second"}],
    "target": "ok",
}


async def test_groups_arrive_as_they_finish_and_closing_loses_no_finished_rollout(
    tmp_path: Path, model_server: ScriptedModelServer
) -> None:
    model_server.set_script(
        {
            "rules": [{"match": {"last_user_contains": "never"}, "reply": {"fail": "hang"}}],
            "default": {"content": "4"},
        }
    )
    tasks = _tasks(
        tmp_path,
        [
            {"id": "slow", "input": "never answered", "target": "x"},
            {"id": "fast", "input": "2+2?", "target": "4"},
        ],
    )
    env = AgentEnv.from_names(f"jsonl:{tasks}", "chat")
    with anyio.fail_after(HANG):
        async with RolloutService(env, _options(model_server, tmp_path), group_size=2) as service:
            slow = service.request(task_id="tasks:slow")
            fast = service.request(task_id="tasks:fast")
            group = await service.next_group()
            # the slow group was asked for first; the fast one finished first
            assert group.group_id == fast[0] and group.group_id != slow[0]
            assert group.rewards == [1.0, 1.0]
            report = service.report()
            assert report.in_flight == 2 and report.pending == 1
        after = service.report()
    # closed: the hanging rollouts were stopped, the finished ones are in the run
    assert after.in_flight == 0 and after.delivered == 1
    run = open_run(tmp_path / "run")
    assert sorted(r.rollout_id for r in run.rollouts()) == sorted(
        r.rollout_id for r in group.rollouts
    )
    with pytest.raises(ServiceError, match="closed"):
        service.request()


async def test_closing_keeps_the_finished_rollouts_of_a_group_still_running(
    tmp_path: Path, model_server: ScriptedModelServer
) -> None:
    # the first request is answered, every later one hangs: one rollout of the group
    # finishes, the other never does
    model_server.set_script(
        {
            "rules": [
                {"match": {"last_user_contains": "2+2"}, "times": 1, "reply": {"content": "4"}}
            ],
            "default": {"fail": "hang"},
        }
    )
    tasks = _tasks(tmp_path, [{"id": "a", "input": "2+2?", "target": "4"}])
    env = AgentEnv.from_names(f"jsonl:{tasks}", "chat")
    with anyio.fail_after(HANG):
        async with RolloutService(env, _options(model_server, tmp_path), group_size=2) as service:
            service.request()
            await service.wait_for_rollouts(1)
            await model_server.wait_for_requests(2)
            before = service.report()
    after = service.report()
    assert (before.rollouts_finished, before.in_flight, before.delivered) == (1, 1, 0)
    assert (after.rollouts_finished, after.in_flight) == (1, 0)
    [stored] = open_run(tmp_path / "run").rollouts()
    assert stored.reward == 1.0
    # the group never completed: no group line
    assert (tmp_path / "run" / "groups.jsonl").read_text() == ""


async def test_every_call_names_the_policy_version_that_answered_it(
    tmp_path: Path,
    model_server: ScriptedModelServer,
    model_server_factory: Callable[..., ScriptedModelServer],
) -> None:
    model_server.set_script({"default": {"content": "ok"}})
    second = model_server_factory({"default": {"content": "ok"}})
    env = AgentEnv.from_names(f"jsonl:{_tasks(tmp_path, [TWO_TURNS])}", "chat")
    options = _options(model_server, tmp_path, concurrency=1)
    with anyio.fail_after(HANG):
        async with RolloutService(env, options, group_size=1, format="jsonl") as service:
            model_server.hold()
            service.request()
            await model_server.wait_for_requests(1)  # the first call is in flight at v0
            await service.set_policy(1, base_url=second.base_url, model="policy-1")
            model_server.release()
            group = await service.next_group()
    calls = group.rollouts[0].model_calls
    assert [c.policy_version for c in calls] == [0, 1]
    # v1's call went to the new endpoint with the new model name; v0's to the old one
    assert [r.body["model"] for r in model_server.chat_requests] == ["scripted-model"]
    assert [r.body["model"] for r in second.chat_requests] == ["policy-1"]
    assert calls[1].forwarded["model"] == "policy-1"
    assert (group.oldest_version, group.newest_version, group.version) == (0, 1, 1)
    # the run directory's calls file says the same, read back by agentkit.runs
    stored = open_run(tmp_path / "run").calls(group.rollouts[0].rollout_id)
    assert [c.policy_version for c in stored] == [0, 1]


async def test_restart_on_update_runs_a_rollout_again_under_the_new_policy(
    tmp_path: Path, model_server: ScriptedModelServer
) -> None:
    model_server.set_script({"default": {"content": "ok"}})
    env = AgentEnv.from_names(f"jsonl:{_tasks(tmp_path, [TWO_TURNS])}", "chat")
    options = _options(model_server, tmp_path, concurrency=1)
    with anyio.fail_after(HANG):
        async with RolloutService(env, options, group_size=1, restart_on_update=True) as service:
            model_server.hold()
            service.request()
            await model_server.wait_for_requests(1)
            await service.set_policy(1)
            model_server.release()
            group = await service.next_group()
            report = service.report()
    assert [c.policy_version for c in group.rollouts[0].model_calls] == [1, 1]
    assert report.restarted_rollouts == 1 and report.rollouts_finished == 1
    # the restarted attempt left nothing: one line for the rollout
    assert len(open_run(tmp_path / "run").rollouts()) == 1


@pytest.mark.parametrize("on_stale", ["drop", "rerun"])
async def test_a_group_past_the_staleness_bound_is_never_delivered(
    tmp_path: Path, model_server: ScriptedModelServer, on_stale: Any
) -> None:
    model_server.set_script({"default": {"content": "ok"}})
    env = AgentEnv.from_names(f"jsonl:{_tasks(tmp_path, [TWO_TURNS])}", "chat")
    options = _options(model_server, tmp_path, concurrency=2)
    with anyio.fail_after(HANG):
        async with RolloutService(
            env, options, group_size=2, max_staleness=0, on_stale=on_stale
        ) as service:
            model_server.hold()
            (first,) = service.request()
            await model_server.wait_for_requests(2)  # both rollouts' first calls at v0
            await service.set_policy(1)
            model_server.release()
            delivered: list[ServiceGroup] = []
            async for group in service.groups():
                delivered.append(group)
            report = service.report()
    # doomed at the update (both first calls at v0, bound 0): stopped there, not run on
    assert (report.doomed_groups, report.stopped_rollouts) == (1, 2)
    if on_stale == "drop":
        assert delivered == []
        assert (report.dropped_stale, report.rerun_stale, report.delivered) == (1, 0, 0)
        assert report.rollouts_finished == 0
    else:
        (group,) = delivered
        assert group.rerun_of == first and group.group_id != first
        assert {c.policy_version for r in group.rollouts for c in r.model_calls} == {1}
        assert group.staleness == 0
        assert (report.dropped_stale, report.rerun_stale, report.delivered) == (0, 1, 1)
    assert report.pending == 0


async def test_a_group_the_bound_dooms_is_stopped_early_not_run_to_its_end(
    tmp_path: Path, model_server: ScriptedModelServer
) -> None:
    # one rollout of the group is answered at v0; the other's call hangs for ever: once
    # v2 is served with a bound of 1 the group can never be handed over, so its hanging
    # rollout is stopped and the group counted, instead of a wait with no end
    model_server.set_script(
        {
            "rules": [
                {"match": {"last_user_contains": "2+2"}, "times": 1, "reply": {"content": "4"}}
            ],
            "default": {"fail": "hang"},
        }
    )
    tasks = _tasks(tmp_path, [{"id": "a", "input": "2+2?", "target": "4"}])
    env = AgentEnv.from_names(f"jsonl:{tasks}", "chat")
    with anyio.fail_after(HANG):
        async with RolloutService(
            env, _options(model_server, tmp_path), group_size=2, max_staleness=1
        ) as service:
            service.request()
            await service.wait_for_rollouts(1)
            await model_server.wait_for_requests(2)
            await service.set_policy(1)  # one behind: still within the bound
            assert service.report().doomed_groups == 0
            await service.set_policy(2)  # two behind: doomed
            delivered = [group async for group in service.groups()]
        report = service.report()
    assert delivered == []
    assert (report.doomed_groups, report.stopped_rollouts, report.dropped_stale) == (1, 1, 1)
    assert (report.in_flight, report.pending, report.rollouts_finished) == (0, 0, 1)
    # the finished rollout is in the run directory; the stopped one left nothing
    assert [r.reward for r in open_run(tmp_path / "run").rollouts()] == [1.0]


async def test_the_bound_is_checked_against_the_policy_current_at_hand_over(
    tmp_path: Path, model_server: ScriptedModelServer
) -> None:
    model_server.set_script({"default": {"content": "ok"}})
    tasks = _tasks(tmp_path, [{"id": "a", "input": "a", "target": "ok"}])
    env = AgentEnv.from_names(f"jsonl:{tasks}", "chat")
    with anyio.fail_after(HANG):
        async with RolloutService(
            env, _options(model_server, tmp_path), group_size=2, max_staleness=1
        ) as service:
            service.request()
            await model_server.wait_for_requests(2)
            await service.set_policy(1)  # one version behind: within the bound
            ok = await service.next_group()
            service.request()
            await model_server.wait_for_requests(4)
            await service.set_policy(3)  # finished at v1, taken at v3: two behind
            with pytest.raises(ServiceError, match="no group is pending"):
                await service.next_group()
            report = service.report()
    assert ok.staleness == 1 and ok.oldest_version == 0
    assert (report.delivered, report.dropped_stale) == (1, 1)


async def test_many_groups_each_delivered_once_with_the_exports_own_records(
    tmp_path: Path, model_server: ScriptedModelServer
) -> None:
    model_server.set_script(
        {
            "rules": [{"match": {"last_user_contains": "2+2"}, "reply": {"content": "4"}}],
            "default": {"content": "no"},
        }
    )
    rows = [{"id": f"t{i}", "input": "2+2?" if i % 2 else "1+1?", "target": "4"} for i in range(3)]
    env = AgentEnv.from_names(f"jsonl:{_tasks(tmp_path, rows)}", "chat")
    seen: list[ServiceGroup] = []
    with anyio.fail_after(HANG):
        async with RolloutService(
            env, _options(model_server, tmp_path), group_size=3, format="skyrl"
        ) as service:
            ids = service.request(3)
            for _ in ids:
                seen.append(await service.next_group())
            with pytest.raises(ServiceError, match="no group is pending"):
                await service.next_group()
            report = service.report()
    assert sorted(g.group_id for g in seen) == sorted(ids)
    rollout_ids = [r.rollout_id for g in seen for r in g.rollouts]
    assert len(rollout_ids) == len(set(rollout_ids)) == 9
    assert (report.delivered, report.requested, report.rollouts_finished) == (3, 3, 9)
    # each group's data is what `agentkit export --format skyrl` writes for its rollouts
    # (one group per task here, so the export's GRPO groups are the service's)
    exported = tmp_path / "export.json"
    export_run(tmp_path / "run", exported, format="skyrl")
    whole = json.loads(exported.read_text())
    for group in seen:
        data = group.data
        assert data["response_ids"] and all(ids for ids in data["response_ids"])
        assert data["rollout_logprobs"] is not None
        rows_of = [
            i
            for i, meta in enumerate(whole["env_metrics"])
            if meta["rollout_id"] in {r.rollout_id for r in group.rollouts}
        ]
        for key in ("prompt_token_ids", "response_ids", "rewards", "loss_masks"):
            assert data[key] == [whole[key][i] for i in rows_of], key
        advantages = [m["advantage"] for m in data["env_metrics"]]
        assert advantages == [whole["env_metrics"][i]["advantage"] for i in rows_of]


async def test_bad_settings_are_refused_with_the_field_named(
    tmp_path: Path, model_server: ScriptedModelServer
) -> None:
    env = AgentEnv.from_names(f"jsonl:{_tasks(tmp_path, [TWO_TURNS])}", "chat")
    options = _options(model_server, tmp_path)
    with pytest.raises(SpecError, match="max_staleness must be"):
        RolloutService(env, options, group_size=1, max_staleness=-1)
    with pytest.raises(SpecError, match="group_size must be"):
        RolloutService(env, options, group_size=0)
    with pytest.raises(SpecError, match="needs the model proxy"):
        async with RolloutService(env, attrs.evolve(options, model_proxy=False), group_size=1):
            pass
    async with RolloutService(env, options, group_size=1) as service:
        with pytest.raises(SpecError, match="policy version must grow"):
            await service.set_policy(0)
        with pytest.raises(SpecError, match="endpoint path"):
            await service.set_policy(1, base_url="http://127.0.0.1:1/v2")
        with pytest.raises(SpecError, match="unknown task"):
            service.request(task_id="nope")


FULL_DISK = r"""
import json, sys
from pathlib import Path

import anyio

from agentkit.env import AgentEnv, RunOptions
from agentkit.service import RolloutService, ServiceFailed
from agentkit.testing.model_server import ScriptedModelServer

tasks, run = Path(sys.argv[1]), Path(sys.argv[2])


async def main() -> dict:
    out: dict = {"delivered": 0}
    async with ScriptedModelServer() as server:
        # long answers: each rollout writes tens of KiB (its calls, its line)
        server.set_script({"default": {"content": "4 " + "x" * 3000}})
        env = AgentEnv.from_names(f"jsonl:{tasks}", "chat")
        options = RunOptions(
            model="scripted-model", base_url=server.base_url, concurrency=2,
            token_ids=True, out=run, preflight=False,
        )
        try:
            async with RolloutService(env, options, group_size=2) as service:
                service.request(100)
                try:
                    while True:
                        await service.next_group()
                        out["delivered"] += 1
                except BaseException as exc:
                    out["raised"] = type(exc).__name__
                    out["message"] = str(exc)
                    out["cause"] = type(getattr(exc, "cause", None)).__name__
                try:
                    service.request(1)
                except BaseException as exc:
                    out["request_after"] = type(exc).__name__
                out["report_error"] = service.report().error
        except BaseException as exc:  # closing the service raises nothing
            out["close_raised"] = type(exc).__name__
    return out


print(json.dumps(anyio.run(main)))
"""


def test_a_full_disk_reaches_the_trainer_as_one_error_naming_it(tmp_path: Path) -> None:
    """A real full disk (a 256 KiB tmpfs over the run directory, in a private mount
    namespace): the trainer's next_group raises one ServiceFailed naming it, not an
    exception group, and closing the service raises nothing."""
    import shlex
    import shutil
    import subprocess
    import sys

    if shutil.which("unshare") is None:
        pytest.skip("unshare (util-linux) is not installed")
    tasks = _tasks(tmp_path, [{"id": "a", "input": "2+2?", "target": "4"}])
    disk = tmp_path / "disk"
    disk.mkdir()
    script = tmp_path / "trainer.py"
    script.write_text(FULL_DISK)
    command = (
        f"mount -t tmpfs -o size=256k tmpfs {shlex.quote(str(disk))} || exit 3; "
        f"exec {shlex.quote(sys.executable)} {script} {tasks} {disk / 'run'}"
    )
    done = subprocess.run(
        ["unshare", "-rm", "bash", "-c", command], capture_output=True, text=True, timeout=120
    )
    if done.returncode == 3:
        pytest.skip(f"no private mount namespace here: {done.stderr.strip()}")
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["raised"] == "ServiceFailed", out
    # what failed and where the finished rollouts and groups are; not a run's advice
    told = (
        f"the rollout service stopped: {disk / 'run'}/SOME: cannot write: No space left on "
        f"device; every rollout and group it finished before is in {disk / 'run'} "
        "(rollouts.jsonl, groups.jsonl)"
    )
    # the file the disk filled on, as a path in the run (events/, calls/ or a file of its
    # own: whichever write comes first when the disk fills)
    written = out["message"].split(": cannot write: ")[0].partition(f"{disk / 'run'}/")[2]
    assert out["message"] == told.replace("SOME", written), out
    assert out["cause"] == "RunDirWriteError", out
    assert out["request_after"] == "ServiceFailed", out
    assert "No space left on device" in out["report_error"], out
    assert "close_raised" not in out, out
    assert 0 < out["delivered"] < 100, out
