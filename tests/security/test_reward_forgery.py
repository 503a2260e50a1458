"""The red team: Harbor tasks whose "solution" tries to make the verifier report a pass.

Each attack is its own small Harbor task under ``redteam/`` (written for this
suite), run with the ``oracle`` harness, which executes its
``solution/solve.sh`` as the agent's turn. The test of every task is honest:
42 in ``/app/answer.txt`` passes, and no solution writes 42. What the
solutions try:

- reward files planted before grading (``reward.txt``, ``reward.json``), and
  written during it by background writers detached with ``setsid`` and
  ``nohup``, by a double fork, as another uid inside, after a delay;
- ``/tests/test.sh`` rewritten while the verifier runs it; a file planted in
  ``/tests`` that the test loads (pytest's ``conftest.py``);
- ``/logs/verifier`` and ``/tests`` replaced by links to folders the agent
  prepared, and bind-mounted over;
- a FIFO and a 2 GiB sparse file as the reward file;
- a ``grep`` planted first on ``PATH``, the system's ``grep`` replaced, the
  verifier's own ``bash`` replaced, ``/etc/ld.so.preload`` loading a library
  that makes ``grep`` succeed; every process killed, the sandbox's own included;
- a verifier made to run past its timeout; NaN, infinite and huge rewards
  (the task's verifier passes the agent's own score on);

and honest controls: one that installs the tool it was asked for in
``/usr/local/bin`` (declared as carried, and not), one that leaves a harmless
service running, and an honest failure, the yardstick.

Every attack runs on the local sandbox (on the host's userland and on an
image root) and on the docker sandbox, at every isolation level: one run of
the whole red team per sandbox and level, and the table below says what
each level stops. A background writer and the test agree on events (files
it makes and the test waits for while the writer still runs where the
verifier runs), never on time, so the writer always wins when it is there:
the outcome never depends on a race. The same table is in
``docs/security.md``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from agentkit import AgentEnv
from agentkit.testing.sandbox_fixtures import (
    ROOT_ONLY,
    need_docker,
    need_image_tool,
    requires_bwrap,
)

pytestmark = [pytest.mark.anyio, requires_bwrap]

REDTEAM = Path(__file__).parent / "redteam"
LEVELS = ("shared", "fork", "separate")
KINDS = ("local-host", "local-image", "docker")

#: What each level makes of each attack: ``stopped`` (scored, and no more than an
#: honest failure: 0), ``forged`` (the attack's pass went through), ``pass`` (an
#: honest control passed), ``noted`` (an honest control failed, with a note naming
#: what the verifier was not given).
S, F, P, N = "stopped", "forged", "pass", "noted"
EXPECTED: dict[str, dict[str, str]] = {
    "plant-reward-txt": {"shared": S, "fork": S, "separate": S},
    "plant-reward-json": {"shared": S, "fork": S, "separate": S},
    "writer-setsid": {"shared": S, "fork": S, "separate": S},
    "writer-double-fork": {"shared": S, "fork": S, "separate": S},
    "writer-other-uid": {"shared": S, "fork": S, "separate": S},
    "rewrite-tests": {"shared": S, "fork": S, "separate": S},
    "plant-tests-file": {"shared": S, "fork": S, "separate": S},
    "symlink-verifier-dir": {"shared": S, "fork": S, "separate": S},
    "symlink-tests-dir": {"shared": S, "fork": S, "separate": S},
    "bind-verifier-dir": {"shared": S, "fork": S, "separate": S},
    "fifo-reward": {"shared": S, "fork": S, "separate": S},
    "sparse-reward": {"shared": S, "fork": S, "separate": S},
    # what the agent's files hold, a shared or forked verifier runs: only separate stops it
    "path-tool": {"shared": F, "fork": F, "separate": S},
    "system-binary": {"shared": F, "fork": F, "separate": S},
    "ld-preload": {"shared": F, "fork": F, "separate": S},
    "replace-bash": {"shared": S, "fork": S, "separate": S},
    "kill-sandbox": {"shared": S, "fork": S, "separate": S},
    "verifier-timeout": {"shared": S, "fork": S, "separate": S},
    "nan-reward": {"shared": S, "fork": S, "separate": S},
    "inf-reward": {"shared": S, "fork": S, "separate": S},
    "huge-reward": {"shared": S, "fork": S, "separate": S},
    "honest-tool": {"shared": P, "fork": P, "separate": P},
    "honest-tool-undeclared": {"shared": P, "fork": P, "separate": N},
    "honest-service": {"shared": P, "fork": P, "separate": P},
    "honest-failure": {"shared": S, "fork": S, "separate": S},
}
#: On the host's userland ``/usr`` is the host's, read-only: no program can be planted
#: there or replaced (its ``/etc`` is the sandbox's own, so ``ld.so.preload`` still works).
CANNOT_PLANT = {"local-host": ("path-tool", "system-binary", "replace-bash")}
#: The error kind the rollout names where the verifier's output is what the attack broke
#: (scored 0, never left out), per level; None: any (an honest 0 has none).
KINDS_NAMED: dict[str, dict[str, str | None]] = {
    "replace-bash": {"shared": "reward_file_not_found", "fork": "reward_file_not_found"},
    # a dead sandbox is graded on its files where they can be read (a fork's copy, a
    # container started again on its layer, the host userland's root), else scored as
    # a failure: a local sandbox's own processes killed cannot end theirs at shared
    "kill-sandbox": {"shared": "sandbox_died"},
    "verifier-timeout": dict.fromkeys(LEVELS, "verifier_timeout"),
    "nan-reward": dict.fromkeys(LEVELS, "reward_parse_error"),
    "inf-reward": dict.fromkeys(LEVELS, "reward_parse_error"),
    "huge-reward": dict.fromkeys(LEVELS, "reward_out_of_range"),
}
#: Where a kind grades what KINDS_NAMED names a failure: a container killed from inside
#: is started again on its files (at every level) and graded on them.
GRADED_ON_ITS_FILES = {"docker": ("kill-sandbox",)}
#: The isolation level no attack gets past (docs/harbor.md says why it is the default).
DEFAULT_LEVEL = "separate"


def expected(kind: str, attack: str, level: str) -> str:
    """What ``level`` makes of ``attack`` on sandbox ``kind``."""
    if attack in CANNOT_PLANT.get(kind, ()):
        return S
    return EXPECTED[attack][level]


@pytest.fixture(scope="module")
def redteam(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The red team's tasks, with the ld-preload attack's library built for this machine."""
    tasks = tmp_path_factory.mktemp("redteam") / "redteam"
    shutil.copytree(REDTEAM, tasks)
    solution = tasks / "ld-preload" / "solution"
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        if os.environ.get("CI") == "true":
            pytest.fail("CI must run the ld.so.preload attack, but no C compiler (cc) is here")
        pytest.skip("no C compiler (cc) to build the ld.so.preload attack's library")
    subprocess.run(
        [
            cc,
            "-shared",
            "-fPIC",
            "-O2",
            "-o",
            str(solution / "preload.so"),
            str(solution / "preload.c"),
        ],
        check=True,
    )
    return tasks


