"""The rollout service as a named Ray actor, for a trainer in another process on the
same Ray cluster.

:func:`serve_on_ray` starts a :class:`ServiceActor` (an async Ray actor) that
opens a :class:`~agentkit.service.RolloutService` over the environment and
options it is given, and returns its handle. A trainer in any process of the
cluster finds it by name (``ray.get_actor(name, namespace=...)``) and calls
its methods: ``request``, ``next_group`` (the whole
:class:`~agentkit.service.ServiceGroup`: data, training records and the
rollouts' records), ``set_policy``, ``report``, ``close``. An error that
stopped the service reaches the trainer as
:class:`~agentkit.service.ServiceFailed` (Ray's task error is an instance of it;
its ``cause`` is the :class:`~agentkit.service.ServiceFailed` the actor raised,
message and all, which pickles whole).

Ray is imported inside functions: it is an optional dependency (``agentkit[ray]``).
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import anyio

from agentkit._errors import SpecError, missing_extra
from agentkit.env import AgentEnv, RunOptions
from agentkit.service._formats import RecordOptions, TrainerFormat
from agentkit.service._group import ServiceGroup, ServiceReport
from agentkit.service._service import OnStale, RolloutService, ServiceError

__all__ = ["ServiceActor", "serve_on_ray"]

#: The namespace the service's actor is named in unless another is given.
NAMESPACE = "agentkit"


class ServiceActor:
    """A rollout service in a Ray actor: its methods are the service's, called through
    the actor's handle (``ray.get(handle.next_group.remote())``).

    The service is opened by :meth:`open` and held by a task of the actor's own
    until :meth:`close` (anyio's task groups close in the task that opened them)."""

    def __init__(self, env: AgentEnv, options: RunOptions, settings: dict[str, Any]) -> None:
        self._service = RolloutService(env, options, **settings)
        self._error: BaseException | None = None
        self._holder: asyncio.Task[None] | None = None

    async def open(self) -> None:
        """Open the service (the executor, the model proxy, the run directory, the
        preflight); raises what opening it raised."""
        # made here: the actor's event loop runs its methods, not its constructor
        self._close = anyio.Event()
        self._closed = anyio.Event()
        self._opened = anyio.Event()
        self._holder = asyncio.get_running_loop().create_task(self._hold())
        await self._opened.wait()
        if self._error is not None:
            raise self._error

    async def _hold(self) -> None:
        try:
            async with self._service:
                self._opened.set()
                await self._close.wait()
        except BaseException as exc:  # opening failed: open() raises it
            self._error = exc
        finally:
            self._opened.set()
            self._closed.set()

    def request(self, groups: int = 1, task_id: str | None = None) -> list[int]:
        """:meth:`RolloutService.request`."""
        return self._service.request(groups, task_id=task_id)

    async def next_group(self) -> ServiceGroup:
        """:meth:`RolloutService.next_group`."""
        return await self._service.next_group()

    async def set_policy(
        self, version: int, base_url: str | None = None, model: str | None = None
    ) -> None:
        """:meth:`RolloutService.set_policy`."""
        await self._service.set_policy(version, base_url=base_url, model=model)

    def report(self) -> ServiceReport:
        """:meth:`RolloutService.report`."""
        return self._service.report()

    async def close(self) -> ServiceReport:
        """Close the service (rollouts in flight stopped; every finished one is in the run
        directory); its last report."""
        self._close.set()
        await self._closed.wait()
        return self._service.report()


def serve_on_ray(
    env: AgentEnv,
    options: RunOptions,
    *,
    group_size: int,
    name: str,
    namespace: str = NAMESPACE,
    max_staleness: int | None = None,
    on_stale: OnStale = "drop",
    restart_on_update: bool = False,
    format: TrainerFormat = "skyrl",
    records: RecordOptions | None = None,
    policy_version: int = 0,
) -> Any:
    """Start a rollout service in a Ray actor named ``name`` (in ``namespace``) on the
    cluster this process is connected to (``ray.init`` first), open it, and return the
    actor's handle. The other arguments are :class:`RolloutService`'s. The actor lives
    as long as this process's Ray job (or until ``close``); a name already taken is an
    error naming it."""
    try:
        # deferred: Ray is an optional dependency (agentkit[ray])
        import ray
    except ImportError:
        raise SpecError(missing_extra("the rollout service on Ray", "ray", "ray")) from None
    if not ray.is_initialized():
        raise SpecError("serve_on_ray needs a Ray connection: call ray.init(...) first")
    settings: dict[str, Any] = {
        "group_size": group_size,
        "max_staleness": max_staleness,
        "on_stale": on_stale,
        "restart_on_update": restart_on_update,
        "format": format,
        "records": records,
        "policy_version": policy_version,
    }
    with contextlib.suppress(ValueError):  # ValueError: no actor of that name (good)
        ray.get_actor(name, namespace=namespace)
        raise ServiceError(f"a Ray actor named {name!r} exists in namespace {namespace!r}")
    actor = ray.remote(num_cpus=0)(ServiceActor)
    handle = actor.options(name=name, namespace=namespace).remote(env, options, settings)
    try:
        ray.get(handle.open.remote())
    except BaseException:
        ray.kill(handle)
        raise
    return handle
