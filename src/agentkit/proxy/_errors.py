"""The errors the model proxy answers with itself, in the shape of the agent's protocol.

When the proxy answers in place of the server (a key it did not give, a path
it does not forward, a body it cannot read, an answer it cannot pass on), the
agent gets the error the way its own client reads errors: Anthropic's
``{"type": "error", "error": {"type", "message"}}`` for Messages, OpenAI's
``{"error": {"message", "type", "param", "code"}}`` for everything else; in
a stream, one error event in the same shape.
"""

from __future__ import annotations

from collections.abc import Container
from typing import Any

from agentkit._calls import WireProtocol
from agentkit._sse import json_event

__all__ = ["ANTHROPIC_ERROR_TYPES", "error_body", "protocol_of", "stream_error"]

#: Anthropic's error types by status (https://docs.anthropic.com/en/api/errors): the
#: proxy's own errors, and a translated server's (529 is only ever the server's).
ANTHROPIC_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    529: "overloaded_error",
}
#: OpenAI's error types by status.
_OPENAI = {
    400: "invalid_request_error",
    401: "invalid_request_error",
    403: "permission_error",
    404: "invalid_request_error",
    413: "invalid_request_error",
}


def protocol_of(path: str, headers: Container[str]) -> WireProtocol:
    """The protocol a request the proxy answers itself most likely speaks: ``messages``
    for Anthropic's paths or an ``anthropic-version`` header, else ``chat`` (OpenAI's
    error shape serves chat, completions and Responses alike)."""
    if "anthropic-version" in headers:
        return "messages"
    bare = path.partition("?")[0].rstrip("/")
    return "messages" if bare.endswith(("/messages", "/messages/count_tokens")) else "chat"


def error_body(protocol: WireProtocol, status: int, message: str, code: str) -> dict[str, Any]:
    """The error body a client of ``protocol`` reads for ``status`` (``code``: OpenAI's
    machine-readable code, such as ``path_not_allowed``)."""
    if protocol == "messages":
        kind = ANTHROPIC_ERROR_TYPES.get(status, "api_error")
        return {"type": "error", "error": {"type": kind, "message": message}}
    kind = _OPENAI.get(status, "server_error" if status >= 500 else "invalid_request_error")
    return {"error": {"message": message, "type": kind, "param": None, "code": code}}


def stream_error(protocol: WireProtocol, message: str, code: str) -> bytes:
    """One server-sent event that tells a streaming client of ``protocol`` the answer
    failed: Anthropic's ``event: error``, the Responses API's ``error`` event, or (chat,
    completions) a ``data:`` event carrying an ``error`` object, which OpenAI's clients
    raise as an API error."""
    if protocol == "messages":
        return json_event(error_body("messages", 502, message, code), "error")
    if protocol == "responses":
        body = {"type": "error", "code": code, "message": message, "param": None}
        return json_event(body, "error")
    return json_event(error_body("chat", 502, message, code))
