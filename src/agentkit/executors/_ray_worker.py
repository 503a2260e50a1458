"""The worker side of the Ray executor: one attempt per Ray task, its events streamed back.

Each attempt is a Ray *streaming generator* task (:func:`run_attempt`): it
runs :meth:`RolloutWork.attempt` on an event loop the worker process keeps
for its life, yields the harness's events in batches as they come
(:class:`EventBatch`), then the files the rollout kept (:class:`FileChunk`,
1 MiB at a time, unless they went to a shared directory), then the
:class:`~agentkit._executor.Attempt`. The run's :class:`Shipment` (the
harness, rubric, context, sandbox kind) is put in Ray's object store once
per run and unpickled once per worker process.

On the node, a run keeps its files under ``<node_dir>/<run_key>/``:
``rollouts/<rollout_id>`` (sandbox directories: removed after a successful
rollout, kept after a failed one or with ``--keep-sandboxes``),
``artifacts/<rollout_id>`` (removed once sent to the driver) and
``images/`` (build logs of the tasks' images made on this node); processes
of a node take turns preparing a task under ``<node_dir>/locks/``.

This module is imported by Ray on worker nodes; it imports Ray only inside
functions.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import hashlib
import os
import queue
import shutil
import stat
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs

from agentkit._context import SECRET_HEADER_WORDS
from agentkit._events import Event
from agentkit._executor import Attempt, AttemptWork, ExecutorError, Job, PlannedTask
from agentkit._redact import Redactor
from agentkit._result import HarnessResult
from agentkit._version import __version__

if TYPE_CHECKING:
    from anyio.from_thread import BlockingPortal

__all__ = [
    "CHUNK_BYTES",
    "EventBatch",
    "FileChunk",
    "NodeDirError",
    "Shipment",
    "default_node_dir",
    "private_node_dir",
    "run_attempt",
    "run_check",
]

#: Size of the pieces a rollout's kept files travel back to the driver in.
CHUNK_BYTES = 1 << 20
#: Runs whose shipment a worker process keeps unpickled (a session may run several).
_KEEP_RUNS = 4


def default_node_dir() -> str:
    """Where runs keep their files on a node by default: ``<temp dir>/agentkit-ray-<uid>``,
    this user's own (:func:`private_node_dir` makes and checks it)."""
    return os.path.join(tempfile.gettempdir(), f"agentkit-ray-{os.getuid()}")


class NodeDirError(ExecutorError):
    """The default node directory is not this user's private directory."""


def private_node_dir(path: str) -> Path:
    """``path`` (the default node directory), made mode 0700 if it is missing; a
    :class:`NodeDirError` when it is there and not this user's private directory.

    The temp directory is shared by the machine's users: another could make the
    directory first (or a link there) to read what a run keeps on the node (sandbox
    directories, build logs) or plant files a run uses. One this user made cannot
    be replaced by another (the temp directory is sticky), so it is checked once.
    """
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    info = os.lstat(path)
    problem = None
    if stat.S_ISLNK(info.st_mode):
        problem = "is a symbolic link"
    elif not stat.S_ISDIR(info.st_mode):
        problem = "is not a directory"
    elif info.st_uid != os.getuid():
        problem = f"belongs to another user (uid {info.st_uid}, not {os.getuid()})"
    elif info.st_mode & 0o077:
        problem = f"is open to other users (mode {stat.S_IMODE(info.st_mode):04o}, not 0700)"
    if problem is not None:
        raise NodeDirError(
            f"node {_node_ip()}: {path}, where runs keep their files on this node, {problem}; "
            "expected a directory of this user's own, mode 0700 (another user may have made "
            "it to read or plant a run's files): remove it (agentkit makes it again), or give "
            "the Ray executor a node_dir of your own"
        )
    return Path(path)


@attrs.frozen
class EventBatch:
    """Harness events of the running attempt, in order."""

    events: list[Event]


@attrs.frozen
class FileChunk:
    """A piece of a file the rollout kept (``path`` relative to its artifacts directory).

    ``offset`` 0 starts the file (mode ``mode``); a directory (``is_dir``) has no data.
    """

    path: str
    offset: int
    data: bytes
    mode: int = 0o644
    is_dir: bool = False


