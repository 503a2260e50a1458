"""The Ray executor on a real multi-node Ray cluster on this machine.

One cluster for the module (Ray's own ``ray.cluster_utils.Cluster``: a head
node and two worker nodes, each its own raylet and worker processes): the
chat harness on a JSONL taskset against the scripted model server, and the
Harbor examples with the oracle, run across both nodes with the same results
as the local executor; a node killed mid-run loses nothing, and under
``agentkit run --json`` Ray's news of it goes to stderr, not into the JSON;
resume works across executors in both directions, also after the driver was
killed. Every test that ends or kills a driver then checks that nothing of it is
left: no worker of its Ray job, and, for a local Ray instance the driver started
itself, none of that instance's processes (raylet, GCS, agents, workers); the
module's cluster checks the same of itself once it is shut down.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import psutil
import pytest

from agentkit import AgentEnv, Event
from agentkit.testing.model_server import ScriptedModelServer

pytestmark = [pytest.mark.xdist_group("ray-cluster"), pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[1]
HARBOR = ROOT / "examples" / "harbor"
#: Both worker nodes can run the local sandbox (bubblewrap).
LABELS = {"agentkit/bwrap": "true"}
CPUS_PER_NODE = 2
#: Every process a test starts Ray from has ``MARK=<a value of its own>`` in its
#: environment, and every Ray process inherits it (the raylet passes its environment on to
#: its workers and agents): a test finds its own Ray processes by it, never another's
#: (other engineers' Ray tests may run on this machine at the same time).
MARK = "AGENTKIT_TEST_RAY"
#: How long a test waits for a finished driver's Ray processes to exit (a hang guard, not
#: a measurement: a process left behind stays until the machine restarts).
GONE_GUARD = 120.0


def _live(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def ray_processes(
    mark: str, *, job: str | None = None, under: Path | None = None
) -> list[psutil.Process]:
    """The live processes with ``MARK=mark`` in their environment (with ``job``: only the
    workers of that Ray job), and with ``under``, those whose command line names a path
    under it (the Ray temp directory of a local instance: its raylet, GCS, monitors)."""
    found = []
    me = os.getpid()
    for proc in psutil.process_iter():
        if proc.pid == me:
            continue
        try:
            env = proc.environ()
            mine = env.get(MARK) == mark and (job is None or env.get("RAY_JOB_ID") == job)
            if not mine and under is not None:
                mine = any(str(under) in arg for arg in proc.cmdline())
        except psutil.Error:
            continue  # gone meanwhile (or a zombie)
        if mine and _live(proc):
            found.append(proc)
    return found


def describe(procs: list[psutil.Process]) -> list[str]:
    """One line per process still there: pid, parent, Ray job, command line."""
    out = []
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            job = proc.environ().get("RAY_JOB_ID")
            cmd = " ".join(proc.cmdline())[:200]
            out.append(f"{proc.pid} (parent {proc.ppid()}, job {job}) {cmd}")
    return out


def assert_none_left(find: Callable[[], list[psutil.Process]], what: str) -> None:
    """Wait until ``find`` finds no process (up to GONE_GUARD); fail naming those left,
    once they are killed (they are this test's: ``find`` looks for its mark)."""
    deadline = time.monotonic() + GONE_GUARD
    left = find()
    while left and time.monotonic() < deadline:
        psutil.wait_procs(left, timeout=0.5)  # returns as soon as they have exited
        left = find()
    if left:
        told = describe(left)
        for proc in left:
            with contextlib.suppress(psutil.Error):
                proc.kill()
        psutil.wait_procs(left, timeout=30)
        pytest.fail(f"{len(told)} process(es) of {what} left behind:\n" + "\n".join(told))


def job_of(cluster: Any, driver_pid: int) -> str:
    """The Ray job id (``RAY_JOB_ID``) of the driver process ``driver_pid`` on ``cluster``."""
    logs = Path(cluster.head_node.get_session_dir_path()) / "logs"
    [log] = logs.glob(f"python-core-driver-*_{driver_pid}.log")
    return log.name.removeprefix("python-core-driver-")[:8]


def assert_job_left_nothing(cluster: Any, driver_pid: int) -> None:
    """No worker of the (ended) driver's Ray job is left on the module's cluster."""
    job = job_of(cluster, driver_pid)
    mark = cluster.agentkit_test_mark
    assert_none_left(lambda: ray_processes(mark, job=job), f"Ray job {job} (driver {driver_pid})")


def _need(module: str, why: str) -> None:
    import importlib.util

    if importlib.util.find_spec(module) is None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI must run the Ray executor tests, but {why}")
        pytest.skip(why)


def _need_bwrap() -> None:
    if shutil.which("bwrap") is None:
        if os.environ.get("CI") == "true":
            pytest.fail("CI must run the Ray executor's sandbox tests, but bwrap is missing")
        pytest.skip("bubblewrap (bwrap) is not installed")


@pytest.fixture(scope="module")
def cluster() -> Iterator[Any]:
    """A head node (no CPUs: it only drives) and two worker nodes of 2 CPUs each."""
    _need("ray", "Ray is not installed (pip install 'agentkit[ray]')")
    import ray
    from ray.cluster_utils import Cluster

    # every process of the cluster carries the mark, also nodes tests add later
    mark = f"cluster-{uuid.uuid4().hex[:12]}"
    before = os.environ.get(MARK)
    os.environ[MARK] = mark
    try:
        c = Cluster(initialize_head=True, head_node_args={"num_cpus": 0})
        c.agentkit_test_mark = mark
        for _ in range(2):
            c.add_node(num_cpus=CPUS_PER_NODE, labels=LABELS)
        ray.init(address=c.address, logging_level=logging.WARNING, log_to_driver=False)
        try:
            yield c
        finally:
            ray.shutdown()
            c.shutdown()
        # the cluster's workers (idle ones Ray ended while it ran among them) are gone too
        assert_none_left(lambda: ray_processes(mark), "the module's Ray cluster")
    finally:
        if before is None:
            os.environ.pop(MARK, None)
        else:
            os.environ[MARK] = before


def kill_node(cluster: Any, node: Any) -> None:
    """The node dies as a machine does: its raylet and every process under it at once
    (``remove_node`` alone leaves its worker processes running until they next hear
    from the raylet, so a rollout there could still finish). Returns once the cluster
    has marked it dead (when its health checks give up on it): Ray then tells every
    driver connected at that moment, and that must not be a later test's."""
    import psutil
    import ray

    raylets = node.all_processes.get("raylet", [])
    procs = []
    for info in raylets:
        try:
            procs += psutil.Process(info.process.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            pass
    cluster.remove_node(node, allow_graceful=False)
    for proc in procs:
        with contextlib.suppress(psutil.NoSuchProcess):
            proc.kill()
    psutil.wait_procs(procs, timeout=30)
    while any(n["NodeID"] == node.node_id and n["Alive"] for n in ray.nodes()):
        time.sleep(0.1)


class Output:
    """A process's stdout and stderr, read as they come (to wait on), then parsed."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        self._changed = threading.Condition()
        self._data = {"out": bytearray(), "err": bytearray()}
        self._ended = 0
        self._readers = [
            threading.Thread(target=self._read, args=(name, stream), daemon=True)
            for name, stream in (("out", proc.stdout), ("err", proc.stderr))
        ]
        for reader in self._readers:
            reader.start()

    def _read(self, name: str, stream: Any) -> None:
        for chunk in iter(lambda: stream.read1(1 << 16), b""):
            with self._changed:
                self._data[name] += chunk
                self._changed.notify_all()
        with self._changed:
            self._ended += 1
            self._changed.notify_all()

    @property
    def out(self) -> str:
        with self._changed:
            return self._data["out"].decode(errors="replace")

    @property
    def err(self) -> str:
        with self._changed:
            return self._data["err"].decode(errors="replace")

    def wait_until(self, seen: Callable[[str], bool]) -> bool:
        """Until ``seen`` is true of stdout and stderr together; False if both end first."""

        def both() -> str:
            return (self._data["out"] + self._data["err"]).decode(errors="replace")

        with self._changed:
            self._changed.wait_for(lambda: seen(both()) or self._ended == 2)
            return seen(both())

    def join(self) -> None:
        for reader in self._readers:
            reader.join()

    def __repr__(self) -> str:
        return f"stdout:\n{self.out}\nstderr:\n{self.err}"


def ray_executor(tmp_path: Path, **options: Any) -> Any:
    from agentkit.executors import RayExecutor

    return RayExecutor(node_dir=tmp_path / "nodes", **options)


def arithmetic(tmp_path: Path, n: int = 6) -> Path:
    path = tmp_path / "arith.jsonl"
    rows = [{"id": str(i), "input": f"What is {i} + {i}?", "target": str(2 * i)} for i in range(n)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def arithmetic_script(latency: float = 0.0, right: int = 4) -> dict[str, Any]:
    """Right answers for the first ``right`` tasks, a wrong one for the others."""
    rules = [
        {
            "match": {"last_user_contains": f"{i} + {i}"},
            "reply": {"content": str(2 * i), "latency": latency},
        }
        for i in range(right)
    ]
    return {"rules": rules, "default": {"content": "no idea", "latency": latency}}


def lines(run: Path) -> list[dict[str, Any]]:
    text = (run / "rollouts.jsonl").read_text()
    return [json.loads(line) for line in text.splitlines()]


def essentials(results: Any) -> dict[str, tuple[Any, ...]]:
    """What must not depend on the executor: per rollout id."""
    return {
        r.rollout_id: (r.status, r.reward, r.rewards, r.output, r.error_kind, r.events)
        for r in results.rollouts
    }


@pytest.mark.anyio
async def test_chat_on_jsonl_across_two_nodes_matches_the_local_executor(
    cluster: Any, tmp_path: Path, model_server: ScriptedModelServer
) -> None:
    # each reply takes a while, so the four rollouts in flight need both nodes' CPUs
    model_server.set_script(arithmetic_script(latency=0.3))
    received: list[Event] = []
    env = AgentEnv.from_names(
        f"jsonl:{arithmetic(tmp_path)}", "chat", trace_callback=received.append
    )
    options: dict[str, Any] = {
        "rollouts_per_task": 2,
        "concurrency": 2 * CPUS_PER_NODE,
        "model": "scripted-model",
        "base_url": model_server.base_url,
    }
    local = await env.evaluate(**options, out=tmp_path / "local")
    local_events = len(received)
    received.clear()
    remote = await env.evaluate(**options, out=tmp_path / "ray", executor=ray_executor(tmp_path))

    assert essentials(remote) == essentials(local)
    assert remote.mean_reward == local.mean_reward == 4 / 6
    for key in ("finished", "scored", "errors", "pass_at_k", "metrics", "complete"):
        assert remote.summary[key] == local.summary[key], key
    assert {r.worker for r in local.rollouts} == {None}
    nodes = {r.worker["node_id"] for r in remote.rollouts}
    assert len(nodes) == 2, nodes  # four rollouts at once do not fit on one node
    described = remote.summary["this_session"]["executor"]
    assert described["name"] == "ray" and sum(described["attempts_by_node"].values()) == 12
    # every rollout recorded exactly once, with its events file
    written = lines(tmp_path / "ray")
    assert sorted(x["rollout_id"] for x in written) == sorted(essentials(local))
    for line in written:
        assert line["worker"]["node_id"] in nodes
        events = (tmp_path / "ray" / line["events_file"]).read_text().splitlines()
        assert len(events) == line["events"] > 0
        # its model call passed the proxy of the worker process that ran it, and the
        # record came back with the attempt
        [call] = (tmp_path / "ray" / line["calls_file"]).read_text().splitlines()
        recorded = json.loads(call)
        assert recorded["rollout_id"] == line["rollout_id"] and recorded["status"] == 200
        assert recorded["session_id"].startswith(line["rollout_id"])
    assert (
        sum(x["calls"] for x in written)
        == len(written)
        == sum(x["calls"] for x in lines(tmp_path / "local"))
    )
    # the harness's events reached the trace callback live, in order per rollout
    assert len(received) == local_events == sum(r.events for r in remote.rollouts)
    by_rollout: dict[str, list[int]] = {}
    for event in received:
        by_rollout.setdefault(event.rollout_id or "", []).append(event.seq)
    assert set(by_rollout) == set(essentials(local))
    assert all(seqs == sorted(seqs) for seqs in by_rollout.values())
    manifest = json.loads((tmp_path / "ray" / "manifest.json").read_text())
    assert manifest["options"]["executor"] == "ray"


@pytest.mark.anyio
async def test_harbor_oracle_across_nodes_matches_the_local_executor(
    cluster: Any, tmp_path: Path
) -> None:
    _need("agentkit_harbor", "the Harbor plugin is not installed")
    _need_bwrap()
    env = AgentEnv.from_names(f"harbor:{HARBOR}", "oracle")
    options: dict[str, Any] = {
        "rollouts_per_task": 1,
        "concurrency": 2 * CPUS_PER_NODE,
        "sandbox_options": {"image": "host"},
    }
    local = await env.evaluate(**options, out=tmp_path / "local")
    run = tmp_path / "ray"
    remote = await env.evaluate(**options, out=run, executor=ray_executor(tmp_path))

    assert essentials(remote) == essentials(local)
    by_task = {r.task_id: r for r in remote.rollouts}
    assert by_task["harbor:hello-world"].reward == 1.0
    assert by_task["harbor:too-slow"].error_kind == "agent_timeout"
    # what Harbor keeps came back to the driver's run directory
    hello = by_task["harbor:hello-world"]
    kept = run / "artifacts" / hello.rollout_id / "harbor" / "verifier" / "test-stdout.txt"
    assert "PASS" in kept.read_text()
    steps = run / "artifacts" / by_task["harbor:build-a-tool"].rollout_id / "harbor" / "steps"
    assert sorted(p.name for p in steps.iterdir()) == ["document", "implement", "scaffold"]
    # sandboxes stay on their node: removed after a pass, kept after a failure
    assert hello.worker is not None and hello.worker["sandbox_dir"] is None
    slow = by_task["harbor:too-slow"].worker
    assert slow is not None and Path(slow["sandbox_dir"]).is_dir()
    assert Path(slow["sandbox_dir"]).is_relative_to(tmp_path / "nodes")
    assert not (run / "rollouts").exists()
    assert not list((tmp_path / "nodes").glob("*/artifacts/*"))  # sent, then removed


@pytest.mark.anyio
async def test_a_compose_task_runs_on_a_nodes_local_sandbox(
    cluster: Any, tmp_path: Path, image_cache: Path
) -> None:
    """A compose task (web app, database with a healthcheck, one-shot migration) on the
    local sandbox of a worker node: its services are bubblewrap sandboxes there."""
    _need("agentkit_harbor", "the Harbor plugin is not installed")
    _need_bwrap()
    tasks = tmp_path / "tasks"
    tasks.mkdir()
    (tasks / "web-db").symlink_to(ROOT / "tests" / "fixtures" / "compose" / "web-db")
    env = AgentEnv.from_names(f"harbor:{tasks}", "oracle")
    results = await env.evaluate(
        out=tmp_path / "ray",
        sandbox_options={"image_cache": str(image_cache)},
        executor=ray_executor(tmp_path),
    )
    (rollout,) = results.rollouts
    assert rollout.reward == 1.0, rollout.error
    assert rollout.worker is not None and rollout.worker["node_id"], rollout.worker


@pytest.mark.anyio
async def test_artifacts_go_to_a_shared_directory_when_named(cluster: Any, tmp_path: Path) -> None:
    _need("agentkit_harbor", "the Harbor plugin is not installed")
    _need_bwrap()
    env = AgentEnv.from_names(f"harbor:{HARBOR}", "oracle")
    shared = tmp_path / "shared"
    results = await env.evaluate(
        task_ids=["harbor:hello-world"],
        out=tmp_path / "run",
        sandbox_options={"image": "host"},
        executor=ray_executor(tmp_path, artifacts_dir=shared),
    )
    (rollout,) = results.rollouts
    assert rollout.reward == 1.0
    link = tmp_path / "run" / "artifacts" / rollout.rollout_id
    assert link.is_symlink() and link.resolve() == (shared / rollout.rollout_id).resolve()
    assert "PASS" in (link / "harbor" / "verifier" / "test-stdout.txt").read_text()


@pytest.mark.anyio
async def test_a_node_killed_mid_run_loses_nothing(
    cluster: Any, tmp_path: Path, model_server: ScriptedModelServer
) -> None:

    victim = cluster.add_node(num_cpus=CPUS_PER_NODE, labels=LABELS)
    cluster.wait_for_nodes()
    victim_id = victim.node_id
    model_server.set_script(arithmetic_script())
    # No answer until the victim is gone: with every slot's request in flight at once,
    # exactly CPUS_PER_NODE of them run on the victim (a latency instead let a rollout
    # finish before the last one started, or one on the victim finish after its kill).
    model_server.hold()
    slots = 3 * CPUS_PER_NODE
    env = AgentEnv.from_names(f"jsonl:{arithmetic(tmp_path, n=slots)}", "chat")
    run = tmp_path / "run"

    async def kill_when_every_node_is_busy() -> None:
        # as many rollouts in flight as the three nodes have CPUs: two on the victim
        try:
            while len(model_server.chat_requests) < slots:
                await anyio.sleep(0.05)
            await anyio.to_thread.run_sync(lambda: kill_node(cluster, victim))
        finally:
            model_server.release()

    async with anyio.create_task_group() as tg:
        tg.start_soon(kill_when_every_node_is_busy)
        results = await env.evaluate(
            rollouts_per_task=1,
            concurrency=slots,
            model="scripted-model",
            base_url=model_server.base_url,
            out=run,
            retry_base_delay=0.05,
            executor=ray_executor(tmp_path),
        )
    assert len(results.rollouts) == slots and results.summary["complete"]
    assert results.summary["errors"] == 0 and results.mean_reward == 4 / slots
    retried = [r for r in results.rollouts if r.attempts > 1]
    assert len(retried) == CPUS_PER_NODE, [(r.rollout_id, r.attempts) for r in retried]
    for r in retried:
        assert r.retries[0]["error_kind"] in ("node_died", "worker_died"), r.retries
        assert r.worker is not None and r.worker["node_id"] != victim_id
    assert sorted(x["rollout_id"] for x in lines(run)) == sorted(
        r.rollout_id for r in results.rollouts
    )


def test_json_stays_one_document_while_a_node_dies(
    cluster: Any, tmp_path: Path, model_server: ScriptedModelServer
) -> None:
    # Ray tells every driver of a node it marks dead by printing on the driver's stdout;
    # `agentkit run --json` keeps stdout for the summary, so that news goes to stderr
    victim = cluster.add_node(num_cpus=CPUS_PER_NODE, labels=LABELS)
    cluster.wait_for_nodes()
    victim_id = victim.node_id
    model_server.set_script(arithmetic_script())
    model_server.hold()  # as in test_a_node_killed_mid_run_loses_nothing: two on the victim
    slots = 3 * CPUS_PER_NODE
    run = tmp_path / "run"
    argv = [
        sys.executable, "-m", "agentkit", "run", f"jsonl:{arithmetic(tmp_path, n=slots)}",
        "chat", "-c", str(slots), "--model", "scripted-model", "--base-url",
        model_server.base_url, "--out", str(run), "--executor", "ray", "--ray-address",
        cluster.address, "--json",
    ]  # fmt: skip
    driver = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    output = Output(driver)
    try:
        while len(model_server.chat_requests) < slots:
            assert driver.poll() is None, output
            time.sleep(0.05)
        kill_node(cluster, victim)
        # the rollouts wait until Ray's news of the death has reached the driver
        news = f"{victim_id} and address"  # "The node with node id: ID and address: ..."
        assert output.wait_until(lambda text: news in text), output
    finally:
        model_server.release()
        try:
            driver.wait(timeout=240)  # a hang guard, not a measurement
        finally:
            if driver.poll() is None:
                driver.kill()
            output.join()
    assert driver.returncode == 0, output
    summary = json.loads(output.out)  # one JSON document, nothing else
    assert summary == json.loads((run / "summary.json").read_text())
    assert summary["complete"] and summary["errors"] == 0 and summary["finished"] == slots
    assert news in output.err and "marked dead" in output.err  # Ray's words, on stderr
    # and agentkit's, for each rollout the node took with it
    lost = [x for x in output.err.splitlines() if x.startswith("agentkit: the ")]
    assert len(lost) == CPUS_PER_NODE, output.err
    assert all(x.endswith("; it is run again") and " died" in x for x in lost), lost
    assert (
        sorted(x["attempts"] for x in lines(run))
        == [1] * (slots - CPUS_PER_NODE) + [2] * CPUS_PER_NODE
    )
    assert_job_left_nothing(cluster, driver.pid)


@pytest.mark.anyio
async def test_resume_a_local_run_on_ray_with_more_rollouts(
    cluster: Any, tmp_path: Path, model_server: ScriptedModelServer
) -> None:
    model_server.set_script(arithmetic_script())
    env = AgentEnv.from_names(f"jsonl:{arithmetic(tmp_path, n=4)}", "chat")
    options: dict[str, Any] = {"model": "scripted-model", "base_url": model_server.base_url}
    run = tmp_path / "run"
    first = await env.evaluate(**options, rollouts_per_task=1, out=run)
    assert len(first.rollouts) == 4
    resumed = await env.evaluate(
        **options, rollouts_per_task=2, resume=run, executor=ray_executor(tmp_path)
    )
    assert resumed.summary["this_session"]["ran"] == 4 and resumed.summary["complete"]
    written = lines(run)
    assert len(written) == 8 == len({(x["task_id"], x["rollout_index"]) for x in written})
    assert [x["worker"] is None for x in written] == [True] * 4 + [False] * 4
    assert resumed.mean_reward == 1.0


def test_a_killed_ray_driver_is_resumed_by_the_local_executor(
    cluster: Any, tmp_path: Path, model_server: ScriptedModelServer
) -> None:
    model_server.set_script(arithmetic_script(latency=0.5, right=8))
    tasks = arithmetic(tmp_path, n=8)
    run = tmp_path / "run"
    argv = [
        sys.executable,
        "-m",
        "agentkit",
        "run",
        f"jsonl:{tasks}",
        "chat",
        "-n",
        "2",
        "-c",
        "2",
        "--model",
        "scripted-model",
        "--base-url",
        model_server.base_url,
        "--out",
        str(run),
        "--executor",
        "ray",
        "--ray-address",
        cluster.address,
        "--json",
    ]
    env = {**os.environ, "NO_COLOR": "1"}
    driver = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 240
        while not (run / "rollouts.jsonl").exists() or len(lines(run)) < 3:
            assert driver.poll() is None, driver.communicate()
            assert time.monotonic() < deadline, "the Ray run recorded nothing"
            time.sleep(0.05)
    finally:
        driver.send_signal(signal.SIGKILL)
        driver.communicate()
    assert_job_left_nothing(cluster, driver.pid)  # killed, its workers go too
    done_before = {x["rollout_id"] for x in lines(run)}
    assert 3 <= len(done_before) < 16
    assert all(x["worker"] is not None for x in lines(run))
    resumed = subprocess.run(
        [sys.executable, "-m", "agentkit", "run", "--resume", str(run), "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert resumed.returncode == 0, resumed.stderr
    summary = json.loads(resumed.stdout)
    assert summary["complete"] and summary["finished"] == 16 and summary["mean_reward"] == 1.0
    assert summary["this_session"]["executor"] == {"name": "local"}
    assert summary["this_session"]["resumed_from"] == len(done_before)
    written = lines(run)
    keys = [(x["task_id"], x["rollout_index"]) for x in written]
    assert len(keys) == 16 == len(set(keys))  # every (task, rollout) recorded exactly once


def local_ray_env(ray_tmp: Path, mark: str) -> dict[str, str]:
    """A driver's environment for a local Ray instance of its own: no cluster to join (no
    ``RAY_ADDRESS``; Ray's temp directory, where ``ray start`` leaves its address, is the
    test's own) and the test's mark."""
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env.update({"NO_COLOR": "1", "RAY_TMPDIR": str(ray_tmp), MARK: mark})
    return env


@pytest.fixture
def ray_tmp() -> Iterator[Path]:
    """A Ray temp directory for one test (short: Ray's socket paths live under it)."""
    path = Path(tempfile.mkdtemp(prefix="akr-", dir="/tmp"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def cluster_core(cluster: Any) -> set[int]:
    """The pids of the module cluster's GCS and raylets."""
    return {
        p.pid
        for p in ray_processes(cluster.agentkit_test_mark)
        if p.name() in ("gcs_server", "raylet")
    }


#: A harness that runs a program on its worker's host (as an agent program run outside a
#: sandbox does: a shell with a job in the background) and waits for it; imported by the
#: workers of a local Ray instance through the driver's PYTHONPATH, which they inherit.
PROGRAM_HARNESS = """
import asyncio
from agentkit import HarnessResult

class ProgramHarness:
    async def run(self, task, context=None, on_event=None):
        program = await asyncio.create_subprocess_exec("sh", "-c", "sleep 1000 & wait")
        await program.wait()
        return HarnessResult(status="completed", output="done")
"""
#: A driver with four such rollouts, two at a time, on a Ray instance of its own.
PROGRAM_DRIVER = """
import sys
from agentkit import AgentEnv, ListTaskset, Task
from agentkit.executors import RayExecutor
from agentkit_test_ray_program import ProgramHarness

tasks = ListTaskset("t", [Task(task_id=f"t:{i}", input="q") for i in range(4)])
env = AgentEnv(tasks, ProgramHarness())
env.run(
    out=sys.argv[1], concurrency=2, preflight=False, executor=RayExecutor(node_dir=sys.argv[2])
)
"""


def test_a_killed_driver_leaves_nothing_of_the_ray_instance_it_started(
    cluster: Any, tmp_path: Path, ray_tmp: Path
) -> None:
    # the module's cluster runs meanwhile: the driver neither joins it (it was not started
    # with `ray start`) nor touches it
    (tmp_path / "agentkit_test_ray_program.py").write_text(PROGRAM_HARNESS)
    mark = f"local-{uuid.uuid4().hex[:12]}"
    env = local_ray_env(ray_tmp, mark)
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), env.get("PYTHONPATH", "")])
    args = [str(tmp_path / "run"), str(tmp_path / "nodes")]

    def of_the_run() -> list[psutil.Process]:
        return ray_processes(mark, under=ray_tmp)

    def programs() -> list[psutil.Process]:
        return [p for p in of_the_run() if p.name() == "sleep"]

    theirs = cluster_core(cluster)
    out = tmp_path / "driver.out"
    with out.open("wb") as sink:  # a file: nothing the driver leaves can hold a pipe open
        driver = subprocess.Popen(
            [sys.executable, "-c", PROGRAM_DRIVER, *args], env=env, stdout=sink, stderr=sink
        )
    try:
        while len(programs()) < 2:  # both rollouts in flight have started their program
            assert driver.poll() is None, out.read_text()
            time.sleep(0.05)
        running = describe(of_the_run())
    finally:
        driver.send_signal(signal.SIGKILL)
        driver.wait()
    # the driver started a Ray instance of its own (in its Ray temp directory), whose
    # workers started the programs
    for name in ("gcs_server", "raylet", "ray::", " sleep 1000"):
        assert any(name in line for line in running), running
    assert any(f"{ray_tmp}/ray/session_" in line for line in running), running
    assert_none_left(of_the_run, "the Ray instance the killed driver started")
    assert cluster_core(cluster) == theirs and theirs  # the module's cluster is untouched


def test_a_run_on_its_own_ray_instance_ends_it_and_what_a_killed_one_left(
    cluster: Any, tmp_path: Path, model_server: ScriptedModelServer, ray_tmp: Path
) -> None:
    # what a killed driver's instance left when its guard was killed with it: processes
    # marked with an owner that is gone (stand-ins: only the mark matters); one marked
    # with a live owner is not an orphan and stays
    from agentkit.executors._ray_guard import OWNER_ENV
    from agentkit.sandbox._reaper import owner_token

    gone_owner = subprocess.Popen(["sleep", "1000"])
    dead = owner_token(gone_owner.pid)
    gone_owner.kill()
    gone_owner.wait()
    plants = {}
    for name, owner in (("orphan", dead), ("owned", owner_token())):
        plant_env = {**os.environ, OWNER_ENV: owner, MARK: f"plant-{uuid.uuid4().hex[:12]}"}
        plants[name] = subprocess.Popen(["sleep", "1000"], env=plant_env)
    # and `ray start`'s address file names a cluster that is gone (it refuses at once)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        gone = f"127.0.0.1:{probe.getsockname()[1]}"
    (ray_tmp / "ray").mkdir()
    (ray_tmp / "ray" / "ray_current_cluster").write_text(gone)
    model_server.set_script(arithmetic_script(right=4))
    run = tmp_path / "run"
    mark = f"local-{uuid.uuid4().hex[:12]}"
    argv = [
        sys.executable, "-m", "agentkit", "run", f"jsonl:{arithmetic(tmp_path, n=4)}", "chat",
        "-c", "2", "--model", "scripted-model", "--base-url", model_server.base_url,
        "--out", str(run), "--executor", "ray", "--json",
    ]  # fmt: skip
    theirs = cluster_core(cluster)
    try:
        done = subprocess.run(
            argv, env=local_ray_env(ray_tmp, mark), capture_output=True, text=True, timeout=240
        )  # a hang guard, not a measurement
        assert done.returncode == 0, done.stderr
        summary = json.loads(done.stdout)
        assert summary["complete"] and summary["finished"] == 4 and summary["mean_reward"] == 1.0
        assert summary["this_session"]["executor"]["name"] == "ray"
        # it ran on an instance of its own, and ended all of it
        import ray

        assert not {x["worker"]["node_id"] for x in lines(run)} & {n["NodeID"] for n in ray.nodes()}
        assert_none_left(
            lambda: ray_processes(mark, under=ray_tmp), "the Ray instance the run started"
        )
        # before it started, it ended the orphan (and only that)
        assert plants["orphan"].wait(timeout=GONE_GUARD) == -signal.SIGKILL
        assert plants["owned"].poll() is None
        assert cluster_core(cluster) == theirs and theirs  # the module's cluster is untouched
    finally:
        for plant in plants.values():
            plant.kill()
            plant.wait()


def test_without_an_address_a_run_joins_the_cluster_ray_start_named(
    cluster: Any, tmp_path: Path, model_server: ScriptedModelServer, ray_tmp: Path
) -> None:
    # `ray start` leaves the address of the cluster it started in Ray's temp directory
    (ray_tmp / "ray").mkdir()
    (ray_tmp / "ray" / "ray_current_cluster").write_text(cluster.address)
    model_server.set_script(arithmetic_script(right=4))
    run = tmp_path / "run"
    mark = f"joining-{uuid.uuid4().hex[:12]}"
    argv = [
        sys.executable, "-m", "agentkit", "run", f"jsonl:{arithmetic(tmp_path, n=4)}", "chat",
        "--model", "scripted-model", "--base-url", model_server.base_url, "--out", str(run),
        "--executor", "ray", "--json",
    ]  # fmt: skip
    theirs = cluster_core(cluster)
    driver = subprocess.Popen(
        argv, env=local_ray_env(ray_tmp, mark), stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    try:
        out, err = driver.communicate(timeout=240)  # a hang guard, not a measurement
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait()
    assert driver.returncode == 0, err
    assert json.loads(out)["complete"]
    import ray

    # it ran on that cluster, started no Ray of its own, and left the cluster running
    assert {x["worker"]["node_id"] for x in lines(run)} <= {n["NodeID"] for n in ray.nodes()}
    assert not list((ray_tmp / "ray").glob("session_*"))
    assert_none_left(lambda: ray_processes(mark, under=ray_tmp), "the run")
    assert_job_left_nothing(cluster, driver.pid)
    assert cluster_core(cluster) == theirs and theirs


def test_a_stopped_ray_run_exits_cleanly_and_resumes_on_ray(
    cluster: Any, tmp_path: Path, model_server: ScriptedModelServer
) -> None:
    model_server.set_script(arithmetic_script(latency=0.5, right=6))
    run = tmp_path / "run"
    argv = [
        sys.executable, "-m", "agentkit", "run", f"jsonl:{arithmetic(tmp_path)}", "chat",
        "-c", "2", "--model", "scripted-model", "--base-url", model_server.base_url,
        "--no-progress", "--executor", "ray", "--ray-address", cluster.address,
    ]  # fmt: skip
    env = {**os.environ, "NO_COLOR": "1"}
    driver = subprocess.Popen(
        [*argv, "--out", str(run)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    try:
        while not (run / "rollouts.jsonl").exists() or len(lines(run)) < 2:
            assert driver.poll() is None, driver.communicate()
            time.sleep(0.05)
        driver.send_signal(signal.SIGTERM)
        _, err = driver.communicate(timeout=120)  # a hang guard, not a measurement
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait()
    assert driver.returncode == 128 + signal.SIGTERM, err
    assert b"Traceback" not in err and f"agentkit run --resume {run}".encode() in err
    stopped = json.loads((run / "summary.json").read_text())
    assert stopped["interrupted"] is True and 2 <= stopped["finished"] < 6
    assert_job_left_nothing(cluster, driver.pid)
    resumed = subprocess.Popen(
        [*argv[:4], "--resume", str(run), "--executor", "ray", "--ray-address", cluster.address,
         "--json"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        out, err = resumed.communicate(timeout=240)  # a hang guard, not a measurement
    finally:
        if resumed.poll() is None:
            resumed.kill()
            resumed.wait()
    assert resumed.returncode == 0, err
    assert_job_left_nothing(cluster, resumed.pid)
    summary = json.loads(out)
    assert summary["complete"] and summary["finished"] == 6 and summary["mean_reward"] == 1.0
    assert summary["this_session"]["executor"]["name"] == "ray"
    keys = [(x["task_id"], x["rollout_index"]) for x in lines(run)]
    assert len(keys) == 6 == len(set(keys))


@pytest.mark.anyio
async def test_a_harness_that_cannot_be_sent_is_refused_before_running(
    cluster: Any, tmp_path: Path
) -> None:
    import threading

    from agentkit import HarnessResult, ListTaskset, Task
    from agentkit.executors import ExecutorError

    class LockedHarness:
        def __init__(self) -> None:
            self.lock = threading.Lock()

        async def run(self, task: Task, context: Any = None, on_event: Any = None) -> Any:
            return HarnessResult(status="completed", output="x")

    env = AgentEnv(ListTaskset("t", [Task(task_id="t:1", input="q")]), LockedHarness())
    with pytest.raises(ExecutorError, match="sends the harness to every node, but it cannot be"):
        await env.evaluate(out=tmp_path / "run", executor=ray_executor(tmp_path))
    assert not (tmp_path / "run").exists()


@pytest.mark.anyio
async def test_a_sandbox_no_node_is_labelled_for_is_refused(cluster: Any, tmp_path: Path) -> None:
    _need("agentkit_harbor", "the Harbor plugin is not installed")
    from agentkit.executors import ExecutorError

    env = AgentEnv.from_names(f"harbor:{HARBOR}", "oracle", sandbox="docker")
    with pytest.raises(ExecutorError, match=r"agentkit/docker=true"):
        await env.evaluate(out=tmp_path / "run", executor=ray_executor(tmp_path))


def test_a_run_the_cluster_refuses_leaves_no_connection_behind(
    cluster: Any, tmp_path: Path
) -> None:
    # a connection left open would print Ray's news after `agentkit run` gave stdout back
    _need("agentkit_harbor", "the Harbor plugin is not installed")
    script = (
        "import sys, anyio, ray\n"
        "from agentkit import AgentEnv\n"
        "from agentkit.executors import ExecutorError, RayExecutor\n"
        "env = AgentEnv.from_names(sys.argv[1], 'oracle', sandbox='docker')\n"
        "run = env.evaluate(out=sys.argv[2], executor=RayExecutor(sys.argv[3]))\n"
        "try:\n"
        "    anyio.run(lambda: run)\n"
        "except ExecutorError as exc:\n"
        "    print('refused:', exc)\n"
        "print('connected:', ray.is_initialized())\n"
    )
    args = [f"harbor:{HARBOR}", str(tmp_path / "run"), cluster.address]
    driver = subprocess.Popen(
        [sys.executable, "-c", script, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        out, err = driver.communicate(timeout=240)  # a hang guard, not a measurement
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait()
    assert driver.returncode == 0, err
    assert_job_left_nothing(cluster, driver.pid)
    assert "refused: no node of the Ray cluster has the label agentkit/docker" in out
    assert out.endswith("connected: False\n"), out


@pytest.mark.anyio
async def test_no_secret_in_the_clusters_logs_or_the_run_directory(
    cluster: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import uuid

    from agentkit import HarnessResult, ListTaskset, Task

    secret = f"sk-ray-{uuid.uuid4().hex}"
    monkeypatch.setenv("AGENTKIT_RAY_TEST_KEY", secret)

    class TellingHarness:
        """Logs the key on the worker, then fails with it in the error."""

        async def run(self, task: Task, context: Any = None, on_event: Any = None) -> Any:
            logging.getLogger("agentkit").warning("telling harness: key %s", context.api_key)
            if task.task_id.endswith("1"):
                raise RuntimeError(f"refused with key {context.api_key}")
            return HarnessResult(status="completed", output=f"the key is {context.api_key}")

    tasks = [Task(task_id=f"t:{i}", input="q") for i in range(2)]
    env = AgentEnv(ListTaskset("t", tasks), TellingHarness())
    run = tmp_path / "run"
    results = await env.evaluate(
        out=run,
        api_key_env="AGENTKIT_RAY_TEST_KEY",
        preflight=False,
        executor=ray_executor(tmp_path),
    )
    by_task = {r.task_id: r for r in results.rollouts}
    assert by_task["t:1"].error_kind == "harness_exception"
    assert secret not in json.dumps(results.summary)
    assert {r.worker is not None for r in results.rollouts} == {True}
    logs = Path(cluster.head_node.get_session_dir_path()) / "logs"
    told = 0
    for path in [*logs.rglob("*"), *run.rglob("*")]:
        if path.is_file() and not path.is_symlink():
            data = path.read_bytes()
            assert secret.encode() not in data, path
            told += data.count(b"telling harness: key ***")
    assert told == 2  # the workers' log lines are there, redacted


@pytest.mark.anyio
async def test_a_harness_the_nodes_cannot_import_is_refused_in_one_line(
    cluster: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from agentkit import ListTaskset, Task
    from agentkit.executors import ExecutorError

    (tmp_path / "agentkit_only_on_the_driver.py").write_text(
        "from agentkit import HarnessResult\n\n"
        "class Harness:\n"
        "    async def run(self, task, context=None, on_event=None):\n"
        "        return HarnessResult(status='completed', output='x')\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    import agentkit_only_on_the_driver as only_here  # type: ignore[import-not-found]

    env = AgentEnv(ListTaskset("t", [Task(task_id="t:1", input="q")]), only_here.Harness())
    with pytest.raises(ExecutorError) as caught:
        await env.evaluate(out=tmp_path / "run", executor=ray_executor(tmp_path))
    message = str(caught.value)
    assert "No module named 'agentkit_only_on_the_driver' there: every node needs" in message
    assert "\n" not in message and "Traceback" not in message
    assert not (tmp_path / "run").exists()


TWO_TURNS = {
    "id": "two",
    "input": [{"role": "user", "content": "first"}, {"role": "user", "content": "second"}],
    "target": "ok",
}


def _service_options(tmp_path: Path, server: ScriptedModelServer, **changes: Any) -> Any:
    from agentkit.env import RunOptions

    fields: dict[str, Any] = {
        "model": "scripted-model",
        "base_url": server.base_url,
        "concurrency": 2,
        "token_ids": True,
        "out": tmp_path / "run",
        "preflight": False,
        "executor": ray_executor(tmp_path),
    }
    fields.update(changes)
    return RunOptions(**fields)


@pytest.mark.anyio
async def test_the_rollout_service_on_ray_workers_follows_each_policy(
    cluster: Any,
    tmp_path: Path,
    model_server: ScriptedModelServer,
    model_server_factory: Callable[..., ScriptedModelServer],
) -> None:
    """Rollouts of the rollout service on Ray workers: a call that starts after
    set_policy returned goes to the new policy's endpoint and model, and names its
    version, as on the local executor (the workers' routes ask the policy keeper)."""
    from agentkit.service import RolloutService

    model_server.set_script({"default": {"content": "ok"}})
    second = model_server_factory({"default": {"content": "ok"}})
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(json.dumps(TWO_TURNS) + "\n")
    env = AgentEnv.from_names(f"jsonl:{tasks}", "chat")
    with anyio.fail_after(120):
        async with RolloutService(
            env, _service_options(tmp_path, model_server), group_size=2, format="jsonl"
        ) as service:
            model_server.hold()
            service.request()
            await model_server.wait_for_requests(2)  # both first calls in flight at v0
            await service.set_policy(1, base_url=second.base_url, model="policy-1")
            model_server.release()
            group = await service.next_group()
    for rollout in group.rollouts:
        assert rollout.worker is not None and rollout.worker["node_id"]  # on a worker
        assert [c.policy_version for c in rollout.model_calls] == [0, 1]
        assert rollout.model_calls[1].forwarded["model"] == "policy-1"
    assert [r.body["model"] for r in second.chat_requests] == ["policy-1", "policy-1"]
    assert {r.body["model"] for r in model_server.chat_requests} == {"scripted-model"}
    assert (group.oldest_version, group.newest_version) == (0, 1)


@pytest.mark.anyio
async def test_the_service_hears_of_calls_on_ray_workers_and_stops_a_doomed_group(
    cluster: Any, tmp_path: Path, model_server: ScriptedModelServer
) -> None:
    """A call made on a worker at v0 reaches the driver's service (through the policy
    keeper): once v1 is served with a bound of 0 the rollout, whose second call hangs
    for ever, is stopped instead of waited for."""
    from agentkit.service import RolloutService

    model_server.set_script(
        {
            "rules": [{"match": {"last_user_contains": "second"}, "reply": {"fail": "hang"}}],
            "default": {"content": "ok"},
        }
    )
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(json.dumps(TWO_TURNS) + "\n")
    env = AgentEnv.from_names(f"jsonl:{tasks}", "chat")
    with anyio.fail_after(120):
        async with RolloutService(
            env, _service_options(tmp_path, model_server), group_size=1, max_staleness=0
        ) as service:
            service.request()
            await model_server.wait_for_requests(2)  # the second call hangs, at v0
            await service.set_policy(1)
            delivered = [group async for group in service.groups()]
        report = service.report()
    assert delivered == []
    assert (report.doomed_groups, report.stopped_rollouts, report.dropped_stale) == (1, 1, 1)
    assert report.rollouts_finished == 0 and report.in_flight == 0


RAY_TRAINER = r"""
import json, sys
import ray
from agentkit.service import ServiceFailed

ray.init(address=sys.argv[1], logging_level="WARNING", log_to_driver=False)
service = ray.get_actor(sys.argv[2], namespace="agentkit")
out = {"ids": ray.get(service.request.remote(2))}
first = ray.get(service.next_group.remote())
ray.get(service.set_policy.remote(1, model="policy-1"))
second = ray.get(service.next_group.remote())
out["groups"] = [
    {
        "id": g.group_id,
        "rewards": g.rewards,
        "versions": [[c.policy_version for c in r.model_calls] for r in g.rollouts],
        "response_ids": g.data["response_ids"],
    }
    for g in (first, second)
]
try:
    ray.get(service.set_policy.remote(1))
except Exception as exc:
    out["refused"] = [type(exc).__name__, str(exc).splitlines()[-1]]
out["report"] = ray.get(service.report.remote()).to_json()
print(json.dumps(out))
"""


def test_a_trainer_in_another_process_uses_the_service_through_its_ray_actor(
    cluster: Any, tmp_path: Path, model_server: ScriptedModelServer
) -> None:
    import ray

    from agentkit.env import RunOptions
    from agentkit.service import serve_on_ray

    model_server.set_script({"default": {"content": "ok"}})
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(json.dumps(TWO_TURNS) + "\n")
    env = AgentEnv.from_names(f"jsonl:{tasks}", "chat")
    options = RunOptions(
        model="scripted-model",
        base_url=model_server.base_url,
        concurrency=2,
        token_ids=True,
        out=tmp_path / "run",
        preflight=False,
    )
    name = f"service-{uuid.uuid4().hex[:8]}"
    handle = serve_on_ray(env, options, group_size=2, max_staleness=1, name=name)
    try:
        done = subprocess.run(
            [sys.executable, "-c", RAY_TRAINER, cluster.address, name],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        out = json.loads(done.stdout.strip().splitlines()[-1])
        with pytest.raises(Exception, match="exists"):
            serve_on_ray(env, options, group_size=2, name=name)
    finally:
        last = ray.get(handle.close.remote(), timeout=120)
        ray.kill(handle)
    assert out["ids"] == [0, 1]
    assert sorted(g["id"] for g in out["groups"]) == [0, 1]
    for group in out["groups"]:
        assert group["rewards"] == [1.0, 1.0] and all(group["response_ids"])
    assert out["refused"][0].startswith("SpecError") or "SpecError" in out["refused"][0]
    assert "policy version must grow" in out["refused"][1]
    assert out["report"]["delivered"] == 2 and out["report"]["policy_version"] == 1
    assert last.delivered == 2 and last.in_flight == 0
    assert len(lines(tmp_path / "run")) == 4


RAY_FAILED_TRAINER = r"""
import json, sys
import ray
from agentkit.service import ServiceFailed

ray.init(address=sys.argv[1], logging_level="WARNING", log_to_driver=False)
service = ray.get_actor(sys.argv[2], namespace="agentkit")
out = {"ids": ray.get(service.request.remote(1))}
for call in ("next_group", "request"):
    try:
        ray.get(getattr(service, call).remote())
    except ServiceFailed as exc:
        out[call] = {
            "message": str(exc.cause),  # Ray's own str is its traceback of the actor
            "ray_said": str(exc).splitlines()[-1],
            "run_dir": exc.run_dir,
            "cause": [type(exc.cause.cause).__name__, exc.cause.cause.failure],
        }
    except BaseException as exc:
        out[call] = {"other": f"{type(exc).__name__}: {exc}"}
out["report"] = ray.get(service.report.remote()).error
print(json.dumps(out))
"""


def test_a_failure_in_the_service_reaches_the_trainers_ray_handle_as_service_failed(
    cluster: Any, tmp_path: Path, model_server: ScriptedModelServer
) -> None:
    # a real write failure of the run directory (a file where the service's first rollout
    # makes its events directory) inside the service's actor; the trainer, in another
    # process, gets ServiceFailed with its message through the actor's handle
    import ray

    from agentkit.env import RunOptions
    from agentkit.service import serve_on_ray

    model_server.set_script({"default": {"content": "ok"}})
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(json.dumps(TWO_TURNS) + "\n")
    env = AgentEnv.from_names(f"jsonl:{tasks}", "chat")
    run = tmp_path / "run"
    options = RunOptions(
        model="scripted-model", base_url=model_server.base_url, out=run, preflight=False
    )
    name = f"service-{uuid.uuid4().hex[:8]}"
    handle = serve_on_ray(env, options, group_size=1, name=name)
    try:
        (run / "events").write_text("in the way\n")
        done = subprocess.run(
            [sys.executable, "-c", RAY_FAILED_TRAINER, cluster.address, name],
            capture_output=True,
            text=True,
            timeout=300,
        )  # a hang guard, not a measurement
        assert done.returncode == 0, done.stderr[-3000:]
        out = json.loads(done.stdout.strip().splitlines()[-1])
    finally:
        ray.get(handle.close.remote(), timeout=120)
        ray.kill(handle)
    # the events file of the group's one rollout (its id: the task's, a hash, the index)
    failure = out["next_group"]["cause"][1]
    assert re.fullmatch(
        rf"{re.escape(str(run))}/events/two-[0-9a-f]{{8}}-r0\.jsonl: cannot write: File exists",
        failure,
    ), failure
    message = (
        f"the rollout service stopped: {failure}; every rollout and group it finished "
        f"before is in {run} (rollouts.jsonl, groups.jsonl)"
    )
    told = {
        "message": message,
        "ray_said": f"agentkit.service._service.ServiceFailed: {message}",
        "run_dir": str(run),
        "cause": ["RunDirWriteError", failure],
    }
    assert out["next_group"] == told, out
    assert out["request"] == told, out  # every later call
    assert out["report"] == message


#: A harness that answers with the Ray temp directory of the worker running it (its
#: ``--temp-dir``), and the mode and owner of the directory that holds it.
TEMP_HARNESS = """
import json, os, sys
from agentkit import HarnessResult

class TempHarness:
    async def run(self, task, context=None, on_event=None):
        [temp] = [a.split("=", 1)[1] for a in sys.argv if a.startswith("--temp-dir=")]
        held = os.stat(os.path.dirname(temp))
        seen = {"temp_dir": temp, "mode": held.st_mode & 0o777, "uid": held.st_uid}
        return HarnessResult(status="completed", output=json.dumps(seen))
"""
#: A driver with one such rollout on a Ray instance of its own; prints its output.
TEMP_DRIVER = """
import sys
from agentkit import AgentEnv, ListTaskset, Task
from agentkit.executors import RayExecutor
from agentkit_test_ray_temp import TempHarness

tasks = ListTaskset("t", [Task(task_id="t:0", input="q")])
env = AgentEnv(tasks, TempHarness())
results = env.run(out=sys.argv[1], preflight=False, executor=RayExecutor(node_dir=sys.argv[2]))
print(results.rollouts[0].output)
"""
#: Long enough that Ray's socket paths under it pass the 107 bytes Linux allows.
LONG_TMPDIR = 100


def long_tmpdir(tmp_path: Path) -> Path:
    """A directory of LONG_TMPDIR bytes under ``tmp_path``."""
    pad = LONG_TMPDIR - len(str(tmp_path)) - 1
    assert pad > 0, f"pytest's temp directory is already too long: {tmp_path}"
    path = tmp_path / ("t" * pad)
    path.mkdir()
    return path


@pytest.mark.parametrize("tmpdir", ["short", "long"])
def test_a_local_ray_instance_runs_in_a_private_directory_removed_with_it(
    tmp_path: Path, tmpdir: str
) -> None:
    # Ray makes its temp directory 0777 (its session's logs and sockets): a local instance
    # gets one in a directory of the driver's own (0700), made under TMPDIR, or under /tmp
    # when TMPDIR is too long for Ray's socket paths, and removed with the instance
    _need("ray", "Ray is not installed (pip install 'agentkit[ray]')")
    (tmp_path / "agentkit_test_ray_temp.py").write_text(TEMP_HARNESS)
    mark = f"privtmp-{uuid.uuid4().hex[:12]}"
    if tmpdir == "long":
        base, parent = long_tmpdir(tmp_path), Path("/tmp")
    else:
        base = parent = Path(tempfile.mkdtemp(prefix="akt-", dir="/tmp"))
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "RAY_TMPDIR")}
    env.update({"NO_COLOR": "1", "TMPDIR": str(base), MARK: mark})
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), env.get("PYTHONPATH", "")])
    try:
        done = subprocess.run(
            [sys.executable, "-c", TEMP_DRIVER, str(tmp_path / "run"), str(tmp_path / "nodes")],
            env=env,
            capture_output=True,
            text=True,
            timeout=240,
        )  # a hang guard, not a measurement
        assert done.returncode == 0, done.stderr[-3000:]
        seen = json.loads(done.stdout.splitlines()[-1])
        temp = Path(seen["temp_dir"])
        made = temp.parent
        assert temp.name == "ray" and made.parent == parent and made.name.startswith("akray-")
        # Ray's 0777 directories inside are out of other users' reach
        assert (seen["mode"], seen["uid"]) == (0o700, os.getuid())
        assert not made.exists()  # removed with the instance
        assert_none_left(lambda: ray_processes(mark), "the Ray instance the run started")
    finally:
        if tmpdir == "short":
            shutil.rmtree(base, ignore_errors=True)


def test_a_too_long_ray_tmpdir_is_one_clear_error(tmp_path: Path) -> None:
    # RAY_TMPDIR is the user's own choice: too long, the run says so before starting Ray
    _need("ray", "Ray is not installed (pip install 'agentkit[ray]')")
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text('{"id": "0", "input": "q", "target": "a"}\n')
    ray_tmp = long_tmpdir(tmp_path)
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env.update({"NO_COLOR": "1", "RAY_TMPDIR": str(ray_tmp)})
    argv = [
        sys.executable, "-m", "agentkit", "run", f"jsonl:{tasks}", "chat", "--model", "m",
        "--base-url", "http://127.0.0.1:9/v1", "--out", str(tmp_path / "run"),
        "--executor", "ray", "--no-progress",
    ]  # fmt: skip
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode != 0
    assert "Traceback" not in done.stderr, done.stderr
    assert f"RAY_TMPDIR is {LONG_TMPDIR} bytes long ({ray_tmp})" in done.stderr, done.stderr
    assert "set RAY_TMPDIR to a directory of at most 36 bytes" in done.stderr, done.stderr
    assert not (ray_tmp / "ray").exists()  # Ray was not started


@pytest.mark.parametrize(
    ("given", "told"),
    [
        # Ray names the option: that one is named, not the others given
        (["--ray-init", "num_cpus=2", "--ray-init", "foo=1"], "option foo (--ray-init, "
         "init_options); Ray said: RuntimeError: Unknown keyword argument(s): foo"),
        # Ray does not: the option given is named; Ray refuses it once its instance started
        (["--ray-init", "num_cpus=abc"], "option num_cpus (--ray-init, init_options); Ray "
         "said: AssertionError: CPU (<class 'str'>): abc"),
        # from a config file's ray_init table
        (["--config", "CONFIG"], "option foo (--ray-init, init_options); Ray said: "
         "RuntimeError: Unknown keyword argument(s): foo"),
    ],
)  # fmt: skip
def test_a_ray_init_option_ray_refuses_is_one_clear_error(
    tmp_path: Path, given: list[str], told: str
) -> None:
    _need("ray", "Ray is not installed (pip install 'agentkit[ray]')")
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text('{"id": "0", "input": "q", "target": "a"}\n')
    config = tmp_path / "run.toml"
    config.write_text("[ray_init]\nnum_cpus = 2\nfoo = 1\n")
    base = Path(tempfile.mkdtemp(prefix="akt-", dir="/tmp"))
    mark = f"badinit-{uuid.uuid4().hex[:12]}"
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "RAY_TMPDIR")}
    env.update({"NO_COLOR": "1", "TMPDIR": str(base), MARK: mark})
    argv = [
        sys.executable, "-m", "agentkit", "run", f"jsonl:{tasks}", "chat", "--model", "m",
        "--base-url", "http://127.0.0.1:9/v1", "--out", str(tmp_path / "run"),
        "--executor", "ray", "--no-progress", "--no-preflight",
        *[str(config) if arg == "CONFIG" else arg for arg in given],
    ]  # fmt: skip
    try:
        done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=240)
        assert done.returncode == 2, done.stderr
        assert "Traceback" not in done.stderr, done.stderr
        [error] = [line for line in done.stderr.splitlines() if line.startswith("Error: ")]
        assert error == f"Error: ray.init failed with the Ray init {told}", done.stderr
        assert not list(base.iterdir())  # its private directory went with it
        assert_none_left(lambda: ray_processes(mark), "the Ray instance that did not start")
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _hostile_node_dir(path: Path, kind: str, elsewhere: Path) -> str:
    """Make ``path`` as another local user could before the run: what the error says."""
    if kind == "link":
        path.symlink_to(elsewhere, target_is_directory=True)
        return "is a symbolic link"
    path.mkdir()
    if kind == "open":
        path.chmod(0o777)
        return "is open to other users (mode 0777, not 0700)"
    os.chown(path, 65534, 65534)  # nobody
    return f"belongs to another user (uid 65534, not {os.getuid()})"


@pytest.mark.parametrize("kind", ["other owner", "link", "open"])
def test_a_default_node_dir_another_user_could_use_is_refused(kind: str, tmp_path: Path) -> None:
    # the default node directory is <temp dir>/agentkit-ray-<uid>, this user's own: one
    # made first by another user, a link, or one open to all is refused, never used
    from agentkit.executors._ray_worker import NodeDirError, default_node_dir, private_node_dir

    if kind == "other owner" and os.geteuid() != 0:
        pytest.skip("giving a directory to another user needs root")
    path = tmp_path / f"agentkit-ray-{os.getuid()}"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    problem = _hostile_node_dir(path, kind, elsewhere)
    with pytest.raises(NodeDirError) as refused:
        private_node_dir(str(path))
    assert f"{path}, where runs keep their files on this node, {problem}; expected" in str(
        refused.value
    )
    assert not any(elsewhere.iterdir())
    assert default_node_dir() == os.path.join(tempfile.gettempdir(), path.name)
    shutil.rmtree(path) if not path.is_symlink() else path.unlink()
    assert private_node_dir(str(path)) == path  # made again: this user's, 0700
    made = path.lstat()
    assert (made.st_uid, made.st_mode & 0o7777) == (os.getuid(), 0o700)


def test_a_run_on_ray_stops_at_a_hostile_node_dir_and_resumes_in_its_own(
    tmp_path: Path,
) -> None:
    # through the CLI on a local Ray instance: the run stops with the one message (no
    # traceback), nothing written into the other user's directory; removed, the run
    # resumes and the node's files go into a directory made for this user (0700)
    _need("ray", "Ray is not installed (pip install 'agentkit[ray]')")
    if os.geteuid() != 0:
        pytest.skip("giving a directory to another user needs root")
    temp = tmp_path / "tmp"
    temp.mkdir()
    temp.chmod(0o1777)  # a shared temp directory, as /tmp is
    node_dir = temp / f"agentkit-ray-{os.getuid()}"
    problem = _hostile_node_dir(node_dir, "other owner", tmp_path)
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "RAY_TMPDIR")}
    env.update({"NO_COLOR": "1", "TMPDIR": str(temp)})
    env.pop("AGENTKIT_PLUGINS", None)
    env.pop("AGENTKIT_DISABLE_PLUGINS", None)
    out = tmp_path / "run"
    script = json.loads((ROOT / "examples" / "scripts" / "arithmetic.json").read_text())

    def agentkit(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "agentkit", *args],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )  # a hang guard, not a measurement

    with ScriptedModelServer(script) as server:
        done = agentkit(
            "run",
            "jsonl:examples/jsonl/arithmetic.jsonl",
            "chat",
            "--model",
            "scripted",
            "--base-url",
            server.base_url,
            "--out",
            str(out),
            "--no-progress",
            "--executor",
            "ray",
        )
        assert done.returncode == 2, done.stderr[-3000:]
        assert "Traceback" not in done.stdout + done.stderr, done.stderr[-3000:]
        errors = [x for x in done.stderr.splitlines() if x.startswith("Error: ")]
        assert len(errors) == 1 and f"{node_dir}, where runs keep" in errors[0], done.stderr
        assert problem in errors[0]
        assert not any(node_dir.iterdir())

        node_dir.rmdir()
        done = agentkit("run", "--resume", str(out), "--no-progress", "--executor", "ray")
        assert done.returncode == 0, done.stderr[-3000:]
    made = node_dir.lstat()
    assert (made.st_uid, made.st_mode & 0o7777) == (os.getuid(), 0o700)
    lines = (out / "rollouts.jsonl").read_text().splitlines()
    assert len(lines) == 10 and all(json.loads(x)["status"] == "completed" for x in lines)
