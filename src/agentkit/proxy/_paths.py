"""Which requests the proxy forwards with the real key: model calls, and what agents need to start.

A route lends the agent the authority of the real API key, so the proxy
forwards only what an agent needs of it, under the route's base path (the
endpoint's own path, ``/v1`` for ``https://api.host/v1``):

- a model call, ``POST`` to a protocol's endpoint (:attr:`Wire.endpoints`):
  ``…/chat/completions``, ``…/completions``, ``…/responses``, ``…/messages``;
  a ``/v1`` may stand between the base path and the endpoint (Claude Code adds
  ``/v1/messages`` to a base URL it is given without one). A protocol added
  with :func:`~agentkit.proxy.register_wire` and no ``endpoints`` of its own
  is served on every path under the base path its ``matches`` accepts;
- ``POST …/messages/count_tokens`` (Anthropic's token counting) and
  ``GET …/models``, ``GET …/models/{id}`` (a model listing): what agent
  programs may ask before their first call, passed on and not recorded.

Everything else (another method, another path, a path outside the base path)
is refused with a 403 before anything is sent upstream. The path is checked as
it came and never normalised, so what is checked is exactly what goes
upstream: a path must start with ``/`` and hold printable ASCII only, with no
``.`` or ``..`` segment (also percent-encoded, as ``%2e``), no empty segment
(``//``; one trailing ``/`` is allowed), no backslash, no ``;`` or ``#``, and no
percent-encoded ``/``, ``\\``, ``%`` or NUL.
"""

from __future__ import annotations

import re

import attrs

from agentkit.proxy._wire import TRANSLATIONS, Wire, wire_for

__all__ = ["Checked", "PathRefused", "check_request"]

#: Percent-encodings that change what a path's segments are once a server decodes it:
#: ``.`` (a dot segment), ``/``, ``\``, ``%`` (decoded twice) and NUL.
_ENCODED = re.compile(r"%(2e|2f|5c|25|00)", re.IGNORECASE)
#: What a checked path never holds: anything but printable ASCII, a backslash, ``;``, ``#``.
_UNSAFE = re.compile(r"[^!-~]|[\\;#]")


class PathRefused(Exception):
    """A request the proxy does not forward; ``reason`` says why (for the agent and the
    record)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@attrs.frozen
class Checked:
    """A request the proxy forwards: its ``path`` (with its query, exactly as checked
    and as it goes upstream) and ``wire``, the protocol handler of a model call (None:
    a start-up request, passed on and not recorded)."""

    path: str
    wire: type[Wire] | None


def check_request(method: str, raw_path: str, base: str, *, translate: bool = False) -> Checked:
    """Whether the proxy forwards ``method raw_path`` for a route whose base path is
    ``base`` (``/v1``, or ``""``); raises :class:`PathRefused` saying why not.
    ``translate``: a model call's handler is its protocol's translating one, where it
    has one (``ProxySettings.translate_to_chat``)."""
    path, _, _query = raw_path.partition("?")
    _check_form(raw_path, path)
    if path != base and not path.startswith(base + "/"):
        raise PathRefused(f"the path is outside the endpoint's base path {base or '/'!r}")
    rest = path[len(base) :].rstrip("/")
    names = (rest, rest[3:]) if rest.startswith("/v1/") else (rest,)
    if method == "POST":
        kind = wire_for(path)
        if kind is not None and (not kind.endpoints or any(n in kind.endpoints for n in names)):
            return Checked(raw_path, TRANSLATIONS.get(kind, kind) if translate else kind)
        if "/messages/count_tokens" in names:
            return Checked(raw_path, None)
    elif method == "GET" and any(n == "/models" or _model_id(n) for n in names):
        return Checked(raw_path, None)
    return _refuse(method, rest)


def _model_id(name: str) -> bool:
    return name.startswith("/models/") and len(name) > len("/models/")


def _check_form(raw_path: str, path: str) -> None:
    if not path.startswith("/"):
        raise PathRefused("the request target is not a path")
    if _UNSAFE.search(raw_path):
        raise PathRefused(
            "the path holds a character the proxy does not forward (a space, a control or "
            "non-ASCII character, a backslash, ';' or '#')"
        )
    if _ENCODED.search(path):
        raise PathRefused("the path percent-encodes '.', '/', '\\', '%' or NUL")
    segments = path.split("/")[1:]
    if segments and segments[-1] == "":
        segments.pop()  # one trailing slash
    for segment in segments:
        if segment in ("", ".", ".."):
            raise PathRefused("the path has an empty, '.' or '..' segment")


def _refuse(method: str, rest: str) -> Checked:
    raise PathRefused(
        f"the model proxy forwards only model calls (POST …/chat/completions, …/completions, "
        f"…/responses, …/messages), POST …/messages/count_tokens and GET …/models; "
        f"not {method} {rest or '/'} under the endpoint's base path"
    )