def sandbox_for(kind: str, request: pytest.FixtureRequest) -> tuple[str, dict[str, Any]]:
    """The sandbox and its options for ``kind`` (skipped, or failed under CI, without it)."""
    if kind == "local-host":
        return "local", {"image": "host"}
    if os.environ.get("AGENTKIT_SECURITY_USER"):
        # the images here (the offline stand-ins) are root's engine's and root's Podman's
        pytest.skip(f"{ROOT_ONLY}the images here are made by root's tools")
    if kind == "docker":
        need_docker()
        return "docker", {}
    need_image_tool()
    return "local", {"image_cache": str(request.getfixturevalue("image_cache"))}


async def run_redteam(
    tasks: Path, kind: str, level: str, request: pytest.FixtureRequest, **options: Any
) -> dict[str, Any]:
    """Every red-team task once with the oracle at ``level`` on ``kind``: rollouts by name."""
    # deferred: the Harbor plugin is installed beside agentkit for these tests
    from agentkit_harbor import HarborTaskset, OracleHarness

    sandbox, sandbox_options = sandbox_for(kind, request)
    env = AgentEnv(HarborTaskset(str(tasks), verifier_isolation=level), OracleHarness())
    results = await env.evaluate(
        sandbox=sandbox,
        sandbox_options=sandbox_options,
        concurrency=6 if kind == "docker" else 8,
        preflight=False,
        **options,
    )
    return {r.task_id.split(":", 1)[1]: r for r in results.rollouts}


def verdict(rec: Any) -> str:
    """What a rollout came to: ``forged``/``pass`` (1.0), ``noted``, ``stopped``, or why not."""
    if rec.reward is None:
        return f"unscored ({rec.error_kind}: {rec.error or rec.scoring_errors})"
    honest = rec.task_id.split(":", 1)[1].startswith("honest-")
    if rec.reward > 0:
        return "pass" if honest else "forged"
    notes = (rec.raw.get("harbor", {}).get("verifier") or {}).get("notes") or []
    if honest and any("the verifier was not given" in n for n in notes):
        return "noted"
    return "stopped"


