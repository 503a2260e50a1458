"""The run directory: manifest.json, rollouts.jsonl, groups.jsonl, events/, calls/, summary.json.

Durability: each finished rollout is one line appended to ``rollouts.jsonl``
with a single ``write`` and made durable with ``fsync`` before the rollout
counts as finished (before it is reported, counted or used in statistics).
Rollouts that finish while an fsync is in flight wait for the next one, which
covers all of their lines: *group commit*, as databases do. No finished
rollout is ever acknowledged before the disk has it, and a slow disk costs one
fsync per wave of finishing rollouts instead of one per rollout. Its events
and calls files are written just before (the rollout line is the commit point). A process
killed mid-write leaves at most one
half-written last line, which :meth:`RunStore.load_rollouts` detects and
truncates away on resume.

A write that fails (a full disk) stops the run with a :class:`RunDirWriteError`
that says so and how to resume: a half-written line is cut back off, a
half-written events or JSON file removed, and the store refuses every later
write, so what is on disk stays exactly what resume expects.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from pathlib import Path
from typing import Any

import anyio

from agentkit import _redact
from agentkit._lockfile import try_lock
from agentkit.rundir._json import dumps, to_utf8, write_atomic, write_json_atomic
from agentkit.rundir._layout import (
    ARTIFACTS_DIR,
    CALLS_DIR,
    EVENTS_DIR,
    GROUPS,
    LIVE_DIR,
    LOCK,
    MANIFEST,
    ROLLOUTS,
    SANDBOX_DIR,
    SUMMARY,
    TASKS,
    RunDirError,
)
from agentkit.rundir._lines import load_groups, load_rollouts
from agentkit.rundir._manifest import read_manifest
from agentkit.rundir._records import RolloutRecord

__all__ = ["RunDirWriteError", "RunStore"]


class RunDirWriteError(RunDirError):
    """Writing the run directory failed (a full disk, say); what was written is resumable.

    ``failure`` says what failed (``<path>: cannot write: <reason>``), the message adds
    how a run continues (a rollout service says its own); ``run_dir``, ``path``,
    ``reason`` and ``errno`` are its parts. It pickles whole (a rollout service on Ray
    hands it to a trainer in another process)."""

    def __init__(self, run_dir: Path, path: Path, exc: OSError) -> None:
        self.run_dir = run_dir
        self.path = path
        self.reason = exc.strerror or str(exc)
        self.errno = exc.errno
        self.failure = f"{path}: cannot write: {self.reason}"
        super().__init__(
            f"{self.failure}. The run stopped; every rollout finished before is saved. "
            f"Free some space, then continue with: agentkit run --resume {run_dir}"
        )

    def __reduce__(self) -> tuple[Any, ...]:
        oserror = OSError(self.errno, self.reason)
        return (type(self), (self.run_dir, self.path, oserror))


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def clear_live_dir(run_dir: Path) -> None:
    """Remove what a killed run left in ``live/`` (call with the run's lock held)."""
    shutil.rmtree(run_dir / LIVE_DIR, ignore_errors=True)


class RunStore:
    """Reads and writes one run directory; redacts the run's secrets everywhere.

    ``redactor`` decides what is secret (see :mod:`agentkit._redact`); without
    one, ``secret`` (an API key) is the only one.
    """

    def __init__(
        self,
        run_dir: Path,
        *,
        secret: str | None = None,
        redactor: _redact.Redactor | None = None,
    ) -> None:
        self.run_dir = Path(run_dir)
        # a key shorter than MIN_SECRET_LENGTH is a placeholder for a local
        # server ("EMPTY", "x"), not a credential: replacing it would rewrite
        # ordinary words and field names in every file of the run
        self.redactor = redactor if redactor is not None else _redact.Redactor([secret])
        self._rollouts_fd: int | None = None
        self._groups_fd: int | None = None
        self._lock_fd: int | None = None
        self._dirs_made: set[str] = set()  # EVENTS_DIR, CALLS_DIR once made
        #: The manifest's run_id once written (write_manifest): stamped on every call.
        self.run_id: str | None = None
        # group commit: lines written / lines known durable / an fsync in flight
        self._written = 0
        self._durable = 0
        self._syncing = False
        self._synced_event: anyio.Event | None = None
        # the first failed write: every later write raises it again
        self._broken: RunDirWriteError | None = None

    # -- paths -------------------------------------------------------------
    @property
    def manifest_path(self) -> Path:
        return self.run_dir / MANIFEST

    @property
    def rollouts_path(self) -> Path:
        return self.run_dir / ROLLOUTS

    @property
    def groups_path(self) -> Path:
        return self.run_dir / GROUPS

    @property
    def summary_path(self) -> Path:
        return self.run_dir / SUMMARY

    def sandbox_root(self, rollout_id: str) -> Path:
        """Where one rollout's sandbox keeps its files."""
        return self.run_dir / SANDBOX_DIR / rollout_id

    def artifacts_dir(self, rollout_id: str) -> Path:
        """Where one rollout's kept files go (artifacts, verifier logs); never removed."""
        return self.run_dir / ARTIFACTS_DIR / rollout_id

    # -- lifecycle ---------------------------------------------------------
    def open(self) -> None:
        """Create the directory, take its lock and open the append-only files."""
        try:
            self.run_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise RunDirError(
                f"cannot create the run directory {self.run_dir}: {exc.strerror or exc}"
            ) from None
        try:
            self._lock()
        except OSError as exc:
            raise RunDirError(f"cannot write in the run directory {self.run_dir}: {exc}") from None
        clear_live_dir(self.run_dir)  # what a killed session left (we hold the lock now)
        flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | getattr(os, "O_CLOEXEC", 0)
        try:
            self._rollouts_fd = os.open(self.rollouts_path, flags, 0o644)
            self._groups_fd = os.open(self.groups_path, flags, 0o644)
        except OSError as exc:
            self.close()
            raise RunDirError(f"cannot write in the run directory {self.run_dir}: {exc}") from None

    def _lock(self) -> None:
        fd = try_lock(self.run_dir / LOCK)
        if fd is None:
            raise RunDirError(f"{self.run_dir}: another agentkit run is using this run directory")
        self._lock_fd = fd

    def close(self) -> None:
        """Sync and close the files, and release the lock (always, even if the sync fails)."""
        already_failed = self._broken is not None
        failure: RunDirWriteError | None = None
        if self._groups_fd is not None:
            try:
                os.fsync(self._groups_fd)
            except OSError as exc:
                failure = self._failed(self.groups_path, exc)
        if self._lock_fd is not None:
            # live/ empties as rollouts finish; drop it when it has
            with contextlib.suppress(OSError):
                (self.run_dir / LIVE_DIR).rmdir()
        for name in ("_rollouts_fd", "_groups_fd", "_lock_fd"):
            fd = getattr(self, name)
            if fd is not None:
                with contextlib.suppress(OSError):
                    os.close(fd)
                setattr(self, name, None)
        if failure is not None and not already_failed:
            raise failure

    def _failed(self, path: Path, exc: OSError) -> RunDirWriteError:
        """Remember the first failed write (later writes raise it again) and return it."""
        if self._broken is None:
            self._broken = RunDirWriteError(self.run_dir, path, exc)
        return self._broken

    def _check_writable(self) -> None:
        if self._broken is not None:
            raise self._broken

    @property
    def write_failed(self) -> RunDirWriteError | None:
        """The first write that failed in this session (the run stopped there), or None."""
        return self._broken

    # -- writing -----------------------------------------------------------
    def redact(self, text: str) -> str:
        """Replace the run's secrets in free text."""
        return self.redactor.text(text)

    def scrub(self, data: Any) -> Any:
        """A copy of JSON data with the secrets redacted in every string value and key."""
        return self.redactor.json(data)

    def dumps(self, data: Any) -> str:
        """One JSON line of ``data``, redacted (the fast path when no secret occurs)."""
        return self.redactor.dumps(data)

    def scrub_files(self, path: Path) -> int:
        """Redact the secrets from every file under ``path`` (artifacts, sandbox files)."""
        return self.redactor.tree(path)

    def write_manifest(self, manifest: dict[str, Any]) -> None:
        """Write manifest.json (atomically, redacted); its ``run_id`` is then written
        into every calls file line (:meth:`write_calls`)."""
        run_id = manifest.get("run_id")
        self.run_id = run_id if isinstance(run_id, str) else None
        self._write_json(self.manifest_path, manifest)

    def write_tasks(self, planned: Any) -> None:
        """Write tasks.jsonl: every planned task's id, input, target and metadata (atomically)."""
        tasks = [
            {
                "type": "task",
                "task_id": p.task.task_id,
                "example_id": p.example_id,
                "group": p.group,
                "input": p.task.input,
                "target": p.task.target,
                "metadata": p.task.metadata,
                "grading_spec": p.task.grading_spec,
            }
            for p in planned
        ]
        path = self.run_dir / TASKS
        data = to_utf8("".join(self.dumps(t) + "\n" for t in tasks), str(path), tasks)
        self._check_writable()
        try:
            write_atomic(path, data)
        except OSError as exc:
            raise self._failed(path, exc) from None

    def write_summary(self, summary: dict[str, Any]) -> None:
        """Write summary.json (atomically, redacted)."""
        self._write_json(self.summary_path, summary)

    def _write_json(self, path: Path, data: dict[str, Any]) -> None:
        self._check_writable()
        try:
            write_json_atomic(path, self._scrub_json(data))
        except OSError as exc:
            raise self._failed(path, exc) from None

    def _scrub_json(self, data: Any) -> Any:
        if not self.redactor:
            return data
        return self.scrub(json.loads(dumps(data)))

    def append_rollout(self, record: RolloutRecord) -> None:
        """Append one finished rollout and make it durable (write + fsync)."""
        assert self._rollouts_fd is not None, "RunStore.open() first"
        self._append(self._rollouts_fd, self.rollouts_path, self._line(record.to_json()))
        try:
            os.fsync(self._rollouts_fd)
        except OSError as exc:
            raise self._failed(self.rollouts_path, exc) from None

    def _line(self, data: dict[str, Any], path: Path | None = None) -> bytes:
        """One redacted JSON line of ``data`` as UTF-8 (:func:`to_utf8`: a lone surrogate
        is written as U+FFFD, and said), for ``path`` (default: rollouts.jsonl)."""
        where = str(path or self.rollouts_path)
        if path is None and isinstance(data.get("rollout_id"), str):
            where += f" (rollout {data['rollout_id']})"
        return to_utf8(self.dumps(data) + "\n", where, data)

    def _append(self, fd: int, path: Path, data: bytes) -> None:
        """Append ``data`` whole, or not at all: a failed write is cut back off."""
        self._check_writable()
        end = os.lseek(fd, 0, os.SEEK_END)
        try:
            _write_all(fd, data)
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, end)
            raise self._failed(path, exc) from None

    async def commit_rollout(
        self, record: RolloutRecord, group: dict[str, Any] | None = None
    ) -> None:
        """Append a rollout line (and its completed group) and wait until they are durable.

        Concurrent callers share fsyncs (group commit); each returns only after
        an fsync that started after its own write has completed.
        """
        assert self._rollouts_fd is not None and self._groups_fd is not None
        self._append(self._rollouts_fd, self.rollouts_path, self._line(record.to_json()))
        if group is not None:
            # derived data: resume rebuilds a group line that could not be written
            self._append(self._groups_fd, self.groups_path, self._line(group, self.groups_path))
        self._written += 1
        await self._wait_durable(self._written)

    async def _wait_durable(self, seq: int) -> None:
        while self._durable < seq:
            if self._syncing:
                if self._synced_event is None:
                    self._synced_event = anyio.Event()
                await self._synced_event.wait()
                continue
            self._syncing = True
            covered = self._written
            try:
                with anyio.CancelScope(shield=True):
                    await anyio.to_thread.run_sync(self._fsync_files)
                self._durable = max(self._durable, covered)
            finally:
                self._syncing = False
                event, self._synced_event = self._synced_event, None
                if event is not None:
                    event.set()

    def _fsync_files(self) -> None:
        # groups.jsonl is derived data (resume rebuilds missing group lines from
        # rollouts.jsonl), so only the commit record is synced per rollout
        if self._rollouts_fd is not None:
            try:
                os.fsync(self._rollouts_fd)
            except OSError as exc:
                raise self._failed(self.rollouts_path, exc) from None

    def append_group(self, group: dict[str, Any]) -> None:
        """Append one completed group's statistics and advantages (synced on close)."""
        assert self._groups_fd is not None, "RunStore.open() first"
        self._append(self._groups_fd, self.groups_path, self._line(group, self.groups_path))

    def write_events(self, rollout_id: str, events: list[dict[str, Any]]) -> str:
        """Write one rollout's events as JSON lines; returns the path relative to the run.

        A file that cannot be written whole (a full disk) is removed.
        """
        return self._write_lines(EVENTS_DIR, rollout_id, events)

    def write_calls(self, rollout_id: str, calls: list[dict[str, Any]]) -> str:
        """Write one rollout's model calls as JSON lines (redacted), each with the run's
        ``run_id`` (from the manifest written); returns the path relative to the run. A
        file that cannot be written whole is removed."""
        if self.run_id is not None:
            for call in calls:
                call["run_id"] = self.run_id
        return self._write_lines(CALLS_DIR, rollout_id, calls)

    def _write_lines(self, directory: str, rollout_id: str, items: list[dict[str, Any]]) -> str:
        """``directory/<rollout_id>.jsonl``, one redacted JSON line per item, written
        whole or removed; the directory is made on first use."""
        self._check_writable()
        rel = f"{directory}/{rollout_id}.jsonl"
        path = self.run_dir / rel
        data = to_utf8("".join(self.dumps(item) + "\n" for item in items), str(path), items)
        try:
            if directory not in self._dirs_made:
                (self.run_dir / directory).mkdir(exist_ok=True)
                self._dirs_made.add(directory)
            with open(path, "wb") as fh:
                fh.write(data)
        except OSError as exc:
            with contextlib.suppress(OSError):
                path.unlink()
            raise self._failed(path, exc) from None
        return rel

    def write_artifact_chunk(
        self,
        rollout_id: str,
        rel_path: str,
        data: bytes,
        *,
        offset: int,
        mode: int = 0o644,
        is_dir: bool = False,
    ) -> None:
        """Write a piece of a file a rollout kept elsewhere (a worker node) into its
        ``artifacts/<rollout_id>/``; offset 0 starts the file. Paths stay inside it."""
        top = self.artifacts_dir(rollout_id)
        parts = Path(rel_path).parts
        if not parts or Path(rel_path).is_absolute() or ".." in parts:
            raise RunDirError(f"refusing the artifact path {rel_path!r} of {rollout_id}")
        self._check_writable()
        target = top.joinpath(*parts)
        try:
            if is_dir:
                target.mkdir(parents=True, exist_ok=True)
                return
            target.parent.mkdir(parents=True, exist_ok=True)
            if offset == 0 and target.is_symlink():
                target.unlink()
            with open(target, "wb" if offset == 0 else "r+b") as fh:
                fh.seek(offset)
                fh.write(data)
            if offset == 0:
                os.chmod(target, mode & 0o777)
        except OSError as exc:  # a full disk: the run stops with one clear message
            raise self._failed(target, exc) from None

    def clear_artifacts(self, rollout_id: str) -> None:
        """Remove what an earlier attempt of a rollout kept (before a new attempt's files)."""
        top = self.artifacts_dir(rollout_id)
        if top.is_symlink():
            top.unlink()
        elif top.exists():
            shutil.rmtree(top, ignore_errors=True)

    def link_artifacts(self, rollout_id: str, target: str) -> None:
        """Make ``artifacts/<rollout_id>`` a link to where a worker wrote them (a shared path)."""
        link = self.artifacts_dir(rollout_id)
        link.parent.mkdir(parents=True, exist_ok=True)
        if link.is_symlink():
            if os.readlink(link) == target:
                return
            link.unlink()
        elif link.is_dir():
            shutil.rmtree(link, ignore_errors=True)
        try:
            os.symlink(target, link)
        except OSError as exc:
            raise self._failed(link, exc) from None

    def remove_sandbox_dir(self, rollout_id: str) -> None:
        """Delete a rollout's sandbox files (after a successful rollout)."""
        path = self.sandbox_root(rollout_id)
        if path.exists():
            shutil.rmtree(path, ignore_errors=True)

    def remove_empty_sandbox_parent(self) -> None:
        """Drop ``rollouts/`` when no sandbox directory is left in it."""
        try:
            (self.run_dir / SANDBOX_DIR).rmdir()
        except OSError:
            pass

    # -- reading (what resume needs) ----------------------------------------
    def read_manifest(self) -> dict[str, Any]:
        """The stored manifest, or a clear error (:func:`~agentkit.rundir.read_manifest`)."""
        return read_manifest(self.run_dir)

    def load_rollouts(self, *, repair: bool) -> tuple[list[RolloutRecord], str | None]:
        """rollouts.jsonl read whole (:func:`~agentkit.rundir.load_rollouts`); a half-written
        last line is dropped, and cut off if ``repair``."""
        return load_rollouts(self.run_dir, repair=repair)

    def load_group_task_ids(self, *, repair: bool) -> set[str]:
        """Task ids that have a line in groups.jsonl (a torn or corrupt last line is cut)."""
        return set(self.load_groups(repair=repair))

    def load_groups(self, *, repair: bool) -> dict[str, dict[str, Any]]:
        """The last groups.jsonl line of each task (:func:`~agentkit.rundir.load_groups`)."""
        return load_groups(self.run_dir, repair=repair)
