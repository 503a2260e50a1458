"""Attack cases on the Harbor plugin: hostile task files and a hostile agent or verifier.

* task files that are symlinks out of the task directory (``instruction.md ->
  /etc/shadow``) are refused at load time, naming the file, and are never
  followed when files are copied into a sandbox;
* files read back from a sandbox are capped: a sparse 2 GiB reward.json is a
  grading error that costs no memory, a sparse artifact costs no host disk,
  a large one is kept truncated with a note, and special files never hang.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import agentkit_harbor._verify as harbor_verify
import pytest
from agentkit_harbor import (
    AddTestsDirError,
    HarborGradingError,
    HarborTaskError,
    HarborTaskset,
    OracleHarness,
    RewardFileNotRegularError,
    RewardFileTooLargeError,
    VerifierDirReplacedError,
    harbor_reward,
    spec_for_task,
)
from harbor_helpers import needs_bwrap, task_sandbox, write_task

from agentkit import ExecResult, GradedAsFailure, GradingUnavailable, RunContext, Sandbox

BASE = '[environment]\nworkdir = "/app"\nnetwork_mode = "no-network"\n'
SECRET = "TOPSECRET-host-file-content"
MULTI = BASE + '[[steps]]\nname = "one"\n'


@pytest.fixture
def host_secret(tmp_path: Path) -> Path:
    """A host file outside every task directory (a stand-in for /etc/shadow)."""
    path = tmp_path / "host" / "shadow"
    path.parent.mkdir()
    path.write_text(SECRET + "\n")
    return path


def _link(task: Path, rel: str, target: Path, *, relative: bool = False) -> None:
    link = task / rel
    link.parent.mkdir(parents=True, exist_ok=True)
    if link.exists() or link.is_symlink():
        link.unlink()
    link.symlink_to(os.path.relpath(target, link.parent) if relative else target)


@pytest.mark.parametrize(
    ("rel", "multi", "relative"),
    [
        ("instruction.md", False, False),
        ("task.toml", False, True),
        ("tests/helper.sh", False, False),
        ("tests/test.sh", False, True),
        ("solution/solve.sh", False, False),
        ("environment/data.txt", False, False),
        ("steps/one/instruction.md", True, False),
        ("steps/one/workdir/seed.txt", True, True),
        ("steps/one/solution/solve.sh", True, False),
    ],
)
def test_a_task_file_linking_out_of_the_task_is_refused_at_load(
    tmp_path: Path, host_secret: Path, rel: str, multi: bool, relative: bool
) -> None:
    files = {"steps/one/instruction.md": "Step.\n"} if multi else {}
    task = write_task(tmp_path / "tasks", "evil", MULTI if multi else BASE, files)
    _link(task, rel, host_secret, relative=relative)
    with pytest.raises(HarborTaskError) as info:
        HarborTaskset(str(task))
    message = str(info.value)
    assert str(task / rel) in message and "resolves outside the task directory" in message
    assert SECRET not in message


def test_a_directory_link_out_of_the_task_is_refused(tmp_path: Path, host_secret: Path) -> None:
    task = write_task(tmp_path / "tasks", "evil", BASE)
    (task / "tests" / "lib").symlink_to(host_secret.parent, target_is_directory=True)
    with pytest.raises(HarborTaskError, match=r"tests/lib: is a symlink that resolves outside"):
        HarborTaskset(str(task))


def test_every_evil_task_is_listed_and_good_ones_still_load(
    tmp_path: Path, host_secret: Path
) -> None:
    write_task(tmp_path / "tasks", "good", BASE)
    for name in ("evil-a", "evil-b"):
        _link(write_task(tmp_path / "tasks", name, BASE), "instruction.md", host_secret)
    ts = HarborTaskset(str(tmp_path / "tasks"))
    assert [t.task_id for t in ts] == ["tasks:good"]
    assert sorted(Path(p.source).parent.name for p in ts.problems) == ["evil-a", "evil-b"]
    assert all(SECRET not in t.input for t in ts)  # type: ignore[operator]


@needs_bwrap
@pytest.mark.anyio
async def test_links_inside_the_task_are_copied_as_their_files(tmp_path: Path) -> None:
    task = write_task(
        tmp_path / "tasks",
        "linked",
        BASE,
        {"shared/solve.sh": "echo done > /app/out.txt\n"},
        test_sh='[ "$(cat /app/out.txt)" = done ] && echo 1 > /logs/verifier/reward.txt\n',
    )
    _link(task, "solution/solve.sh", task / "shared" / "solve.sh", relative=True)
    ts = HarborTaskset(str(task))
    (one,) = list(ts)
    async with task_sandbox(ts, one, tmp_path / "rollout") as sb:
        result = await OracleHarness().run(one, RunContext(sandbox=sb, rollout_id="r"))
        assert result.status == "completed", result.error
        assert await harbor_reward(sb, one, result) == {"reward": 1.0}


@needs_bwrap
@pytest.mark.anyio
async def test_uploads_never_follow_a_link_out_even_if_added_after_loading(
    tmp_path: Path, host_secret: Path
) -> None:
    task = write_task(tmp_path / "tasks", "t", BASE)
    ts = HarborTaskset(str(task))
    (one,) = list(ts)
    spec_for_task(one)  # loaded and checked, as a harness does before grading
    _link(task, "tests/leak.txt", host_secret)  # swapped in after the load-time check
    async with task_sandbox(ts, one, tmp_path / "rollout") as sb:
        with pytest.raises(AddTestsDirError) as info:
            await harbor_reward(sb, one)
        assert "leak.txt" in str(info.value) and "outside the task directory" in str(info.value)
        found = await sb.exec(["bash", "-c", f"grep -rl {SECRET} /tests /logs; true"])
        assert found.stdout.strip() == ""


# ---------------------------------------------------------------------------
# Reading back from the sandbox


def _disk_bytes(root: Path) -> int:
    return sum(p.lstat().st_blocks * 512 for p in root.rglob("*"))


def _peak_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


async def _grade(tmp_path: Path, task_dir: Path, harness: Any = None) -> tuple[Any, Any, Path]:
    ts = HarborTaskset(str(task_dir))
    (task,) = list(ts)
    root = tmp_path / "rollout"
    async with task_sandbox(ts, task, root) as sb:
        result = None
        if harness is not None:
            result = await harness.run(task, RunContext(sandbox=sb, rollout_id="r"))
        try:
            outcome: Any = await harbor_reward(sb, task, result)
        except HarborGradingError as exc:
            outcome = exc
    return result, outcome, root


@needs_bwrap
@pytest.mark.anyio
@pytest.mark.parametrize("target", ["/app/fake", "../app/fake"], ids=["absolute", "relative"])
@pytest.mark.parametrize("level", ["shared", "fork", "separate"])
async def test_a_verifier_folder_replaced_by_a_link_is_never_read_through(
    tmp_path: Path, level: str, target: str
) -> None:
    # a program the verifier ran (a planted one, under shared or fork) swaps the
    # folder for a link to one holding a passing reward: nothing is read through it
    # (a relative link names the same folder from the host too)
    task = write_task(
        tmp_path / "tasks",
        "t",
        BASE,
        test_sh="mkdir -p /app/fake && echo 1 > /app/fake/reward.txt && "
        f"rm -rf /logs/verifier && ln -s {target} /logs/verifier\n",
    )
    ts = HarborTaskset(str(task), verifier_isolation=level)  # type: ignore[arg-type]
    (one,) = list(ts)
    async with task_sandbox(ts, one, tmp_path / "rollout") as sb:
        with pytest.raises(VerifierDirReplacedError, match="no longer a directory") as info:
            await harbor_reward(sb, one, None)
    assert isinstance(info.value, GradedAsFailure) and info.value.kind == "verifier_dir_replaced"


@needs_bwrap
@pytest.mark.anyio
async def test_a_verifier_sandbox_that_cannot_start_is_no_failure_of_the_agent(
    tmp_path: Path,
) -> None:
    # the task's environment/ (it has no Dockerfile) is copied into every sandbox of
    # the task; gone from the host once the agent's sandbox started, a separate
    # verifier's sandbox cannot start: the rollout could not run (it is retried), and
    # it is not scored as the agent's failure
    task = write_task(tmp_path / "tasks", "t", BASE, {"environment/data.txt": "x\n"})
    ts = HarborTaskset(str(task), verifier_isolation="separate")
    (one,) = list(ts)
    async with task_sandbox(ts, one, tmp_path / "rollout") as sb:
        shutil.rmtree(task / "environment")
        with pytest.raises(GradingUnavailable, match="could not be made") as info:
            await harbor_reward(sb, one, None)
    assert info.value.kind == "sandbox_start"
    assert not isinstance(info.value, GradedAsFailure)


class PluginSandbox:
    """A plugin's sandbox: commands and files, none of the capabilities grading asks of a
    sandbox from outside (``end_processes``, ``reset_dir``, ``open_dir``...); a real local
    sandbox does the work behind it."""

    name = "plugin"

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.workdir: str = inner.workdir

    async def exec(
        self,
        cmd: str | list[str],
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        timeout: float | None = None,
        user: str | None = None,
    ) -> ExecResult:
        result: ExecResult = await self._inner.exec(cmd, cwd, env, timeout, user)
        return result

    async def start(self, cmd: list[str], **kw: Any) -> Any:
        return await self._inner.start(cmd, **kw)

    async def upload(self, src: str | Path, dst: str) -> None:
        await self._inner.upload(src, dst)

    async def download(self, src: str, dst: str | Path) -> None:
        await self._inner.download(src, dst)

    async def close(self, *, remove: bool | None = None) -> None:
        await self._inner.close(remove=remove)

    async def __aenter__(self) -> PluginSandbox:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


@needs_bwrap
@pytest.mark.anyio
async def test_a_sandbox_that_cannot_give_a_clean_state_is_graded_in_place_or_refused(
    tmp_path: Path,
) -> None:
    # shared: graded in place as before, and the rollout says it was unprotected;
    # fork and separate: refused with one error naming the sandbox and what to choose
    task = write_task(tmp_path / "tasks", "t", BASE)
    for level in ("shared", "fork", "separate"):
        ts = HarborTaskset(str(task), verifier_isolation=level)  # type: ignore[arg-type]
        (one,) = list(ts)
        async with task_sandbox(ts, one, tmp_path / f"rollout-{level}") as sb:
            plugin = PluginSandbox(sb)
            assert isinstance(plugin, Sandbox)
            result = await OracleHarness().run(one, RunContext(sandbox=plugin))
            if level == "shared":
                assert await harbor_reward(plugin, one, result) == {"reward": 1.0}
                seen = result.raw["harbor"]["verifier"]
                assert seen["isolation"] == "shared"
                assert any("unprotected" in n for n in seen["notes"]), seen
                continue
            with pytest.raises(HarborGradingError, match="-T verifier_isolation=shared") as info:
                await harbor_reward(plugin, one, result)
            assert "'plugin' sandbox cannot isolate the verifier" in str(info.value)
            assert not isinstance(info.value, GradedAsFailure)


@needs_bwrap
@pytest.mark.anyio
async def test_a_sparse_2gib_reward_json_is_a_grading_error_without_gbs_of_memory(
    tmp_path: Path,
) -> None:
    task = write_task(
        tmp_path / "tasks",
        "t",
        BASE,
        test_sh="truncate -s 2G /logs/verifier/reward.json\n",
    )
    before = _peak_rss_bytes()
    _, outcome, root = await _grade(tmp_path, task)
    assert isinstance(outcome, RewardFileTooLargeError), outcome
    assert outcome.kind == "reward_file_too_large" and "byte cap" in str(outcome)
    assert _peak_rss_bytes() - before < 256 * 1024 * 1024
    assert _disk_bytes(root / "harbor") < 1024 * 1024  # never turned into real disk either


@needs_bwrap
@pytest.mark.anyio
@pytest.mark.parametrize(
    "make",
    [
        "mkfifo /logs/verifier/reward.json",
        "ln -s /dev/zero /logs/verifier/reward.json",
        # a link to a file with a passing reward: never followed, whether its target
        # names a path inside (absolute) or one the host would find too (relative)
        "echo '{\"reward\": 1}' > /app/good.json && "
        "ln -s /app/good.json /logs/verifier/reward.json",
        "echo '{\"reward\": 1}' > /app/good.json && "
        "ln -s ../../app/good.json /logs/verifier/reward.json",
    ],
)
async def test_a_reward_json_that_is_no_regular_file_is_an_error_not_a_hang(
    tmp_path: Path, make: str
) -> None:
    task = write_task(tmp_path / "tasks", "t", BASE, test_sh=make + "\n")
    _, outcome, _ = await _grade(tmp_path, task)
    assert isinstance(outcome, RewardFileNotRegularError), outcome
    assert "not a regular file" in str(outcome)
    # the state the agent left made it: scored as a failure, not left out
    assert isinstance(outcome, GradedAsFailure) and outcome.kind == "reward_file_not_regular"


@needs_bwrap
@pytest.mark.anyio
async def test_a_sparse_artifact_is_refused_and_stays_off_the_host_disk(tmp_path: Path) -> None:
    task = write_task(
        tmp_path / "tasks",
        "t",
        BASE,
        {
            "solution/solve.sh": "truncate -s 2G /logs/artifacts/sparse.bin\n"
            "echo small > /logs/artifacts/ok.txt\n"
        },
    )
    _, outcome, root = await _grade(tmp_path, task, OracleHarness())
    assert outcome == {"reward": 1.0}
    art = root / "harbor" / "artifacts"
    assert (art / "logs" / "artifacts" / "ok.txt").read_text() == "small\n"
    assert not (art / "logs" / "artifacts" / "sparse.bin").exists()
    (entry,) = [
        e
        for e in json.loads((art / "manifest.json").read_text())["artifacts"]
        if e["source"] == "/logs/artifacts"
    ]
    assert entry["files"] == 1 and any("refused: sparse" in n for n in entry["notes"])
    assert _disk_bytes(root / "harbor") < 1024 * 1024


@needs_bwrap
@pytest.mark.anyio
async def test_files_over_their_caps_are_truncated_or_refused_with_notes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(harbor_verify, "ARTIFACT_FILE_MAX_BYTES", 2000)
    monkeypatch.setattr(harbor_verify, "ARTIFACTS_TOTAL_MAX_BYTES", 4000)
    monkeypatch.setattr(harbor_verify, "VERIFIER_FILE_MAX_BYTES", 100)
    task = write_task(
        tmp_path / "tasks",
        "t",
        BASE,
        {
            "solution/solve.sh": "head -c 5000 /dev/urandom > /logs/artifacts/a.bin\n"
            "head -c 1500 /dev/urandom > /logs/artifacts/b.bin\n"
            "head -c 1500 /dev/urandom > /logs/artifacts/c.bin\n"
        },
        test_sh="yes verbose | head -c 5000 > /logs/verifier/log.txt\n"
        "echo 1 > /logs/verifier/reward.txt\n",
    )
    result, outcome, root = await _grade(tmp_path, task, OracleHarness())
    assert outcome == {"reward": 1.0}
    art = root / "harbor" / "artifacts" / "logs" / "artifacts"
    assert (art / "a.bin").stat().st_size == 2000  # truncated to the per-file cap
    assert (art / "b.bin").stat().st_size == 1500
    assert not (art / "c.bin").exists()  # over the total cap
    manifest = json.loads((root / "harbor" / "artifacts" / "manifest.json").read_text())
    notes = "\n".join(manifest["artifacts"][0]["notes"])
    assert "a.bin (5000 bytes): truncated to the first 2000 bytes" in notes
    assert "c.bin (1500 bytes): refused: over the total cap of 4000 bytes" in notes
    log = root / "harbor" / "verifier" / "log.txt"
    assert log.read_text() == "verbose\n" * 12 + "verb"
    verifier_notes = result.raw["harbor"]["verifier"]["notes"]
    assert any("log.txt (5000 bytes): truncated" in n for n in verifier_notes)
