"""How the proxy reads one call of one wire protocol: the base of every protocol handler.

A :class:`Wire` is made for each model call from the agent's JSON body. It
decides what goes upstream (the fields the proxy adds on the agent's behalf,
listed in :attr:`Wire.forwarded`), turns every answer (a whole JSON body, or
each event of a stream) into what the agent gets, and records on the way
what the call returned: the response, usage, finish reason, and the
server's token ids and logprobs (or a note saying why there are none).

Protocols are looked up by the request's path in :data:`WIRES`, first match
wins; :func:`register_wire` puts another in front. A handler that serves one
protocol from another server endpoint (the proxy's translation mode) sets
:attr:`Wire.upstream_path` and :attr:`Wire.upstream_protocol`, writes its own
stream events (:meth:`Wire.stream_event`) and error bodies
(:meth:`Wire.error_answer`); :func:`register_translation` names it for the
protocol it serves, and ``wire_for(path, translate=True)`` finds it.
"""

from __future__ import annotations

import copy
from typing import Any, ClassVar

import attrs

from agentkit._calls import PROTOCOL_NAME_FORM, WireProtocol, is_protocol_name
from agentkit._errors import ValidationError
from agentkit._proxy_settings import ProxySettings
from agentkit._sse import SseEvent, encode_event
from agentkit._usage import Usage
from agentkit.proxy._errors import stream_error

__all__ = [
    "TRANSLATIONS",
    "WIRES",
    "Recorded",
    "Wire",
    "openai_usage",
    "register_translation",
    "register_wire",
    "wire_for",
]


@attrs.define(kw_only=True)
class Recorded:
    """What a call returned, as the proxy read it (the token part of a ModelCall)."""

    response: Any = None
    usage: Usage | None = None
    finish_reason: str | None = None
    prompt_token_ids: list[int] | None = None
    completion_token_ids: list[int] | None = None
    completion_logprobs: list[float] | None = None
    token_note: str | None = None


def openai_usage(value: Any) -> Usage | None:
    """A chat or completions ``usage`` object as :class:`Usage` (None when unreadable)."""
    if not isinstance(value, dict):
        return None
    try:
        return Usage.from_openai(value)
    except ValidationError:
        return None


class Wire:
    """One model call in one protocol (subclasses: chat, completions, responses, messages).

    ``request`` is the agent's body; :attr:`body` what goes upstream (the same
    object until the proxy adds a field with :meth:`ask`, or a translating
    handler replaces it). ``memory`` is the route's scratch space, kept across
    the calls of one rollout attempt (a translating handler keeps there what the
    agent's protocol loses on the way back, such as a tool call's exact
    arguments text).
    """

    #: The protocol's name, under which its calls are recorded (``ModelCall.protocol``):
    #: a built-in one (``chat``, ``responses``, ...) or a new protocol's own (see
    #: :func:`register_wire`).
    protocol: ClassVar[WireProtocol] = "other"
    #: The protocol the server is spoken to in, when the handler translates (None: the
    #: agent's own).
    upstream_protocol: ClassVar[WireProtocol | None] = None
    #: What a call of this protocol notes when the server gave no token ids.
    no_ids_note: ClassVar[str] = "the server returned no token ids"
    #: The paths this protocol's calls go to, under the route's base path (a ``/v1`` may
    #: come between, as in ``/v1/messages``): the only paths the proxy forwards its calls
    #: on (``agentkit.proxy._paths``). Empty: every path under the base path that
    #: :meth:`matches` accepts (a protocol added with :func:`register_wire`).
    endpoints: ClassVar[tuple[str, ...]] = ()

    def __init__(
        self,
        request: dict[str, Any],
        settings: ProxySettings,
        memory: dict[str, Any] | None = None,
    ) -> None:
        self.request = request
        self.body = request
        self.settings = settings
        self.memory: dict[str, Any] = {} if memory is None else memory
        self.forwarded: dict[str, Any] = {}
        #: ``(status, body)``: answer the agent with this error and send nothing upstream
        #: (a request the handler cannot serve).
        self.refusal: tuple[int, Any] | None = None
        self.stream = request.get("stream") is True
        model = request.get("model")
        self.model = model if isinstance(model, str) else None
        #: Another path to send the call to (None: the agent's own), for handlers that
        #: serve one protocol from another endpoint.
        self.upstream_path: str | None = None
        #: Whether the server was asked for token ids (by the agent or the proxy).
        self.ids_asked = False
        self.prepare()
        model_name = settings.model
        if model_name is not None and self.body.get("model", model_name) != model_name:
            self.ask("model", model_name)  # the policy's model, in place of the agent's

    @classmethod
    def matches(cls, path: str) -> bool:
        """Whether a request to ``path`` (no query) is a call of this protocol."""
        return False

    def prepare(self) -> None:
        """Add what the run asks for to :attr:`body` (with :meth:`ask`)."""

    def upstream_path_for(self, path: str) -> str:
        """Where the call goes on the server, for the agent's ``path`` (with its query):
        :attr:`upstream_path` when set, else the agent's own."""
        return path if self.upstream_path is None else self.upstream_path

    def ask(self, name: str, value: Any) -> None:
        """Send ``name: value`` upstream in place of what the agent sent (recorded in
        :attr:`forwarded`); the agent's ``request`` is left as it was."""
        if self.body is self.request:
            self.body = copy.copy(self.request)
        self.body[name] = value
        self.forwarded[name] = value

    def ask_cache_salt(self) -> None:
        """Send the run's ``cache_salt`` (vLLM's prefix-cache salt) when it gives one and
        the agent sent none."""
        if self.settings.cache_salt is not None and "cache_salt" not in self.request:
            self.ask("cache_salt", self.settings.cache_salt)

    @property
    def rewrites(self) -> bool:
        """Whether answers must change before the agent gets them (the proxy asked for
        fields the agent did not)."""
        return bool(self.forwarded)

    def answer(self, data: Any) -> Any:
        """A whole JSON answer: record it, return what the agent gets."""
        return data

    def event(self, name: str | None, data: Any) -> Any:
        """One streamed event's JSON: record it, return what the agent gets (None: drop
        the event)."""
        return data

    def stream_event(self, event: SseEvent, data: Any) -> bytes:
        """The bytes the agent gets for one streamed event whose JSON is ``data`` (when
        the answer is rewritten): :meth:`event`'s view in the event's place."""
        view = self.event(event.name, data)
        if view is None:
            return b""
        return encode_event(event, view)

    def stream_other(self, event: SseEvent) -> bytes:
        """The bytes the agent gets for an event that is not JSON (``[DONE]``): as it came."""
        return event.raw

    def stream_end(self) -> bytes:
        """What the agent gets after the stream's last event (nothing)."""
        return b""

    def stream_error(self, message: str, code: str = "model_bad_response") -> bytes:
        """The event that ends a stream the proxy cuts off (the server sent what it cannot
        pass on): an error event in the agent's protocol's shape."""
        return stream_error(self.protocol, message, code)

    def error_answer(self, status: int, data: Any) -> Any:
        """The error body the agent gets for the server's ``data`` (as it came)."""
        return data

    def recorded(self) -> Recorded:
        """What the call returned, once its answer has been read."""
        return Recorded()

    def token_note(self, recorded: Recorded) -> str | None:
        """Why ``recorded`` has no token ids or logprobs (None when it has both)."""
        if recorded.prompt_token_ids is not None and recorded.completion_token_ids is not None:
            if recorded.completion_logprobs is None:
                return "the server returned token ids but no logprobs"
            return None
        if not self.ids_asked:
            return "token ids were not asked for (the run's token_ids option is off)"
        return self.no_ids_note