@attrs.define
class Shipment:
    """What every attempt of a run needs on a worker, sent once per run."""

    work: AttemptWork
    run_key: str
    version: str
    ship_artifacts: bool
    artifacts_dir: str | None = None
    node_dir: str | None = None
    keep_sandboxes: bool = False


class _StreamSink:
    """The attempt's ``on_event``: kept for the result, queued for the stream."""

    def __init__(self, out: queue.SimpleQueue[Any]) -> None:
        self.events: list[Event] = []
        self._out = out

    def on_event(self, event: Event) -> None:
        self.events.append(event)
        self._out.put(event)


_DONE = object()
_runs: dict[str, _NodeRun] = {}
_portal: BlockingPortal | None = None
_portal_lock = threading.Lock()


def _event_loop() -> BlockingPortal:
    """This worker process's event loop, kept for the process's life.

    It runs in a daemon thread that nothing waits for: when Ray ends the worker (idle,
    its job over), the interpreter exits without stopping it. (anyio's
    ``start_blocking_portal``, entered and never left, did not: at exit Python finalised
    its context manager, which asked the loop thread, already frozen, to stop, and
    waited for it forever; such a worker stayed behind as ``ray::IDLE``.)
    """
    global _portal
    with _portal_lock:
        if _portal is None:
            started: concurrent.futures.Future[BlockingPortal] = concurrent.futures.Future()
            thread = threading.Thread(
                target=_serve, args=(started,), name="agentkit-event-loop", daemon=True
            )
            thread.start()
            _portal = started.result()
        return _portal


def _serve(started: concurrent.futures.Future[BlockingPortal]) -> None:
    """The event loop thread: a portal into it, served until the process ends."""
    import anyio
    from anyio.from_thread import BlockingPortal

    async def serve() -> None:
        async with BlockingPortal() as portal:
            started.set_result(portal)
            await portal.sleep_until_stopped()

    try:
        anyio.run(serve, backend="asyncio")
    except BaseException as exc:  # it could not start: the caller says why
        if not started.done():
            started.set_exception(exc)
        raise


def _load(ref: Any) -> _NodeRun:
    import ray

    key = ref.hex()
    run = _runs.get(key)
    if run is None:
        shipment: Shipment = ray.get(ref)
        if shipment.version != __version__:
            raise ExecutorError(
                f"node {_node_ip()} runs agentkit {__version__}, the driver {shipment.version}: "
                "install the same agentkit (and plugins) on every node"
            )
        run = _NodeRun(shipment)
        _runs[key] = run
        while len(_runs) > _KEEP_RUNS:
            _runs.pop(next(iter(_runs)))
        _redact_logs()
    return run


_plain_factory: Any = None


def _redact_logs() -> None:
    """Keep the runs' secrets out of this worker process's log lines (Ray keeps them in
    its session's ``logs/``): every log record's message is redacted as it is made."""
    import logging

    global _plain_factory
    if _plain_factory is None:
        _plain_factory = logging.getLogRecordFactory()
        plain = _plain_factory

        def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
            record: logging.LogRecord = plain(*args, **kwargs)
            try:
                message = record.getMessage()
            except Exception:  # a broken format: logging reports it as it would
                return record
            redacted = message
            for run in list(_runs.values()):
                redacted = run.redactor().text(redacted)
            if redacted != message:
                record.msg, record.args = redacted, None
            if record.exc_info and not record.exc_text:
                text = logging.Formatter().formatException(record.exc_info)
                for run in list(_runs.values()):
                    text = run.redactor().text(text)
                record.exc_text = text
            return record

        logging.setLogRecordFactory(factory)


def _node_ip() -> str:
    try:
        import ray.util

        return str(ray.util.get_node_ip_address())
    except Exception:  # pragma: no cover - outside a Ray worker
        return "?"


def _node_id() -> str:
    import ray

    return str(ray.get_runtime_context().get_node_id())


