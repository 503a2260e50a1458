"""Where a rollout's tools live: one environment per rollout, from a provider.

- :class:`McpEnvironment`: any MCP server, by URL (streamable HTTP) or by
  command (stdio). Verifiers run in a sandbox against its SQLite databases
  when their paths are known.
- :class:`LocalBookingsEnvironment`: the bookings application shipped with
  this plugin, started over stdio on fresh seed/current databases.
- :class:`PlatformEnvironment`: the hosted Fleet platform through the
  ``fleet-python`` SDK (``FLEET_API_KEY``; ``FLEET_BASE_URL`` selects another
  endpoint). Created from env_key and data_key with a TTL, verified by the
  platform's verifier execution, always closed.
"""

from __future__ import annotations

import asyncio
import functools
import shutil
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from agentkit import Sandbox, missing_extra
from agentkit_fleet.localenv.bookings import copy_database, prepare_databases
from agentkit_fleet.localenv.zygote import launcher_command, warm_socket
from agentkit_fleet.mcp_client import McpConnection, McpConnectionError, McpToolResult
from agentkit_fleet.records import FleetRecord
from agentkit_fleet.verification import SandboxOpener, VerifierOutcome, run_verifier_in_sandbox

__all__ = [
    "EnvironmentError_",
    "EnvironmentForkError",
    "LocalBookingsEnvironment",
    "McpEnvironment",
    "PlatformEnvironment",
    "ToolEnvironment",
]


class EnvironmentError_(Exception):
    """An environment could not be created or verified (infrastructure, not the agent)."""


class EnvironmentForkError(EnvironmentError_):
    """An environment cannot copy its state (an MCP server it does not own, the platform)."""


class ToolEnvironment(Protocol):
    """One rollout's environment: tools over MCP, verification, close."""

    kind: str

    async def start(self) -> list[dict[str, Any]]:
        """Create or connect; return the MCP tools (wire JSON)."""
        ...

    async def list_tools(self) -> list[dict[str, Any]]:
        """The MCP tools now (wire JSON); raise :class:`McpConnectionError` when unreachable."""
        ...

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> McpToolResult:
        """Call a tool; raise :class:`McpConnectionError` when the server cannot be reached
        (an HTTP server that went away is reconnected on the next call) and
        :class:`~agentkit_fleet.mcp_client.McpToolCallError` for a protocol error."""
        ...

    async def verify(self, code: str, final_answer: str | None) -> VerifierOutcome:
        """Run the task's verifier code somewhere other than this process."""
        ...

    async def close(self) -> None:
        """Release everything (idempotent)."""
        ...

    def describe(self) -> dict[str, Any]:
        """What this environment is, for results and events (never secrets)."""
        ...


class McpEnvironment:
    """Any MCP server; verification in a sandbox against ``seed_db``/``current_db``."""

    kind = "mcp"

    def __init__(
        self,
        *,
        url: str | None = None,
        command: Sequence[str] | None = None,
        env: Mapping[str, str] | None = None,
        seed_db: str | Path | None = None,
        current_db: str | Path | None = None,
        sandbox: Sandbox | None = None,
        open_sandbox: SandboxOpener | None = None,
        tool_timeout: float = 60.0,
        verifier_timeout: float = 60.0,
    ) -> None:
        self.connection = McpConnection(url=url, command=command, env=env, timeout=tool_timeout)
        self.tool_timeout = tool_timeout
        self.seed_db = Path(seed_db) if seed_db else None
        self.current_db = Path(current_db) if current_db else None
        self.sandbox = sandbox
        self.open_sandbox = open_sandbox
        self.verifier_timeout = verifier_timeout
        self._closed = False

    async def start(self) -> list[dict[str, Any]]:
        await self.connection.start()
        return await self.connection.list_tools()

    async def list_tools(self) -> list[dict[str, Any]]:
        self.connection = await _reconnected(self.connection, self.tool_timeout)
        return await self.connection.list_tools()

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> McpToolResult:
        self.connection = await _reconnected(self.connection, self.tool_timeout)
        return await self.connection.call_tool(name, arguments)

    async def verify(self, code: str, final_answer: str | None) -> VerifierOutcome:
        if self.seed_db is None or self.current_db is None:
            return VerifierOutcome(
                success=False,
                error="no seed/current databases known for this MCP server "
                "(give seed_db= and current_db=)",
            )
        for db in (self.seed_db, self.current_db):
            if not db.is_file():
                return VerifierOutcome(success=False, error=f"database {db} does not exist")
        return await run_verifier_in_sandbox(
            code=code,
            seed_db=self.seed_db,
            current_db=self.current_db,
            final_answer=final_answer,
            sandbox=self.sandbox,
            open_sandbox=self.open_sandbox,
            timeout=self.verifier_timeout,
        )

    async def fork(self) -> ToolEnvironment:
        """A started copy of this environment's state; an MCP server given by URL or
        command keeps its state where agentkit cannot copy it, so this refuses."""
        raise EnvironmentForkError(
            f"the {self.kind!r} environment ({self.describe()['target']}) cannot fork: its MCP "
            "server keeps its state itself, out of agentkit's reach; only the bundled local "
            "app (provider 'local') can copy its databases"
        )

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        await self.connection.close()

    @property
    def closed(self) -> bool:
        """True once :meth:`close` ran."""
        return self._closed

    def describe(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "target": self.connection.url or (self.connection.command or [""])[0],
            "seed_db": str(self.seed_db) if self.seed_db else None,
            "current_db": str(self.current_db) if self.current_db else None,
        }