#: The protocol handlers, tried in order on a request's path.
WIRES: list[type[Wire]] = []

#: The handler that serves a protocol from another endpoint in translation mode, by
#: the protocol's own handler.
TRANSLATIONS: dict[type[Wire], type[Wire]] = {}


def register_translation(wire: type[Wire], translator: type[Wire]) -> None:
    """Serve ``wire``'s calls with ``translator`` when the run translates
    (``ProxySettings.translate_to_chat``). Raises :class:`~agentkit.ValidationError`
    when the translator's ``protocol`` or ``upstream_protocol`` is no protocol's name."""
    _check_protocols(translator)
    TRANSLATIONS[wire] = translator


def register_wire(wire: type[Wire], *, first: bool = True) -> None:
    """Serve a protocol with ``wire`` (tried before the others unless ``first=False``).

    Its calls are recorded under ``wire.protocol``: a built-in protocol's name, or one of
    its own (a lowercase letter, then up to 63 lowercase letters, digits, ``_``, ``-``
    or ``.``), which the run directory's calls files keep and every reader of them
    (:mod:`agentkit.runs`, ``agentkit show``, training export) reads back, in any
    process, whether or not the handler is registered there. Raises
    :class:`~agentkit.ValidationError` for a ``protocol`` (or ``upstream_protocol``)
    that is no protocol's name.
    """
    _check_protocols(wire)
    if wire in WIRES:
        WIRES.remove(wire)
    if first:
        WIRES.insert(0, wire)
    else:
        WIRES.append(wire)


def _check_protocols(wire: type[Wire]) -> None:
    for name in ("protocol", "upstream_protocol"):
        value = getattr(wire, name)
        if (value is not None or name == "protocol") and not is_protocol_name(value):
            raise ValidationError(
                f"{wire.__qualname__}.{name}", f"expected {PROTOCOL_NAME_FORM}, got {value!r}"
            )


def wire_for(path: str, *, translate: bool = False) -> type[Wire] | None:
    """The handler of a request to ``path`` (its query cut off), or None: not a model call.
    ``translate``: the protocol's translating handler, where it has one."""
    path = path.partition("?")[0].rstrip("/")
    for wire in WIRES:
        if wire.matches(path):
            return TRANSLATIONS.get(wire, wire) if translate else wire
    return None
