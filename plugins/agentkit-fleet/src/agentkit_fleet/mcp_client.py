"""An MCP client connection that any task of the event loop may use.

The ``mcp`` client is an async context manager whose task groups must be
entered and left by the same task. A step API is called from whatever task
the training stack uses, so the connection lives in one background task
that owns the context and serves requests from a queue.

Works with ``mcp`` 2.0.0 (pinned by verifiers 0.4.0) and newer 2.x releases:
only ``mcp.client.Client``, ``mcp.client.stdio`` and the wire (camelCase)
JSON of results are used.
"""

from __future__ import annotations

import asyncio
import contextlib
import tempfile
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from agentkit.validation import loads_bounded

__all__ = [
    "EMPTY_RESULT_TEXT",
    "McpConnection",
    "McpConnectionError",
    "McpToolCallError",
    "McpToolResult",
    "tool_result_value",
]


class McpConnectionError(Exception):
    """The MCP server could not be reached, or went away."""


class McpToolCallError(Exception):
    """The server answered a tool call with a protocol error (not a tool-level ``isError``)."""


#: What Fleet's MCP client (``mcp`` 1.x) gives for a result with no content at all:
#: the result object's ``str()``. Reproduced literally; see the parity table.
EMPTY_RESULT_TEXT = "meta=None content=[] structuredContent=None isError=False"


def tool_result_value(result: Mapping[str, Any]) -> Any:
    """A tool result (wire JSON) as OpenEnv's Fleet client reads it for the policy.

    - ``isError``: ``{"error": <its first text part>}`` (``"Tool execution
      failed"`` without text);
    - one text part: its JSON value when it is JSON, else the text;
    - several text parts: the list of texts (other parts are skipped);
    - no text part: ``structuredContent`` when present and not empty; for no
      content at all :data:`EMPTY_RESULT_TEXT`; for only non-text parts (an
      image), the parts as a list of their wire JSON (Fleet's client shows the
      ``mcp`` object's ``repr`` there, which this does not reproduce).
    """
    content = [c for c in result.get("content") or [] if isinstance(c, Mapping)]
    texts = [str(c.get("text", "")) for c in content if c.get("type") == "text"]
    if result.get("isError"):
        return {"error": texts[0] if texts else "Tool execution failed"}
    if len(texts) == 1:
        try:  # JSON nested too deep is kept as the text
            return loads_bounded(texts[0])
        except ValueError:
            return texts[0]
    if texts:
        return texts
    structured = result.get("structuredContent")
    if structured:
        return structured
    if not content:
        return EMPTY_RESULT_TEXT
    return [dict(c) for c in content]


class McpToolResult:
    """A tool call's outcome: the wire JSON, the value the policy sees, its text."""

    def __init__(self, raw: dict[str, Any]) -> None:
        self.raw = raw
        self.is_error = bool(raw.get("isError"))
        self.value = tool_result_value(raw)

    @property
    def text(self) -> str:
        """The text parts, joined (for events and logs)."""
        parts = [
            str(c.get("text", ""))
            for c in self.raw.get("content") or []
            if isinstance(c, Mapping) and c.get("type") == "text"
        ]
        return "\n".join(parts)


_Job = tuple[Callable[[Any], Awaitable[Any]], "asyncio.Future[Any]"]


