"""The Ray executor: every attempt runs as a Ray task on a cluster node.

The driver (this process) plans, retries, persists and summarises exactly as
with the local executor; each attempt is a Ray streaming-generator task
(:mod:`agentkit.executors._ray_worker`) whose harness, sandbox and grading
run on a worker node. Placement: the run's ``concurrency`` bounds the tasks
in flight; each asks Ray for its task's ``cpus`` hint (else
``cpus_per_rollout``), ``memory_mb`` and ``gpus``, and a rollout that needs
a sandbox only goes to nodes labelled for that sandbox kind (its class's
``node_label``, e.g. ``agentkit/bwrap=true`` for the local sandbox). A node
or worker process that dies mid-attempt makes the attempt fail with
``node_died``, ``worker_died`` or ``worker_oom``, which the runner retries
(on another node, when Ray places it there); each such loss is also told on
stderr, in a warning of the ``agentkit`` logger.

What Ray itself prints in the driver (its cluster's news: a node marked dead,
a raylet terminated) goes to ``sys.stdout``, as in any Ray program; the
``agentkit run`` command keeps stdout for its own output and sends that to
stderr (:mod:`agentkit.cli._stdout`). Worker processes' output is not
forwarded to the driver (``log_to_driver=False``): it stays in Ray's session
logs on each node.

Ray is imported only when a run uses this executor (``pip install
'agentkit[ray]'``).
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import functools
import logging
import os
import re
import shutil
import uuid
from collections.abc import Awaitable, Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

from agentkit._errors import AgentkitError, SpecError, missing_extra
from agentkit._executor import Attempt, AttemptWork, EventSink, ExecutorError, Job, RunFiles
from agentkit._result import HarnessResult
from agentkit._version import __version__
from agentkit.executors._ray_local import LocalRay, cluster_to_join
from agentkit.executors._ray_policy import RemoteBoard, relay_calls, start_keeper
from agentkit.executors._ray_worker import (
    EventBatch,
    FileChunk,
    NodeDirError,
    Shipment,
    run_attempt,
    run_check,
)

__all__ = ["LABEL_VALUE", "RayExecutor", "local_node_labels", "sandbox_node_label"]

T = TypeVar("T")
_log = logging.getLogger("agentkit")

#: The value a node's label must have for a sandbox kind's ``node_label``.
LABEL_VALUE = "true"
#: Seconds the run's preflight may take on a node (scheduling included).
CHECK_TIMEOUT = 180.0
#: Unconsumed stream items a worker may run ahead of the driver (events, file chunks).
STREAM_BACKPRESSURE = 64

_INSTALL_HINT = missing_extra("the ray executor", "ray", "ray", note="on the driver and every node")


def _import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise ExecutorError(_INSTALL_HINT) from None
    return ray


def sandbox_node_label(factory: Callable[..., Any] | None) -> str | None:
    """The node label a sandbox kind needs (its ``node_label`` attribute), or None."""
    if factory is None:
        return None
    kind = getattr(factory, "func", factory)
    label = getattr(kind, "node_label", None)
    return label if isinstance(label, str) and label else None


def local_node_labels() -> dict[str, str]:
    """The sandbox labels this machine qualifies for (for a Ray instance started here)."""
    labels: dict[str, str] = {}
    if shutil.which("bwrap"):
        labels["agentkit/bwrap"] = LABEL_VALUE
    docker_host = os.environ.get("DOCKER_HOST", "")
    if docker_host or os.path.exists("/var/run/docker.sock"):
        labels["agentkit/docker"] = LABEL_VALUE
    return labels


class RayExecutor:
    """Run every rollout as a Ray task on a cluster: ``env.run(executor=RayExecutor(...))``.

    ``address`` is the cluster to join (its head's ``HOST:PORT``; None:
    the cluster in ``RAY_ADDRESS`` or one started with ``ray start`` on this
    machine, else a new local Ray instance, labelled for the sandboxes this
    machine has, which ends with the run however the run ends, ``kill -9``
    included: see :mod:`agentkit.executors._ray_local`). A Ray already
    initialised in this process is used as it is. A cluster this executor
    did not start is never stopped or cleaned up by it.

    ``cpus_per_rollout``: the CPUs a rollout asks Ray for when its task has
    no ``cpus`` hint. ``artifacts_dir``: a directory every node sees at that
    path: rollouts write their kept files there (``<artifacts_dir>/<rollout
    id>``, linked from the run directory) instead of sending them back to the
    driver. ``node_dir``: where runs keep their files on each node (default
    ``<temp dir>/agentkit-ray-<uid>``, made mode 0700; one there that is not the
    user's own, a link or open to others stops the run with a
    :class:`~agentkit.executors._ray_worker.NodeDirError`: docs/distributed.md).
    ``init_options`` go to ``ray.init``; arguments
    it refuses make :meth:`open` raise :class:`ExecutorError`, naming the option
    and what Ray said.
    """

    name = "ray"

    def __init__(
        self,
        address: str | None = None,
        *,
        cpus_per_rollout: float = 1.0,
        artifacts_dir: str | os.PathLike[str] | None = None,
        node_dir: str | os.PathLike[str] | None = None,
        init_options: dict[str, Any] | None = None,
    ) -> None:
        if not cpus_per_rollout >= 0:
            raise SpecError(f"cpus_per_rollout must be 0 or more, got {cpus_per_rollout:g}")
        self.address = address
        self.cpus_per_rollout = float(cpus_per_rollout)
        self.artifacts_dir = None if artifacts_dir is None else os.path.abspath(artifacts_dir)
        self.node_dir = None if node_dir is None else os.path.abspath(node_dir)
        self.init_options = dict(init_options or {})
        self._ray: Any = None
        self._work: AttemptWork | None = None
        self._box: list[Any] = []
        self._label: str | None = None
        self._started = False
        self._local: LocalRay | None = None
        self._options: dict[str, dict[str, Any]] = {}
        self._nodes: list[dict[str, Any]] = []
        self._by_node: dict[str, int] = {}
        self._lost: tuple[type[BaseException], ...] = ()
        self._keeper: Any = None  # the PolicyKeeper actor, for a rollout service
        self._relay: asyncio.Task[None] | None = None

    # -- lifecycle -------------------------------------------------------------
    async def open(self, work: AttemptWork, *, run_dir: Path | None) -> None:
        """Join (or start) the cluster, check it has nodes for the sandbox, send ``work`` once."""
        import sniffio

        if sniffio.current_async_library() != "asyncio":
            raise ExecutorError("the ray executor runs on asyncio (anyio's default backend)")
        ray = _import_ray()
        self._ray = ray
        self._work = work
        self._by_node = {}
        self._options = {}
        if not ray.is_initialized():
            self._connect(ray)
        try:
            self._ship(ray, work, run_dir)
        except BaseException:
            await self.close()  # a run that does not start leaves no connection behind
            raise

    def _share_policy(self, ray: Any, work: AttemptWork) -> AttemptWork:
        """``work`` as the workers get it: when a trainer announces policies (the rollout
        service), its workers' routes follow the policy a :class:`PolicyKeeper` actor
        holds, kept current by the driver's board, and the calls they make are told to
        the driver's board as they start."""
        board = work.policy
        if board is None:
            return work
        keeper = start_keeper(ray, board)
        self._keeper = keeper
        self._relay = asyncio.get_running_loop().create_task(relay_calls(keeper, board))
        shipped = copy.copy(work)
        shipped.policy = RemoteBoard(keeper, board.current)
        return shipped

    def _ship(self, ray: Any, work: AttemptWork, run_dir: Path | None) -> None:
        """Check the cluster has nodes for the sandbox, then put the run in its object store."""
        self._nodes = [n for n in ray.nodes() if n.get("Alive")]
        self._label = sandbox_node_label(work.sandbox_factory)
        if self._label is not None and not any(
            (n.get("Labels") or {}).get(self._label) == LABEL_VALUE for n in self._nodes
        ):
            raise ExecutorError(
                f"no node of the Ray cluster has the label {self._label}={LABEL_VALUE}, which "
                "rollouts in this sandbox need: start the nodes that can run it with "
                f"'ray start ... --labels {self._label}={LABEL_VALUE}' (see docs/distributed.md)"
            )
        self._lost = _lost_errors(ray)
        work = self._share_policy(ray, work)
        stem = "run" if run_dir is None else Path(run_dir).name
        shipment = Shipment(
            work=work,
            run_key=f"{stem}-{uuid.uuid4().hex[:8]}",
            version=__version__,
            ship_artifacts=run_dir is not None and self.artifacts_dir is None,
            artifacts_dir=None if run_dir is None else self.artifacts_dir,
            node_dir=self.node_dir,
            keep_sandboxes=work.keep_sandboxes,
        )
        try:
            self._box = [ray.put(shipment)]
        except Exception as exc:
            raise ExecutorError(_unpicklable(work, exc)) from None

    def _connect(self, ray: Any) -> None:
        options: dict[str, Any] = {"logging_level": logging.WARNING, "log_to_driver": False}
        options.update(self.init_options)
        with _keep_stop_signals():
            try:
                self._init(ray, options)
            except AgentkitError:
                raise
            except Exception as exc:  # ray.init refused its arguments, or Ray did not start
                raise ExecutorError(_init_refused(self.init_options, exc)) from None
        self._started = True

    def _init(self, ray: Any, options: dict[str, Any]) -> None:
        address = self.address if self.address is not None else cluster_to_join()
        if address is not None:
            try:
                ray.init(address=address, **options)
                return
            except ConnectionError as exc:
                if self.address is not None:
                    raise ExecutorError(
                        f"cannot join the Ray cluster at {self.address}: {exc}"
                    ) from None
                # the cluster `ray start` left its address for is gone: start one here
        options.setdefault("labels", local_node_labels())
        options.setdefault("include_dashboard", False)
        local = LocalRay()
        local.start(ray, options)
        self._local = local

    async def close(self) -> None:
        """Forget the run's shipment; disconnect when this executor connected, and end the
        Ray instance it started (what ``ray.shutdown`` leaves, its guard kills)."""
        import anyio

        self._box = []
        relay, self._relay = self._relay, None
        if relay is not None:
            relay.cancel()
        keeper, self._keeper = self._keeper, None
        if keeper is not None and self._ray is not None:
            with contextlib.suppress(Exception):  # gone with its cluster already
                self._ray.kill(keeper)
        if self._started and self._ray is not None:
            self._ray.shutdown()
            self._started = False
        local, self._local = self._local, None
        if local is not None:
            with anyio.CancelScope(shield=True):  # a stopped run ends its instance too
                await anyio.to_thread.run_sync(local.close)

    def describe(self) -> dict[str, Any]:
        """``name``, the cluster's ``nodes`` at the start, and the attempts that ended on
        each node (``IP/node id``; attempts lost with their node are not counted)."""
        return {
            "name": self.name,
            "address": self.address,
            "nodes": len(self._nodes),
            "attempts_by_node": dict(sorted(self._by_node.items())),
        }

    # -- before the rollouts ---------------------------------------------------
    async def check(self, fn: Callable[[], Awaitable[T]], *, sandboxed: bool) -> T:
        """Run ``fn`` on a node (one labelled for the sandbox when ``sandboxed``)."""
        import anyio

        ray = self._ray
        remote = _remote(ray, run_check, streaming=False)
        options: dict[str, Any] = {"num_cpus": 0}
        if sandboxed and self._label is not None:
            options["label_selector"] = {self._label: LABEL_VALUE}
        ref = remote.options(**options).remote(fn)
        try:
            with anyio.fail_after(CHECK_TIMEOUT):
                value, version, node = await ref
        except TimeoutError:
            ray.cancel(ref, force=True)
            raise ExecutorError(
                f"no node ran the run's preflight within {CHECK_TIMEOUT:g} s "
                "(is every node busy, or none fit?)"
            ) from None
        except ray.exceptions.RayTaskError as exc:
            cause = getattr(exc, "cause", None)
            if isinstance(cause, AgentkitError):
                raise cause from None
            raise ExecutorError(f"the run's preflight failed on a node: {_why(exc)}") from None
        except ray.exceptions.RaySystemError as exc:  # the run could not be loaded there
            raise ExecutorError(f"a node cannot load the run: {_why(exc)}") from None
        if version != __version__:
            raise ExecutorError(
                f"node {node} runs agentkit {version}, the driver {__version__}: install the "
                "same agentkit (and plugins) on every node"
            )
        result: T = value
        return result

    async def prepare(
        self,
        jobs: Sequence[Job],
        *,
        log_dir: Path | None,
        on_progress: Callable[[str], None] | None,
    ) -> None:
        """Nothing ahead: each node prepares a task's environment before its first rollout
        of it there (image builds stay on the node that uses them)."""

    # -- one attempt -----------------------------------------------------------
    def _task_options(self, job: Job) -> dict[str, Any]:
        planned = job.planned
        key = planned.task.task_id
        found = self._options.get(key)
        if found is not None:
            return found
        hints = planned.hints
        options: dict[str, Any] = {
            "num_cpus": hints.cpus if hints is not None and hints.cpus else self.cpus_per_rollout,
            "_generator_backpressure_num_objects": STREAM_BACKPRESSURE,
        }
        if hints is not None and hints.memory_mb:
            options["memory"] = int(hints.memory_mb) * 1024 * 1024
        if hints is not None and hints.gpus:
            options["num_gpus"] = hints.gpus
        assert self._work is not None
        if self._label is not None and self._work.needs_sandbox(planned):
            options["label_selector"] = {self._label: LABEL_VALUE}
        self._options[key] = options
        return options

    async def attempt(
        self, job: Job, events: EventSink, *, last_attempt: bool, store: RunFiles | None
    ) -> Attempt:
        """One attempt as a Ray task; its events are passed on as they arrive."""
        ray = self._ray
        work = self._work
        assert work is not None, "RayExecutor.open() first"
        remote = _remote(ray, run_attempt, streaming=True)
        stream = remote.options(**self._task_options(job)).remote(self._box, job, last_attempt)
        outcome: Attempt | None = None
        files_started = False
        try:
            async for ref in stream:
                item = await ref
                if isinstance(item, EventBatch):
                    for event in item.events:
                        events.on_event(event)
                elif isinstance(item, FileChunk):
                    if store is not None:
                        if not files_started:  # an earlier attempt's files, if any, go
                            files_started = True
                            store.clear_artifacts(job.rollout_id)
                        store.write_artifact_chunk(
                            job.rollout_id,
                            item.path,
                            item.data,
                            offset=item.offset,
                            mode=item.mode,
                            is_dir=item.is_dir,
                        )
                else:
                    outcome = item
        except self._lost as exc:
            kind, why = _loss(ray, exc)
            _log.warning(
                "agentkit: %s (rollout %s); %s",
                why,
                job.rollout_id,
                "no retries are left: agentkit run --resume runs it again"
                if last_attempt
                else "it is run again",
            )
            # the rollout could not run (no reward); the runner retries it elsewhere
            result = HarnessResult(status="failed", error=why, error_kind=kind)
            return Attempt(result, None, retry=not last_attempt)
        except ray.exceptions.RayTaskError as exc:
            cause = getattr(exc, "cause", None)
            if isinstance(cause, NodeDirError):  # no rollout can keep its files on that node
                raise NodeDirError(str(cause)) from None
            result = HarnessResult(
                status="failed",
                error=f"the attempt failed on its worker: {_why(exc)}",
                error_kind="worker_error",
            )
            return Attempt(result, None)  # it could not run there: no reward
        finally:
            if outcome is None:
                with contextlib.suppress(Exception):  # it may have ended meanwhile
                    ray.cancel(stream)
        if outcome is None:  # the stream ended without its result
            result = HarnessResult(
                status="failed",
                error="the attempt's worker ended without a result",
                error_kind="worker_error",
            )
            return Attempt(result, None)
        worker = outcome.worker or {}
        node = f"{worker.get('node_ip') or '?'}/{str(worker.get('node_id') or '?')[:8]}"
        self._by_node[node] = self._by_node.get(node, 0) + 1
        shared = worker.get("artifacts_dir")
        if shared and store is not None:
            store.link_artifacts(job.rollout_id, str(shared))
        return outcome