def run_attempt(box: list[Any], job: Job, last_attempt: bool) -> Iterator[Any]:
    """The Ray task of one attempt: events as they come, kept files, then the Attempt.

    ``box`` holds the run's :class:`Shipment` reference (in a list, so that Ray
    passes the reference rather than its value, and it is unpickled once).
    """
    run = _load(box[0])
    portal = _event_loop()
    out: queue.SimpleQueue[Any] = queue.SimpleQueue()
    sink = _StreamSink(out)
    finished = threading.Event()

    async def attempt() -> Attempt:
        try:
            return await run.attempt(job, sink, last_attempt=last_attempt)
        finally:
            finished.set()

    future = portal.start_task_soon(attempt)
    future.add_done_callback(lambda _f: out.put(_DONE))
    try:
        done = False
        while not done:
            try:
                item = out.get(timeout=1.0)  # a timeout keeps a cancellation deliverable
            except queue.Empty:
                continue
            batch: list[Event] = []
            while True:
                if item is _DONE:
                    done = True
                else:
                    batch.append(item)
                try:
                    item = out.get_nowait()
                except queue.Empty:
                    break
            if batch:
                yield EventBatch(batch)
    except BaseException:
        # cancelled (the driver stopped): close the sandbox before the task ends
        future.cancel()
        finished.wait(run.work.sandbox_close_timeout + 5.0)
        raise
    result = future.result()
    if result.result.events and result.result.events == sink.events:
        # the driver has them already (streamed): do not send them twice
        result.result = attrs.evolve(result.result, events=[])
    yield from run.ship(job, result)
    yield result


def run_check(fn: Any) -> tuple[Any, str, str]:
    """The Ray task of a run's preflight: ``fn()``'s value, this agentkit's version, the node."""
    value = _event_loop().call(fn)
    return value, __version__, _node_ip()


