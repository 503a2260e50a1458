"""Harbor's verifier, run in a rollout's sandbox: one step (or a whole single-step task) at a time.

``verify`` places ``tests/`` at ``/tests`` (for a step: the task's
``tests/`` then the step's own on top), runs ``bash /tests/test.sh`` from
the working directory with the verifier's timeout, env and user, then reads
``/logs/verifier/reward.json`` or else ``reward.txt``, as Harbor 0.24's
``Verifier`` does. The oracle, the ``StepwiseHarness`` and the taskset's
rubric all reach it through :class:`agentkit_harbor.HarborTrial`, so a step
is graded the same way whoever drives it.

Everything read back from the sandbox is capped (see
:mod:`agentkit_harbor._sandbox_io`): the reward files at
``REWARD_FILE_MAX_BYTES`` (larger is a grading error), the rest of
``/logs/verifier`` and the artifacts per file and in total (larger files are
kept truncated, sparse ones refused, each with a note).
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import anyio
import attrs

from agentkit import EventRecorder, Sandbox
from agentkit.sandbox import SandboxError, SandboxPathError, open_dir, reset_dir
from agentkit_harbor._config import ArtifactConfig
from agentkit_harbor._envvars import resolve_env
from agentkit_harbor._errors import (
    AddTestsDirError,
    HarborGradingError,
    HarborTaskError,
    VerifierDirReplacedError,
    VerifierTimeoutError,
)
from agentkit_harbor._hostread import copy_dir_out, read_file_at
from agentkit_harbor._isolation import DEFAULT_ISOLATION, check_isolation, place_verifier
from agentkit_harbor._rewards import (
    REWARD_FILES,
    VERIFIER_DIR,
    main_reward,
    read_reward_files,
    rewards_from_copy,
    rewards_from_reads,
)
from agentkit_harbor._sandbox_io import (
    ARTIFACT_FILE_MAX_BYTES,
    ARTIFACTS_TOTAL_MAX_BYTES,
    REWARD_FILE_MAX_BYTES,
    VERIFIER_FILE_MAX_BYTES,
    VERIFIER_TOTAL_MAX_BYTES,
    CappedRead,
    TreeCopy,
    download_tree,
    exec_logged,
    tail,
    upload_tree,
)
from agentkit_harbor._spec import HarborStepSpec, HarborTaskSpec

__all__ = [
    "ARTIFACTS_DIR",
    "STEP_VERIFIER_TIMEOUT_SEC",
    "TESTS_DIR",
    "VerifierOutcome",
    "aggregate_steps",
    "collect_artifacts",
    "min_reward_failure",
    "task_env",
    "verifier_settings",
    "verify",
]

TESTS_DIR = "/tests"
ARTIFACTS_DIR = "/logs/artifacts"

#: A step's verifier timeout when its ``[steps.verifier]`` sets none: Harbor's
#: ``VerifierConfig`` default, which every ``[[steps]]`` entry gets (not the
#: task's top-level ``[verifier].timeout_sec``).
STEP_VERIFIER_TIMEOUT_SEC = 600.0


@attrs.frozen(kw_only=True)
class VerifierOutcome:
    """What one verifier run produced: the rewards and what test.sh printed."""

    rewards: dict[str, float]
    stdout: str
    exit_code: int
    duration_sec: float
    reward_file: str
    notes: list[str] = attrs.field(factory=list)
    #: Where the verifier ran: ``shared``, ``fork`` or ``separate``.
    isolation: str = "shared"

    def to_json(self) -> dict[str, Any]:
        """A JSON record (stdout cut to its tail)."""
        return {
            "rewards": dict(self.rewards),
            "exit_code": self.exit_code,
            "duration_sec": self.duration_sec,
            "reward_file": self.reward_file,
            "isolation": self.isolation,
            "stdout": tail(self.stdout),
            "notes": list(self.notes),
        }


# ---------------------------------------------------------------------------
# Reward files


def min_reward_failure(
    rewards: Mapping[str, float] | None, min_reward: float | Mapping[str, float]
) -> str | None:
    """Why a step misses its ``min_reward`` (Harbor's rule), or None when it passes.

    A number gates on ``reward``; a table gates on each of its keys. A
    missing key (or no result at all) counts as minus infinity.
    """
    thresholds = {"reward": min_reward} if isinstance(min_reward, (int, float)) else min_reward
    for key, threshold in thresholds.items():
        actual = rewards.get(key, float("-inf")) if rewards else float("-inf")
        if actual < threshold:
            return f"{key}={actual:g} is below min_reward {threshold:g}"
    return None


def aggregate_steps(
    per_step: list[dict[str, float] | None], strategy: str
) -> dict[str, float] | None:
    """The task's rewards from its steps' rewards (None where a step has no result).

    ``final``: the last step that ran, verbatim. ``mean``: per-key means over
    the steps that have a result, a missing key counting 0.
    """
    if not per_step:
        return None
    if strategy == "final":
        return per_step[-1]
    valid = [r for r in per_step if r is not None]
    if not valid:
        return None
    keys = sorted({k for r in valid for k in r})
    if not keys:
        return None
    return {k: sum(r.get(k, 0.0) for r in valid) / len(valid) for k in keys}


# ---------------------------------------------------------------------------
# Running test.sh


@attrs.frozen(kw_only=True)
class VerifierSettings:
    """The verifier's effective timeout, env and user for a task or a step."""

    timeout_sec: float
    env: dict[str, str]
    user: str | int | None


def task_env(spec: HarborTaskSpec) -> dict[str, str]:
    """``[environment].env`` resolved against the host (``${VAR:-default}``)."""
    return resolve_env(
        spec.config.environment.env, source=str(spec.config_path), field="environment.env"
    )


def verifier_settings(spec: HarborTaskSpec, step: HarborStepSpec | None) -> VerifierSettings:
    """The step's verifier settings over the task's (Harbor's fallback rules).

    A step's env goes over the task's ``[verifier].env`` and its user falls
    back to the task's; its timeout does not: a step without its own
    ``timeout_sec`` gets :data:`STEP_VERIFIER_TIMEOUT_SEC`, as in Harbor.
    """
    cfg = spec.config
    source = str(spec.config_path)
    env = {**task_env(spec), **resolve_env(cfg.verifier.env, source=source, field="verifier.env")}
    timeout = cfg.verifier_timeout_sec
    user = cfg.verifier.user
    if step is not None:
        sv = step.config.verifier
        env.update(resolve_env(sv.env, source=source, field=f"steps.{step.name}.verifier.env"))
        timeout = STEP_VERIFIER_TIMEOUT_SEC if sv.timeout_sec is None else sv.timeout_sec
        if sv.user is not None:
            user = sv.user
    return VerifierSettings(timeout_sec=timeout, env=env, user=user)


async def reset_verifier_dirs(
    sandbox: Sandbox, *, recorder: EventRecorder | None = None, step: str | None = None
) -> None:
    """Empty ``/tests`` and ``/logs/verifier`` (made when missing), or raise AddTestsDirError."""
    reset = await exec_logged(
        sandbox,
        [
            "bash",
            "-c",
            f"mkdir -p {VERIFIER_DIR} {TESTS_DIR} && "
            f"find {VERIFIER_DIR} {TESTS_DIR} -mindepth 1 -delete",
        ],
        recorder=recorder,
        purpose="verifier.reset",
    )
    if not reset.ok:
        raise AddTestsDirError(
            f"could not prepare {TESTS_DIR} and {VERIFIER_DIR}: {reset.stderr.strip()}",
            step=step,
        )


async def verify(
    sandbox: Sandbox,
    spec: HarborTaskSpec,
    *,
    step: HarborStepSpec | None = None,
    workdir: str | None = None,
    out_dir: Path | None = None,
    recorder: EventRecorder | None = None,
    timeout_scale: float = 1.0,
    require_main: bool = False,
    main_reward_strategy: str = "mean",
    isolation: str = DEFAULT_ISOLATION,
    carry: Sequence[str] | None = None,
    final: bool = False,
) -> VerifierOutcome:
    """Run the verifier once and return its rewards, or raise a :class:`HarborGradingError`.

    ``sandbox`` is the agent's. The verifier runs where ``isolation`` says
    (``shared``, ``fork`` or ``separate``; see :mod:`agentkit_harbor._isolation`),
    a ``separate`` one given the agent's ``carry`` paths (the working
    directory and the task's ``[verifier] carry_paths`` by default), always
    from a clean state: nothing of the agent's running, ``/tests`` and
    ``/logs/verifier`` made new from the host, the reward files read from the
    host without following a link. ``out_dir`` (a host directory) receives a
    copy of /logs/verifier (within its caps) and ``test-stdout.txt``.
    ``require_main`` also checks that a total reward can be derived with
    ``main_reward_strategy`` (see :func:`main_reward`). ``final`` says the
    agent's sandbox is not used afterwards (see
    :func:`~agentkit_harbor.place_verifier`). The verifier's own sandbox not
    starting raises :class:`~agentkit.GradingUnavailable`.
    """
    step_name = step.name if step else None
    try:
        settings = verifier_settings(spec, step)
    except HarborTaskError as exc:  # an unset ${VAR}: this verifier run cannot start
        raise HarborGradingError(str(exc), step=step_name) from None
    level = check_isolation(isolation)
    cwd = workdir or getattr(sandbox, "workdir", None) or spec.workdir
    paths = list(carry) if carry is not None else carried_paths(spec, cwd)
    async with place_verifier(
        sandbox, level, paths, recorder=recorder, step=step_name, final=final
    ) as place:
        outcome = await _verify_in(
            place.sandbox,
            spec,
            step=step,
            settings=settings,
            cwd=cwd,
            out_dir=out_dir,
            recorder=recorder,
            timeout=settings.timeout_sec * timeout_scale,
            protected=place.protected,
            require_main=require_main,
            main_reward_strategy=main_reward_strategy,
        )
    return attrs.evolve(outcome, isolation=place.level, notes=[*place.notes, *outcome.notes])


def carried_paths(spec: HarborTaskSpec, workdir: str) -> list[str]:
    """What a ``separate`` verifier is given of the agent's files: the working directory
    and the task's ``[verifier] carry_paths``."""
    return [workdir, *spec.config.verifier.carry_paths]


async def _verify_in(
    sandbox: Sandbox,
    spec: HarborTaskSpec,
    *,
    step: HarborStepSpec | None,
    settings: VerifierSettings,
    cwd: str,
    out_dir: Path | None,
    recorder: EventRecorder | None,
    timeout: float,
    protected: bool,
    require_main: bool,
    main_reward_strategy: str,
) -> VerifierOutcome:
    """Fresh folders, the tests, test.sh, the rewards: in the verifier's own sandbox."""
    step_name = step.name if step else None
    if protected:
        try:
            await reset_dir(sandbox, VERIFIER_DIR, mode=0o777)
            await reset_dir(sandbox, TESTS_DIR, mode=0o755)
        except (SandboxError, OSError) as exc:
            raise AddTestsDirError(
                f"could not make {TESTS_DIR} and {VERIFIER_DIR} new: {exc}", step=step_name
            ) from None
    else:
        await reset_verifier_dirs(sandbox, recorder=recorder, step=step_name)
    sources = [spec.tests_dir] if spec.tests_dir.is_dir() else []
    if step is not None and step.tests_dir.is_dir():
        sources.append(step.tests_dir)
    try:
        for src in sources:
            await upload_tree(sandbox, src, TESTS_DIR, root=spec.task_dir)
    except Exception as exc:
        raise AddTestsDirError(
            f"could not upload tests/ to {TESTS_DIR}: {type(exc).__name__}: {exc}", step=step_name
        ) from exc
    start = time.monotonic()
    result = await exec_logged(
        sandbox,
        ["bash", f"{TESTS_DIR}/test.sh"],
        recorder=recorder,
        purpose="verifier.test",
        cwd=cwd,
        env=settings.env,
        timeout=timeout,
        user=settings.user,
    )
    duration = round(time.monotonic() - start, 3)
    stdout = result.stdout + (("\n[stderr]\n" + result.stderr) if result.stderr.strip() else "")
    with tempfile.TemporaryDirectory(prefix="harbor-verifier-") as tmp:
        logs_dir = out_dir if out_dir is not None else Path(tmp)
        logs_dir.mkdir(parents=True, exist_ok=True)
        (logs_dir / "test-stdout.txt").write_text(
            tail(stdout, VERIFIER_FILE_MAX_BYTES), encoding="utf-8"
        )
        answers: Mapping[str, CappedRead | str | None] | None = None
        copied: TreeCopy | None
        if protected:
            copied, answers = await anyio.to_thread.run_sync(
                _read_verifier_dir, sandbox, logs_dir, stdout, step_name
            )
        else:
            copied = await _read_in_sandbox(sandbox, logs_dir, stdout, step_name)
        if result.timed_out:
            raise VerifierTimeoutError(
                f"tests/test.sh ran past the verifier timeout of {timeout:g} s"
                + _stdout_suffix(stdout),
                stdout=stdout,
                step=step_name,
            )
        try:
            if answers is not None:
                rewards, which, notes = rewards_from_reads(answers)
            else:
                found = rewards_from_copy(logs_dir, copied)
                rewards, which, notes = found or await read_reward_files(sandbox)
            if require_main:
                main_reward(rewards, main_reward_strategy)
        except HarborGradingError as exc:
            raise type(exc)(
                f"{exc} (test.sh exit code {result.exit_code})" + _stdout_suffix(stdout),
                stdout=stdout,
                step=step_name,
            ) from None
    if copied is not None:
        notes += [f"{VERIFIER_DIR} copy: {n}" for n in copied.notes]
    return VerifierOutcome(
        rewards=rewards,
        stdout=stdout,
        exit_code=result.exit_code,
        duration_sec=duration,
        reward_file=which,
        notes=notes,
    )


def _read_verifier_dir(
    sandbox: Sandbox, logs_dir: Path, stdout: str, step: str | None
) -> tuple[TreeCopy, dict[str, CappedRead | str | None]]:
    """Copy /logs/verifier to ``logs_dir`` and read its reward files, from the host.

    The folder is opened without following a link: one test.sh (or a program
    it ran) replaced by a link or a file is a :class:`VerifierDirReplacedError`.
    Returns the copy and what was read of each reward file (see
    :func:`rewards_from_reads`).
    """
    try:
        fd = open_dir(sandbox, VERIFIER_DIR)
    except (SandboxPathError, FileNotFoundError) as exc:
        raise VerifierDirReplacedError(
            f"{VERIFIER_DIR} is no longer a directory after test.sh ran ({exc}); nothing "
            "is read through it" + _stdout_suffix(stdout),
            stdout=stdout,
            step=step,
        ) from None
    try:
        copied = copy_dir_out(
            fd,
            logs_dir,
            max_file_bytes=VERIFIER_FILE_MAX_BYTES,
            max_total_bytes=VERIFIER_TOTAL_MAX_BYTES,
        )
        answers = {name: read_file_at(fd, name, REWARD_FILE_MAX_BYTES) for name in REWARD_FILES}
    finally:
        os.close(fd)
    return copied, answers


async def _read_in_sandbox(
    sandbox: Sandbox, logs_dir: Path, stdout: str, step: str | None
) -> TreeCopy | None:
    """A sandbox kind that cannot be read from the host: copy /logs/verifier with the
    sandbox's own commands (unprotected; see :func:`download_tree`)."""
    try:
        copied = await download_tree(
            sandbox,
            VERIFIER_DIR,
            logs_dir,
            max_file_bytes=VERIFIER_FILE_MAX_BYTES,
            max_total_bytes=VERIFIER_TOTAL_MAX_BYTES,
        )
    except Exception as exc:
        raise HarborGradingError(
            f"could not read {VERIFIER_DIR} from the sandbox: {type(exc).__name__}: {exc}",
            stdout=stdout,
            step=step,
        ) from exc
    return copied


def _stdout_suffix(stdout: str) -> str:
    text = stdout.strip()
    if not text:
        return "; test.sh printed nothing"
    return "; test.sh output (tail):\n" + tail(text, 1500)


# ---------------------------------------------------------------------------
# Artifacts


async def collect_artifacts(
    sandbox: Sandbox,
    artifacts: list[ArtifactConfig],
    out_dir: Path,
    *,
    recorder: EventRecorder | None = None,
) -> dict[str, Any]:
    """Copy /logs/artifacts and every declared artifact into ``out_dir``, within caps.

    A source lands at ``out_dir/<its absolute path>`` unless it names a
    ``destination`` (relative to ``out_dir``), as in Harbor's layout. Missing
    sources are recorded in the returned manifest, never an error. Each file
    is copied up to ``ARTIFACT_FILE_MAX_BYTES`` (kept truncated past it),
    all of them up to ``ARTIFACTS_TOTAL_MAX_BYTES``; sparse files are
    refused. An entry's ``notes`` in ``manifest.json`` list every such file.
    """
    manifest: list[dict[str, Any]] = []
    entries = [ArtifactConfig(source=ARTIFACTS_DIR), *artifacts]
    out_dir.mkdir(parents=True, exist_ok=True)
    budget = TreeCopy()
    for art in entries:
        rel = art.destination or art.source.lstrip("/")
        target = (out_dir / rel).resolve()
        record: dict[str, Any] = {"source": art.source, "destination": rel}
        if not target.is_relative_to(out_dir.resolve()):
            record["status"] = "refused: destination escapes the artifacts directory"
        elif art.service not in (None, "main"):
            record["status"] = f"skipped: service {art.service!r} (no compose services locally)"
        else:
            try:
                copied = await download_tree(
                    sandbox,
                    art.source,
                    target,
                    exclude=art.exclude,
                    max_file_bytes=ARTIFACT_FILE_MAX_BYTES,
                    max_total_bytes=ARTIFACTS_TOTAL_MAX_BYTES,
                    budget=budget,
                )
            except Exception as exc:
                record["status"] = f"failed: {type(exc).__name__}: {exc}"
            else:
                record["status"] = "missing" if copied is None else "ok"
                record["files"] = copied.files if copied else 0
                if copied is not None:
                    record["bytes"] = copied.bytes
                    if copied.skipped:
                        record["notes"] = copied.notes
        manifest.append(record)
    data = {"artifacts": manifest}
    (out_dir / "manifest.json").write_text(json.dumps(data, indent=2), encoding="utf-8")
    if recorder is not None:
        await recorder.emit("harbor.artifacts", directory=str(out_dir), entries=manifest)
    return data