@contextlib.contextmanager
def _keep_stop_signals() -> Iterator[None]:
    """Put back this process's stop-signal handlers after ``ray.init``, which installs
    its own (SIGTERM would exit at once instead of stopping the run through its
    event loop and leaving it resumable)."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    stops = [signal.SIGINT, signal.SIGTERM, getattr(signal, "SIGHUP", None)]
    saved = {sig: signal.getsignal(sig) for sig in stops if sig is not None}
    try:
        yield
    finally:
        for sig, handler in saved.items():
            if handler is not None:
                signal.signal(sig, handler)


@functools.cache
def _remote_cached(ray: Any, fn: Callable[..., Any], streaming: bool) -> Any:
    if streaming:
        return ray.remote(num_returns="streaming", max_retries=0)(fn)
    return ray.remote(max_retries=0)(fn)


def _remote(ray: Any, fn: Callable[..., Any], *, streaming: bool) -> Any:
    return _remote_cached(ray, fn, streaming)


def _lost_errors(ray: Any) -> tuple[type[BaseException], ...]:
    """Ray's errors for an attempt whose worker went away (the attempt is retried)."""
    names = (
        "NodeDiedError",
        "WorkerCrashedError",
        "LocalRayletDiedError",
        "OutOfMemoryError",
        "ObjectLostError",
        "OwnerDiedError",
        "ObjectFetchTimedOutError",
        "RaySystemError",
    )
    found = [getattr(ray.exceptions, n, None) for n in names]
    return tuple(e for e in found if isinstance(e, type) and issubclass(e, BaseException))


