"""An HTTP front on a rollout service, for a trainer in another process.

:class:`ServiceFront` serves one :class:`~agentkit.service.RolloutService`
on loopback (aiohttp's web server) as JSON; every request carries the
front's token as a bearer token (a 401 otherwise), compared in constant
time:

- ``POST /v1/groups`` ``{"groups": 2, "task_id": null}``: :meth:`RolloutService.request`;
  answers ``{"group_ids": [...]}``.
- ``POST /v1/groups/next``: :meth:`RolloutService.next_group`, waiting until a
  group finishes; answers ``{"group": {...}}`` (:func:`group_json`), or a 409
  when no group is pending.
- ``POST /v1/policy`` ``{"version": 3, "base_url": null, "model": null}``:
  :meth:`RolloutService.set_policy`.
- ``GET /v1/report``: :meth:`RolloutService.report`.

A body that is not what the route takes gets a 400 naming the field and
what it expected; the service's own refusals (a version that does not
grow, an unknown task) a 400 with its message; an error that stopped the service
(:class:`~agentkit.service.ServiceFailed`) a 503 naming it.
"""

from __future__ import annotations

import hmac
import json
import secrets
from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import Any

import anyio
from aiohttp import web

from agentkit._errors import AgentkitError
from agentkit._serve import start_site
from agentkit.service._group import ServiceGroup
from agentkit.service._service import RolloutService, ServiceError, ServiceFailed

__all__ = ["ServiceFront", "group_json"]

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def group_json(group: ServiceGroup) -> dict[str, Any]:
    """A group as the front sends it: its identity, versions, rewards, the rollouts'
    ids and ``data`` in the trainer's format."""
    return {
        "group_id": group.group_id,
        "task_id": group.task_id,
        "format": group.format,
        "oldest_version": group.oldest_version,
        "newest_version": group.newest_version,
        "version": group.version,
        "staleness": group.staleness,
        "rerun_of": group.rerun_of,
        "rewards": group.rewards,
        "rollout_ids": [r.rollout_id for r in group.rollouts],
        "data": group.data,
    }


class _BadRequest(Exception):
    pass


def _field(body: dict[str, Any], name: str, kinds: tuple[type, ...], what: str) -> Any:
    value = body.get(name)
    if type(value) not in kinds:
        raise _BadRequest(f"{name}: expected {what}, got {json.dumps(value)[:80]}")
    return value


class ServiceFront:
    """``async with ServiceFront(service) as front``: ``front.url`` and ``front.token``
    are what the trainer's process is given. ``host`` is loopback unless said
    otherwise; ``port=0`` lets the OS choose."""

    def __init__(
        self,
        service: RolloutService,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        token: str | None = None,
    ) -> None:
        self.service = service
        self.host = host
        self.port = port
        #: The bearer token every request must carry.
        self.token = token or secrets.token_urlsafe(24)
        self._runner: web.AppRunner | None = None
        self._told = anyio.Event()

    @property
    def url(self) -> str:
        """The front's base URL (``http://127.0.0.1:PORT/v1``)."""
        return f"http://{self.host}:{self.port}/v1"

    async def __aenter__(self) -> ServiceFront:
        app = web.Application(middlewares=[self._guard])
        app.add_routes(
            [
                web.post("/v1/groups", self._request),
                web.post("/v1/groups/next", self._next),
                web.post("/v1/policy", self._policy),
                web.get("/v1/report", self._report),
            ]
        )
        runner = web.AppRunner(app, access_log=None, handle_signals=False)
        self.port = await start_site(runner, self.host, self.port)
        self._runner = runner
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()

    async def wait_failure_told(self) -> None:
        """Wait until a request has been answered with the error that stopped the service
        (a 503): ``agentkit serve`` keeps its front up until the trainer knows."""
        await self._told.wait()

    @web.middleware
    async def _guard(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        sent = request.headers.get("Authorization", "")
        scheme, _, token = sent.partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(
            token.strip().encode(), self.token.encode()
        ):
            return _error(401, "a bearer token (the front's token) is required")
        try:
            return await handler(request)
        except _BadRequest as exc:
            return _error(400, str(exc))
        except ServiceFailed as exc:
            response = _error(503, str(exc))
            # sent in full before the trainer counts as told (serve may end right after)
            await response.prepare(request)
            await response.write_eof()
            self._told.set()
            return response
        except ServiceError as exc:
            return _error(409, str(exc))
        except AgentkitError as exc:
            return _error(400, str(exc))

    async def _body(self, request: web.Request) -> dict[str, Any]:
        try:
            body = await request.json()
        except ValueError:
            raise _BadRequest("the body must be a JSON object") from None
        if not isinstance(body, dict):
            raise _BadRequest("the body must be a JSON object")
        return body

    async def _request(self, request: web.Request) -> web.Response:
        body = await self._body(request)
        groups = body.get("groups", 1)
        if type(groups) is not int:
            raise _BadRequest(f"groups: expected a whole number, got {json.dumps(groups)[:80]}")
        task_id = _field(body, "task_id", (str, type(None)), "a task id or null")
        return web.json_response({"group_ids": self.service.request(groups, task_id=task_id)})

    async def _next(self, request: web.Request) -> web.Response:
        group = await self.service.next_group()
        return web.json_response({"group": group_json(group)})

    async def _policy(self, request: web.Request) -> web.Response:
        body = await self._body(request)
        version = _field(body, "version", (int,), "a whole number")
        base_url = _field(body, "base_url", (str, type(None)), "a URL or null")
        model = _field(body, "model", (str, type(None)), "a model name or null")
        await self.service.set_policy(version, base_url=base_url, model=model)
        policy = self.service.policy
        return web.json_response(
            {
                "policy": {
                    "version": policy.version,
                    "base_url": policy.base_url,
                    "model": policy.model,
                }
            }
        )

    async def _report(self, request: web.Request) -> web.Response:
        return web.json_response(self.service.report().to_json())


def _error(status: int, message: str) -> web.Response:
    return web.json_response({"error": message}, status=status)