class McpConnection:
    """One MCP session, by URL (streamable HTTP) or by command (stdio)."""

    def __init__(
        self,
        *,
        url: str | None = None,
        command: Sequence[str] | None = None,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        timeout: float = 60.0,
    ) -> None:
        if (url is None) == (command is None):
            raise ValueError("give exactly one of url= or command=")
        self.url = url
        self.command = list(command) if command is not None else None
        self.env = dict(env or {})
        self.cwd = cwd
        self.timeout = timeout
        self._queue: asyncio.Queue[_Job | None] = asyncio.Queue()
        self._task: asyncio.Task[None] | None = None
        self._ready: asyncio.Future[None] | None = None
        self._dead: BaseException | None = None

    @property
    def target(self) -> str:
        """What this connects to, for messages (never secrets: no env values)."""
        return self.url or " ".join(self.command or [])

    def _client(self) -> Any:
        from mcp.client import Client

        if self.url is not None:
            return Client(self.url, read_timeout_seconds=self.timeout)
        from mcp.client.stdio import StdioServerParameters, stdio_client

        assert self.command is not None
        params = StdioServerParameters(
            command=self.command[0], args=self.command[1:], env=self.env or None, cwd=self.cwd
        )
        # the server's stderr, kept so that a failed start can say why
        errlog = tempfile.TemporaryFile(mode="w+", encoding="utf-8", errors="replace")  # noqa: SIM115
        self._errlog = errlog
        return Client(stdio_client(params, errlog=errlog), read_timeout_seconds=self.timeout)

    async def _serve(self) -> None:
        assert self._ready is not None
        try:
            async with self._client() as client:
                self._ready.set_result(None)
                while True:
                    job = await self._queue.get()
                    if job is None:
                        return
                    fn, fut = job
                    try:
                        value = await fn(client)
                    except Exception as exc:
                        if not fut.done():
                            fut.set_exception(exc)
                    except BaseException:
                        # the client's own task group was cancelled: the connection is gone
                        if not fut.done():
                            fut.set_exception(
                                McpConnectionError(f"MCP server {self.target} went away")
                            )
                        raise
                    else:
                        if not fut.done():
                            fut.set_result(value)
        except BaseException as exc:
            self._dead = exc
            if not self._ready.done():
                self._ready.set_exception(exc)
            if not isinstance(exc, Exception):
                raise
        finally:
            self._fail_pending()

    def _fail_pending(self) -> None:
        while not self._queue.empty():
            job = self._queue.get_nowait()
            if job is not None and not job[1].done():
                job[1].set_exception(McpConnectionError(f"MCP server {self.target} went away"))

    async def start(self) -> None:
        """Connect (and, for a command, start the server)."""
        loop = asyncio.get_running_loop()
        self._ready = loop.create_future()
        self._task = loop.create_task(self._serve(), name=f"mcp:{self.target}")
        try:
            await asyncio.wait_for(asyncio.shield(self._ready), self.timeout)
        except Exception as exc:
            stderr = self._stderr_tail()
            await self.close()
            detail = f"; its stderr ends with: {stderr}" if stderr else ""
            raise McpConnectionError(
                f"could not connect to MCP server {self.target}: {_describe(exc)}{detail}"
            ) from None

    def _stderr_tail(self, limit: int = 1500) -> str:
        errlog = getattr(self, "_errlog", None)
        if errlog is None or errlog.closed:
            return ""
        try:
            errlog.flush()
            errlog.seek(0)
            return str(errlog.read())[-limit:].strip()
        except (OSError, ValueError):
            return ""

    async def _submit(self, fn: Callable[[Any], Awaitable[Any]]) -> Any:
        if self._task is None or self._task.done():
            reason = _describe(self._dead) if self._dead else "not connected"
            raise McpConnectionError(f"MCP server {self.target} is not available: {reason}")
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        await self._queue.put((fn, fut))
        done, _ = await asyncio.wait(
            {fut, self._task}, timeout=self.timeout + 5, return_when=asyncio.FIRST_COMPLETED
        )
        if fut in done:
            return fut.result()
        if not done:
            raise McpConnectionError(f"MCP server {self.target} did not answer in time")
        reason = _describe(self._dead) if self._dead else "connection closed"
        raise McpConnectionError(f"MCP server {self.target} went away: {reason}")

    async def list_tools(self) -> list[dict[str, Any]]:
        """Every tool (all pages), as wire JSON (``name``, ``description``, ``inputSchema``)."""

        async def fetch(client: Any) -> list[dict[str, Any]]:
            tools: list[dict[str, Any]] = []
            cursor = None
            while True:
                page = await client.list_tools(cursor=cursor)
                data = page.model_dump(by_alias=True, exclude_none=True, mode="json")
                tools.extend(data.get("tools", []))
                cursor = data.get("nextCursor")
                if not cursor:
                    return tools

        try:
            result: list[dict[str, Any]] = await self._submit(fetch)
        except McpConnectionError:
            raise
        except Exception as exc:
            raise McpConnectionError(f"listing tools of {self.target}: {_describe(exc)}") from None
        return result

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> McpToolResult:
        """Call a tool. A tool-level error is a result; a broken connection raises."""
        from mcp.shared.exceptions import MCPError

        async def call(client: Any) -> McpToolResult:
            result = await client.call_tool(name, arguments)
            data = result.model_dump(by_alias=True, exclude_none=True, mode="json")
            return McpToolResult(data)

        try:
            value: McpToolResult = await self._submit(call)
        except McpConnectionError:
            raise
        except MCPError as exc:
            if exc.code == -32000 or self._task is None or self._task.done():
                raise McpConnectionError(
                    f"MCP server {self.target} went away: {exc.message}"
                ) from None
            raise McpToolCallError(exc.message) from None
        except Exception as exc:
            if self._task is None or self._task.done():
                raise McpConnectionError(
                    f"MCP server {self.target} went away: {_describe(exc)}"
                ) from None
            raise McpConnectionError(f"calling {name} on {self.target}: {_describe(exc)}") from None
        return value

    @property
    def alive(self) -> bool:
        """True while the connection serves requests (started and not gone)."""
        return self._task is not None and not self._task.done()

    async def close(self) -> None:
        """Disconnect (a stdio server is stopped). Safe to call twice."""
        task = self._task
        if task is None:
            return
        if not task.done():
            await self._queue.put(None)
            try:
                await asyncio.wait_for(asyncio.shield(task), 10)
            except (TimeoutError, Exception):
                task.cancel()
                with contextlib.suppress(BaseException):
                    await task
        self._fail_pending()
        errlog = getattr(self, "_errlog", None)
        if errlog is not None:
            errlog.close()


def _describe(exc: BaseException | None) -> str:
    if exc is None:
        return "unknown error"
    if isinstance(exc, BaseExceptionGroup):
        inner = [e for e in exc.exceptions]
        if inner:
            return _describe(inner[0])
    text = str(exc) or type(exc).__name__
    return f"{type(exc).__name__}: {text}" if str(exc) else text