def _why(exc: BaseException) -> str:
    """One line for a Ray task's failure: its cause, or what a node could not import."""
    text = str(exc)
    missing = re.search(r"No module named '([^']+)'", text)
    if missing:
        return (
            f"No module named {missing.group(1)!r} there: every node needs the same agentkit, "
            "plugins and the modules the harness and rubric are defined in"
        )
    cause = getattr(exc, "cause", None)
    if isinstance(cause, BaseException):
        return f"{type(cause).__name__}: {cause}"
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else type(exc).__name__


def _loss(ray: Any, exc: BaseException) -> tuple[str, str]:
    """``(error_kind, error)`` of a lost attempt."""
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    oom = getattr(ray.exceptions, "OutOfMemoryError", None)
    if oom is not None and isinstance(exc, oom):
        return "worker_oom", f"Ray killed the worker running this rollout (node memory): {first}"
    if isinstance(exc, ray.exceptions.NodeDiedError):
        return "node_died", f"the node running this rollout died: {first}"
    return "worker_died", f"the worker running this rollout died ({type(exc).__name__}): {first}"


def _init_refused(given: dict[str, Any], exc: BaseException) -> str:
    """One message for a ``ray.init`` that failed: the ``init_options`` it names (else
    all those given; their values are never shown: one may hold a secret) and what Ray
    said."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    said = f"{type(exc).__name__}: {' '.join(lines)}" if lines else type(exc).__name__
    if not given:
        return f"ray.init failed: {said}"
    named = [key for key in given if re.search(rf"(?<!\w){re.escape(key)}(?!\w)", said)]
    keys = ", ".join(named or given)
    which = "option" if len(named or given) == 1 else "options"
    return (
        f"ray.init failed with the Ray init {which} {keys} (--ray-init, init_options); "
        f"Ray said: {said}"
    )


def _unpicklable(work: AttemptWork, exc: BaseException) -> str:
    """Which part of the run could not be sent to the workers, and why."""
    import ray.cloudpickle as cloudpickle

    parts = {
        "the harness": work.harness,
        "the rubric": work.rubric,
        "the sandbox options": work.sandbox_factory,
        "the run context": work.context,
    }
    for name, value in parts.items():
        try:
            cloudpickle.dumps(value)
        except Exception as inner:
            return (
                f"the ray executor sends {name} to every node, but it cannot be pickled: "
                f"{type(inner).__name__}: {inner}"
            )
    return f"the run cannot be sent to the Ray cluster: {type(exc).__name__}: {exc}"
