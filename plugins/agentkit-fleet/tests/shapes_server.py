"""An MCP server whose tools answer in every result shape a Fleet environment can
produce: JSON text, plain text, several parts, ``isError``, images, nothing.

    python shapes_server.py            # streamable HTTP on a free port; prints LISTENING <url>

The Fleet parity tests drive agentkit's step API against it and compare the
observations with what Fleet's SkyRL environment shows for the same results.
``die`` ends the server process in the middle of the call (a tool server that
goes away during an episode).
"""

from __future__ import annotations

import os
import socket
import sys

from mcp.server.mcpserver import MCPServer
from mcp.types import CallToolResult, ImageContent, TextContent

PIXEL = (
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAQAAAC1HAwCAAAAC0lEQVR42mNkYAAAAAYAAjCB0C8AAAAASUVORK5CYII="
)


def _text(*texts: str, error: bool = False) -> CallToolResult:
    return CallToolResult(content=[TextContent(type="text", text=t) for t in texts], is_error=error)


def build() -> MCPServer:
    server = MCPServer("fleet-shapes")

    @server.tool()
    def lookup(query: str, limit: int | None = None) -> CallToolResult:
        """Find things (a JSON object, written compactly)."""
        return _text(f'{{"query": "{query}", "limit": {limit or "null"}, "where": "café"}}')

    @server.tool()
    def rows() -> CallToolResult:
        """A JSON array of rows."""
        return _text('[{"id": 1, "ok": true, "note": null}, {"id": 2, "ok": false}]')

    @server.tool()
    def plain() -> CallToolResult:
        """Text that is not JSON."""
        return _text("just text")

    @server.tool()
    def parts() -> CallToolResult:
        """Two text parts."""
        return _text("first", "second")

    @server.tool()
    def fails() -> CallToolResult:
        """A tool-level error (isError)."""
        return _text("boom: the room is locked", error=True)

    @server.tool()
    def error_text() -> CallToolResult:
        """A normal result whose text starts with 'Error:'."""
        return _text("Error: not allowed today")

    @server.tool()
    def nothing() -> CallToolResult:
        """No content at all."""
        return CallToolResult(content=[])

    @server.tool()
    def number() -> CallToolResult:
        """A bare JSON number."""
        return _text("42")

    @server.tool()
    def empty_object() -> CallToolResult:
        """An empty JSON object."""
        return _text("{}")

    @server.tool()
    def picture_and_text() -> CallToolResult:
        """An image and a caption."""
        return CallToolResult(
            content=[
                ImageContent(type="image", data=PIXEL, mime_type="image/png"),
                TextContent(type="text", text='{"caption": "a pixel"}'),
            ]
        )

    @server.tool()
    def structured() -> CallToolResult:
        """Structured content only."""
        return CallToolResult(content=[], structured_content={"rooms": 3})

    @server.tool()
    def die() -> CallToolResult:
        """End the server process now."""
        os._exit(3)

    return server


def main() -> None:
    import anyio
    import uvicorn

    server = build()
    app = server.streamable_http_app(host="127.0.0.1")
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    port = sock.getsockname()[1]
    userver = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))

    async def run() -> None:
        async def announce() -> None:
            while not userver.started:
                await anyio.sleep(0.02)
            print(f"LISTENING http://127.0.0.1:{port}/mcp", flush=True)

        async with anyio.create_task_group() as tg:
            tg.start_soon(announce)
            await userver.serve(sockets=[sock])
            tg.cancel_scope.cancel()

    anyio.run(run)


if __name__ == "__main__":
    main()
    sys.exit(0)