async def _reconnected(connection: McpConnection, timeout: float) -> McpConnection:
    """``connection``, or a fresh one to the same URL when it went away.

    Fleet's MCP client opens a new HTTP session for every call, so a server
    that was briefly unreachable serves the next call again; one session per
    episode, reopened after a failure, behaves alike. A stdio server that
    exited stays gone (its process is not restarted).
    """
    if connection.alive or connection.url is None:
        return connection
    await connection.close()
    fresh = McpConnection(url=connection.url, timeout=timeout)
    await fresh.start()
    return fresh


def bookings_command(seed_db: Path, current_db: Path) -> list[str]:
    """The stdio command of the bookings server on the given databases."""
    return [
        sys.executable,
        "-m",
        "agentkit_fleet.localenv.server",
        "--transport",
        "stdio",
        "--db",
        str(current_db),
        "--seed",
        str(seed_db),
    ]


class LocalBookingsEnvironment(McpEnvironment):
    """The bookings app over stdio, on fresh databases in a private directory.

    Its server is forked from a warm process that imported ``mcp`` once
    (:mod:`agentkit_fleet.localenv.zygote`), so a rollout does not wait
    seconds for a fresh interpreter to import it; where that cannot run, a
    fresh server process is started as before.
    """

    kind = "local"

    def __init__(self, *, databases: tuple[Path, Path] | None = None, **kwargs: Any) -> None:
        self.workdir = Path(tempfile.mkdtemp(prefix="fleet-bookings-"))
        try:
            if databases is None:
                seed, current = prepare_databases(self.workdir)
            else:  # a fork's: copies of another environment's seed and current state
                seed = copy_database(databases[0], self.workdir / "seed.sqlite")
                current = copy_database(databases[1], self.workdir / "current.sqlite")
        except BaseException:
            shutil.rmtree(self.workdir, ignore_errors=True)
            raise
        self._timeout = float(kwargs.get("tool_timeout", 60.0))
        self._options = dict(kwargs)
        self._started = False
        super().__init__(
            command=bookings_command(seed, current), seed_db=seed, current_db=current, **kwargs
        )

    async def start(self) -> list[dict[str, Any]]:
        assert self.seed_db is not None and self.current_db is not None
        path = await asyncio.to_thread(warm_socket)
        if path is not None:
            self.connection = McpConnection(
                command=launcher_command(path, self.current_db, self.seed_db),
                timeout=self._timeout,
            )
        tools = await super().start()
        self._started = True
        return tools

    async def fork(self) -> LocalBookingsEnvironment:
        """A started environment on copies of this one's databases as they are now.

        The seed and current databases are copied with SQLite's backup API (a
        consistent state even if a tool call were writing), into the child's
        own directory, and the child gets its own app server on them. What
        either changes afterwards the other never sees; each closes on its own.
        """
        if not self._started or self.closed:
            state = "closed" if self.closed else "not started"
            raise EnvironmentForkError(f"the local bookings environment cannot fork: it is {state}")
        assert self.seed_db is not None and self.current_db is not None
        databases = (self.seed_db, self.current_db)
        child = await asyncio.to_thread(
            functools.partial(LocalBookingsEnvironment, databases=databases, **self._options)
        )
        try:
            await child.start()
        except BaseException:
            await child.close()
            raise
        return child

    async def close(self) -> None:
        try:
            await super().close()
        finally:
            shutil.rmtree(self.workdir, ignore_errors=True)