def check(rollouts: dict[str, Any], kind: str, level: str) -> list[str]:
    """Every way the outcomes differ from the table (empty: as expected)."""
    wrong = []
    assert set(rollouts) <= set(EXPECTED), sorted(set(rollouts) - set(EXPECTED))
    for attack, rec in sorted(rollouts.items()):
        want, got = expected(kind, attack, level), verdict(rec)
        if got != want:
            seen = rec.raw.get("harbor", {}).get("verifier") or {}
            detail = {k: seen.get(k) for k in ("stdout", "notes", "error") if seen.get(k)}
            wrong.append(f"{attack}: expected {want}, got {got} (reward {rec.reward}) {detail}")
            continue
        named = KINDS_NAMED.get(attack, {}).get(level)
        if attack in (*CANNOT_PLANT.get(kind, ()), *GRADED_ON_ITS_FILES.get(kind, ())):
            named = None  # an honest 0: nothing broke the grader
        # the grading failure's kind: the rollout's error_kind, unless its harness named one
        kinds = {rec.error_kind, *(e.get("kind") for e in rec.scoring_errors)}
        if named is not None and named not in kinds:
            wrong.append(f"{attack}: expected the kind {named}, got {kinds}")
        if attack in GRADED_ON_ITS_FILES.get(kind, ()) and rec.scoring_errors:
            wrong.append(f"{attack}: expected it graded on its files, got {rec.scoring_errors}")
    return wrong


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("kind", KINDS)
async def test_what_each_level_stops(
    redteam: Path, kind: str, level: str, request: pytest.FixtureRequest
) -> None:
    rollouts = await run_redteam(redteam, kind, level, request)
    assert set(rollouts) == set(EXPECTED), sorted(set(EXPECTED) ^ set(rollouts))
    wrong = check(rollouts, kind, level)
    assert not wrong, f"{kind}, {level}:\n" + "\n".join(wrong)
    if level == DEFAULT_LEVEL:
        # with the default level no attack gets above what an honest failure gets
        yardstick = rollouts["honest-failure"].reward
        for attack, rec in rollouts.items():
            if not attack.startswith("honest-"):
                assert rec.reward is not None and rec.reward <= yardstick, attack
        notes = rollouts["honest-tool-undeclared"].raw["harbor"]["verifier"]["notes"]
        assert any("frob" in n for n in notes), notes


def test_the_default_level_is_the_one_no_attack_gets_past() -> None:
    # deferred: the Harbor plugin is installed beside agentkit for these tests
    from agentkit_harbor import DEFAULT_ISOLATION, HarborTaskset

    assert DEFAULT_ISOLATION == DEFAULT_LEVEL
    assert all(EXPECTED[a][DEFAULT_LEVEL] in (S, P, N) for a in EXPECTED)
    # a taskset given no -T verifier_isolation grades its tasks there
    levels = {t.metadata["harbor"]["verifier_isolation"] for t in HarborTaskset(str(REDTEAM))}
    assert levels == {DEFAULT_LEVEL}


#: The attacks a rollout under the Ray executor tries (its sandbox is on a worker node).
RAY_ATTACKS = (
    "writer-setsid",
    "writer-double-fork",
    "rewrite-tests",
    "plant-reward-json",
    "honest-service",
    "honest-failure",
)


@pytest.mark.slow
async def test_the_ray_executors_sandboxes_are_graded_the_same(
    redteam: Path, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """Under the Ray executor the sandbox and its grading run in a worker process on a
    node of the cluster (one node, its own, for this test): its processes end there too
    (``shared``), and the default level stops every attack there as it does here."""
    pytest.importorskip("ray", reason="Ray is not installed (pip install 'agentkit[ray]')")
    import ray
    from ray.cluster_utils import Cluster

    # deferred: Ray's executor loads only with Ray
    from agentkit.executors import RayExecutor

    tasks = tmp_path / "ray-redteam"
    tasks.mkdir()
    for attack in RAY_ATTACKS:
        shutil.copytree(redteam / attack, tasks / attack)
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0})
    wrong: list[str] = []
    try:
        cluster.add_node(num_cpus=2, labels={"agentkit/bwrap": "true"})
        for level in ("shared", DEFAULT_LEVEL):
            executor = RayExecutor(address=cluster.address, node_dir=tmp_path / "nodes")
            rollouts = await run_redteam(tasks, "local-host", level, request, executor=executor)
            assert all(r.worker is not None for r in rollouts.values())  # ran on the node
            wrong += [f"{level}: {w}" for w in check(rollouts, "local-host", level)]
    finally:
        ray.shutdown()
        cluster.shutdown()
    assert not wrong, "\n".join(wrong)