class _NodeRun:
    """One run in one worker process: its shipment, what this process checked and prepared."""

    def __init__(self, shipment: Shipment) -> None:
        self.shipment = shipment
        self.work = shipment.work
        self._root: Path | None = None
        self._kind_problem: str | None = None
        self._kind_checked = False
        self._prepared: set[str] = set()
        self._redactor: Redactor | None = None

    @property
    def root(self) -> Path:
        """``<node_dir>/<run_key>``: this run's files on this node (the default node
        directory is made, or checked to be this user's own, when first used)."""
        if self._root is None:
            node_dir = self.shipment.node_dir
            top = Path(node_dir) if node_dir else private_node_dir(default_node_dir())
            self._root = top / self.shipment.run_key
        return self._root

    # -- before a sandboxed attempt -------------------------------------------
    async def _ready(self, planned: PlannedTask) -> str | None:
        """Why a sandbox cannot start here (None: it can): the kind's check, the
        task's files, and the task's environment prepared on this node (once)."""
        factory = self.work.sandbox_factory
        kind = getattr(factory, "func", factory)
        options = dict(getattr(factory, "keywords", None) or {})
        if not self._kind_checked:
            self._kind_checked = True
            preflight = getattr(kind, "preflight", None)
            if callable(preflight):
                try:
                    await preflight(**options)
                except Exception as exc:
                    self._kind_problem = f"{type(exc).__name__}: {exc}"
        if self._kind_problem is not None:
            return f"the sandbox cannot run on node {_node_ip()}: {self._kind_problem}"
        missing = _missing_paths(self.work.hints_for(planned))
        if missing:
            return (
                f"node {_node_ip()} does not have the task's files: {', '.join(missing[:3])} "
                "(every node must see the taskset, and what the harness needs, at the same "
                "paths: see docs/distributed.md)"
            )
        task_id = planned.task.task_id
        prepare = getattr(kind, "prepare", None)
        if task_id not in self._prepared and callable(prepare):
            await self._prepare(planned, prepare, options)
            self._prepared.add(task_id)
        return None

    async def _prepare(self, planned: PlannedTask, prepare: Any, options: dict[str, Any]) -> None:
        """The kind's ``prepare`` for one task, one process of this node at a time."""
        import fcntl

        import anyio

        digest = hashlib.sha1(planned.task.task_id.encode("utf-8")).hexdigest()[:16]
        locks = self.root.parent / "locks"  # shared by the node's runs
        locks.mkdir(parents=True, exist_ok=True)
        fd = os.open(locks / f"prepare-{digest}.lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            await anyio.to_thread.run_sync(fcntl.flock, fd, fcntl.LOCK_EX)
            results = await prepare(
                [self.work.hints_for(planned)],
                log_dir=self.root / "images",
                on_progress=None,
                **options,
            )
        finally:
            os.close(fd)
        outcome = results[0] if results else None
        if isinstance(outcome, BaseException):
            self.work.prepare_errors[planned.task.task_id] = outcome

    # -- one attempt -----------------------------------------------------------
    async def attempt(self, job: Job, sink: _StreamSink, *, last_attempt: bool) -> Attempt:
        work = self.work
        planned = job.planned
        root = None
        if work.needs_sandbox(planned):
            problem = await self._ready(planned)
            if problem is not None:
                result = HarnessResult(status="failed", error=problem, error_kind="sandbox_start")
                return Attempt(result, None, retry=not last_attempt, worker=self._where(None))
            root = self.root / "rollouts" / job.rollout_id
        artifacts = self._artifacts_dir(job.rollout_id)
        attempt = await work.attempt(
            job,
            sink,
            last_attempt=last_attempt,
            root=root,
            artifacts_dir=None if artifacts is None else str(artifacts),
        )
        kept = None
        if root is not None and root.exists():
            score = attempt.score
            ok = (
                score is not None
                and attempt.result.status == "completed"
                and not score.errors
                and score.total is not None
            )
            if attempt.retry or (ok and not self.shipment.keep_sandboxes):
                shutil.rmtree(root, ignore_errors=True)
            else:  # kept on this node: without the run's secrets, as in a run directory
                import anyio

                await anyio.to_thread.run_sync(self.redactor().tree, root)
                kept = str(root)
        attempt.worker = self._where(kept)
        shared = self.shipment.artifacts_dir
        if shared is not None and artifacts is not None and artifacts.exists():
            attempt.worker["artifacts_dir"] = str(artifacts)
        return attempt

    def redactor(self) -> Redactor:
        """The run's secrets (API key, secret headers) and this node's secret-looking ones."""
        if self._redactor is None:
            ctx = self.work.context
            headers = [
                v
                for k, v in ctx.headers.items()
                if any(w in k.lower() for w in SECRET_HEADER_WORDS)
            ]
            self._redactor = Redactor.for_run(ctx.resolved_api_key, extra=headers)
        return self._redactor

    def _artifacts_dir(self, rollout_id: str) -> Path | None:
        if self.shipment.artifacts_dir is not None:
            return Path(self.shipment.artifacts_dir) / rollout_id
        if not self.shipment.ship_artifacts:
            return None
        return self.root / "artifacts" / rollout_id

    def _where(self, sandbox_dir: str | None) -> dict[str, Any]:
        return {"node_ip": _node_ip(), "node_id": _node_id(), "sandbox_dir": sandbox_dir}

    def ship(self, job: Job, attempt: Attempt) -> Iterator[FileChunk]:
        """The rollout's kept files, in chunks, then removed here (not with a shared dir)."""
        if self.shipment.artifacts_dir is not None or not self.shipment.ship_artifacts:
            return
        top = self.root / "artifacts" / job.rollout_id
        if not top.is_dir():
            return
        try:
            for dirpath, dirnames, filenames in os.walk(top):
                here = Path(dirpath)
                rel_dir = here.relative_to(top).as_posix()
                if not filenames and not dirnames and rel_dir != ".":
                    yield FileChunk(rel_dir, 0, b"", is_dir=True)
                for name in sorted(filenames):
                    path = here / name
                    if path.is_symlink() or not path.is_file():
                        continue
                    rel = path.relative_to(top).as_posix()
                    mode = path.stat().st_mode & 0o777
                    with open(path, "rb") as fh:
                        offset = 0
                        while True:
                            data = fh.read(CHUNK_BYTES)
                            if not data and offset:
                                break
                            yield FileChunk(rel, offset, data, mode)
                            offset += len(data)
                            if len(data) < CHUNK_BYTES:
                                break
        finally:
            shutil.rmtree(top, ignore_errors=True)
            with contextlib.suppress(OSError):
                top.parent.rmdir()


def _missing_paths(hints: Any) -> list[str]:
    """Host paths the task's sandbox will read that this node does not have."""
    wanted = [str(p) for p in hints.paths.values()]
    wanted += [str(p) for p in hints.ro_binds]
    image = hints.image
    if image is not None:
        wanted += [p for p in (image.dockerfile, image.context, image.compose_file) if p]
    return [p for p in dict.fromkeys(wanted) if not os.path.exists(p)]