class PlatformEnvironment:
    """A Fleet platform environment through the ``fleet-python`` SDK."""

    kind = "platform"

    def __init__(
        self,
        record: FleetRecord,
        *,
        api_key: str,
        base_url: str | None = None,
        ttl_seconds: int = 600,
        tool_timeout: float = 60.0,
        verifier_timeout: int = 60,
    ) -> None:
        self.record = record
        self._api_key = api_key
        self.base_url = base_url
        self.ttl_seconds = ttl_seconds
        self.tool_timeout = tool_timeout
        self.verifier_timeout = verifier_timeout
        self.instance_id: str | None = None
        self._env: Any = None
        self._fleet: Any = None
        self.connection: McpConnection | None = None
        self._closed = False

    def _sdk(self) -> Any:
        try:
            from fleet import AsyncFleet  # type: ignore[import-untyped]
        except ImportError:
            raise EnvironmentError_(
                missing_extra(
                    "the Fleet platform", "fleet-python", "platform", dist="agentkit-fleet"
                )
            ) from None
        return AsyncFleet(api_key=self._api_key, base_url=self.base_url)

    async def start(self) -> list[dict[str, Any]]:
        r = self.record
        if not r.env_key:
            raise EnvironmentError_(f"task {r.task_key!r} has no env_key to create on Fleet")
        env_key = f"{r.env_key}:{r.env_version}" if r.env_version else r.env_key
        data_key = None
        if r.data_key:
            data_key = f"{r.data_key}:{r.data_version}" if r.data_version else r.data_key
        self._fleet = self._sdk()
        try:
            self._env = await self._fleet.make(
                env_key=env_key,
                data_key=data_key,
                env_variables=dict(r.env_variables) or None,
                ttl_seconds=self.ttl_seconds,
            )
        except Exception as exc:
            raise EnvironmentError_(
                f"creating Fleet environment {env_key}: {type(exc).__name__}: {exc}"
            ) from None
        self.instance_id = str(self._env.instance_id)
        url = self.mcp_url
        self.connection = McpConnection(url=url, timeout=self.tool_timeout)
        await self.connection.start()
        return await self.connection.list_tools()

    @property
    def mcp_url(self) -> str:
        """The instance's MCP endpoint, as the SDK computes it."""
        mcp = getattr(self._env, "mcp", None)
        url = getattr(mcp, "url", None)
        if isinstance(url, str) and url:
            return url
        return f"{self._env.urls.root}mcp"

    async def list_tools(self) -> list[dict[str, Any]]:
        if self.connection is None:
            raise McpConnectionError("the Fleet environment is not started")
        self.connection = await _reconnected(self.connection, self.tool_timeout)
        return await self.connection.list_tools()

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> McpToolResult:
        if self.connection is None:
            raise McpConnectionError("the Fleet environment is not started")
        self.connection = await _reconnected(self.connection, self.tool_timeout)
        return await self.connection.call_tool(name, arguments)

    async def fork(self) -> ToolEnvironment:
        """The Fleet platform offers no way to copy an instance's state: this refuses."""
        raise EnvironmentForkError(
            f"the Fleet platform environment (env_key {self.record.env_key!r}, instance "
            f"{self.instance_id or 'not started'}) cannot fork: the platform offers no way to "
            "copy an instance's state; branch episodes on the bundled local app "
            "(-H provider=local) instead"
        )

    async def verify(self, code: str, final_answer: str | None) -> VerifierOutcome:
        if self._env is None:
            return VerifierOutcome(success=False, error="not started", where="platform")
        try:
            response = await self._env.verify_raw(code)
        except Exception as exc:
            return VerifierOutcome(
                success=False,
                error=f"platform verifier execution failed: {type(exc).__name__}: {exc}",
                where="platform",
            )
        return VerifierOutcome(
            success=bool(response.success),
            result=response.result,
            error=response.error,
            stdout=str(getattr(response, "stdout", None) or response.message or ""),
            where="platform",
        )

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            if self.connection is not None:
                await self.connection.close()
        finally:
            if self._env is not None:
                try:
                    await self._env.close()
                except Exception:
                    pass  # the TTL reclaims it; closing must not mask the rollout's outcome

    @property
    def closed(self) -> bool:
        """True once :meth:`close` ran."""
        return self._closed

    def describe(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "env_key": self.record.env_key,
            "env_version": self.record.env_version,
            "data_key": self.record.data_key,
            "instance_id": self.instance_id,
            "ttl_seconds": self.ttl_seconds,
        }


EnvironmentFactory = Callable[[FleetRecord], ToolEnvironment]
