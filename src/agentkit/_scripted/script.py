"""The scripted model server's script: rules matched against each request.

A script is stateless on purpose: a reply is chosen from the request alone
(its last user message, its turn number, whether it follows a tool result,
its model), so concurrent rollouts against one server never interfere. The
only state is the optional ``times`` counter of a rule ("fail the first N
matching requests"), kept per script and safe across threads.

The JSON format (every key optional)::

    {
      "models": ["scripted-model"],
      "rules": [
        {"match": {"last_user_contains": "weather", "turn": 0},
         "reply": {"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}]}},
        {"match": {"after_tool": true}, "reply": {"content": "It is sunny."}},
        {"match": {"model": "flaky"}, "times": 2, "reply": {"fail": "rate_limit"}}
      ],
      "default": {"content": "ok"}
    }

See ``docs/testing.md`` for every field.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import attrs

from agentkit._convert import structure
from agentkit._errors import ValidationError

__all__ = [
    "FAILURES",
    "Api",
    "Match",
    "Reply",
    "RequestView",
    "Rule",
    "Script",
    "ToolCallSpec",
    "UsageSpec",
    "load_script",
    "message_text",
]

#: The wire protocols the server speaks: OpenAI chat completions (``chat``),
#: Anthropic Messages (``messages``), the OpenAI Responses API (``responses``).
Api = Literal["chat", "messages", "responses"]

Failure = Literal[
    "rate_limit", "server_error", "hang", "invalid_json", "broken_stream", "disconnect"
]
#: The failures a reply can inject instead of answering.
FAILURES: tuple[str, ...] = (
    "rate_limit",
    "server_error",
    "hang",
    "invalid_json",
    "broken_stream",
    "disconnect",
)


@attrs.frozen(kw_only=True)
class ToolCallSpec:
    """One tool call in a reply; ``arguments`` is an object (sent as JSON text) or raw text."""

    name: str
    arguments: dict[str, Any] | str = attrs.field(factory=dict)
    id: str | None = None


@attrs.frozen(kw_only=True)
class UsageSpec:
    """Token counts reported for a reply; unset counts are estimated from the text."""

    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cached_tokens: int = 0
    reasoning_tokens: int | None = None
    #: Prompt tokens written to the cache (Anthropic's ``cache_creation_input_tokens``).
    cache_creation_tokens: int = 0


@attrs.frozen(kw_only=True)
class Reply:
    """What the server answers: a message, or an injected failure.

    ``content`` and tool-call ``arguments`` text may use the placeholders
    ``{{last_user}}``, ``{{turn}}`` and ``{{model}}``.
    """

    content: str | None = None
    reasoning: str | None = None
    tool_calls: list[ToolCallSpec] = attrs.field(factory=list)
    finish_reason: str | None = None
    usage: UsageSpec | None = None
    latency: float = 0.0
    chunk_delay: float = 0.0
    chunk_size: int = 8
    fail: Failure | None = None
    status: int | None = None
    message: str | None = None
    #: Seconds sent as the ``retry-after`` header of an error reply (429s send 0 by default).
    retry_after: float | None = None
    #: Return vLLM's token ids even when the request does not ask for them: chat
    #: completions' ``prompt_token_ids`` and ``choices[].token_ids``
    #: (``return_token_ids``), the Responses API's ``input_messages`` and
    #: ``output_messages`` (``enable_response_messages``).
    token_ids: bool = False
    #: Chat completions: the logprob of each completion token (cycled when shorter than
    #: the completion), used when the request asks ``logprobs: true``; default -0.1, -0.2...
    logprobs: list[float] | None = None
    #: Sent as the whole response body instead of a rendered completion (as the single
    #: event of a stream): for replies of the wrong shape.
    body: dict[str, Any] | None = None
    #: Text sent as the whole response body exactly as written (as the single event's
    #: ``data:`` of a stream; with ``status``, as the error's body): bodies a JSON object
    #: in a script cannot hold, such as one nested 200,000 levels deep, or a particular
    #: malformed JSON text.
    raw_body: str | None = None
    #: How the prompt token ids of the request this reply answers show the earlier
    #: assistant turns' tool calls: ``as_sampled`` (each call's arguments text as a
    #: piece of its own, as the completion that made it was: the prompt extends the
    #: earlier call's prompt and completion) or ``json`` (the calls as JSON after the
    #: turn's text, as a template that shows a tool call otherwise than it was
    #: sampled: the prompt does not extend that call's tokens, a prefix break).
    tool_calls_in_prompt: Literal["as_sampled", "json"] = "as_sampled"
    #: Chat completions: the name the ``reasoning`` goes by in the message and in each
    #: stream delta: ``reasoning`` (current vLLM) or ``reasoning_content`` (vLLM before
    #: 2026, SGLang, DeepSeek's API).
    reasoning_field: Literal["reasoning", "reasoning_content"] = "reasoning"
    #: Streamed chat completions: which of the stream's chunks that carry completion
    #: tokens (numbered from 0) go without their ``token_ids`` and ``logprobs``, their
    #: text sent all the same: the gap vLLM's tool parsers left before late 2025
    #: (vllm-project/vllm#29074), which ``usage.completion_tokens`` still counts. A
    #: whole completion's ids are cut the same way, by the same pieces.
    drop_token_chunks: list[int] = attrs.field(factory=list)

    def __attrs_post_init__(self) -> None:
        if self.body is not None and self.raw_body is not None:
            raise ValidationError("raw_body", "give body or raw_body, not both")
        if self.status is not None and not 400 <= self.status <= 599:
            raise ValidationError(
                "status", f"expected an HTTP error status 400-599, got {self.status}"
            )
        if self.latency < 0 or self.chunk_delay < 0:
            raise ValidationError("latency", "latency and chunk_delay must be >= 0 seconds")
        if self.chunk_size < 1:
            raise ValidationError("chunk_size", f"expected at least 1, got {self.chunk_size}")
        if any(n < 0 for n in self.drop_token_chunks):
            raise ValidationError(
                "drop_token_chunks", f"expected chunk numbers >= 0, got {self.drop_token_chunks}"
            )
        if self.logprobs is not None and (
            not self.logprobs or any(not p <= 0 for p in self.logprobs)
        ):
            raise ValidationError("logprobs", "expected a non-empty list of numbers <= 0")


@attrs.frozen(kw_only=True)
class Match:
    """Conditions on a request; all given ones must hold (an empty match always holds)."""

    last_user_contains: str | None = None
    last_user_regex: str | None = None
    any_message_contains: str | None = None
    turn: int | list[int] | None = None
    after_tool: bool | None = None
    model: str | None = None
    stream: bool | None = None
    has_tools: bool | None = None
    #: The request's wire protocol: ``chat``, ``messages`` (Anthropic) or ``responses``.
    api: Api | None = None

    def __attrs_post_init__(self) -> None:
        if self.last_user_regex is not None:
            try:
                re.compile(self.last_user_regex)
            except re.error as exc:
                raise ValidationError("last_user_regex", f"invalid regex: {exc}") from None


@attrs.frozen(kw_only=True)
class Rule:
    """``reply`` for requests that satisfy ``match``; with ``times``, only the first N of them."""

    match: Match = attrs.field(factory=Match)
    reply: Reply = attrs.field(factory=Reply)
    times: int | None = None
    name: str | None = None


@attrs.frozen(kw_only=True)
class RequestView:
    """What rules look at in a request, whichever protocol it came in.

    ``messages`` are chat-completions shaped whatever the protocol: Anthropic's
    ``system`` and the Responses API's ``instructions`` become a system message,
    tool results become ``role: tool`` messages, and an assistant's tool calls
    are ``tool_calls``.
    """

    model: str
    messages: list[dict[str, Any]]
    stream: bool
    has_tools: bool
    api: Api = "chat"

    @classmethod
    def from_body(cls, body: Mapping[str, Any], api: Api = "chat") -> RequestView:
        """Read a parsed request body (missing or odd fields become neutral values)."""
        if api == "messages":
            messages = _messages_api_history(body)
        elif api == "responses":
            messages = _responses_api_history(body)
        else:
            raw = body.get("messages")
            messages = [m for m in raw if isinstance(m, dict)] if isinstance(raw, list) else []
        return cls(
            model=str(body.get("model") or ""),
            messages=messages,
            stream=bool(body.get("stream")),
            has_tools=bool(body.get("tools")),
            api=api,
        )

    @property
    def turn(self) -> int:
        """How many assistant messages the request already contains."""
        return sum(1 for m in self.messages if m.get("role") == "assistant")

    @property
    def last_user(self) -> str:
        """The text of the last user message ("" when there is none)."""
        for message in reversed(self.messages):
            if message.get("role") == "user":
                return message_text(message)
        return ""

    @property
    def after_tool(self) -> bool:
        """True when the last message is a tool result."""
        return bool(self.messages) and self.messages[-1].get("role") == "tool"


def message_text(message: Mapping[str, Any]) -> str:
    """The text of a chat message whose content is a string or a list of parts."""
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return ""


def _text_parts(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            str(part.get("text", ""))
            for part in content
            if isinstance(part, dict) and isinstance(part.get("text"), str)
        )
    return ""


def _messages_api_history(body: Mapping[str, Any]) -> list[dict[str, Any]]:
    """An Anthropic Messages request's ``system`` and ``messages`` as chat messages."""
    out: list[dict[str, Any]] = []
    system = _text_parts(body.get("system"))
    if system:
        out.append({"role": "system", "content": system})
    raw = body.get("messages")
    for message in raw if isinstance(raw, list) else []:
        if not isinstance(message, dict):
            continue
        role, content = message.get("role"), message.get("content")
        blocks = content if isinstance(content, list) else [{"type": "text", "text": content}]
        blocks = [b for b in blocks if isinstance(b, dict)]
        if role == "assistant":
            calls = [
                {
                    "id": str(b.get("id", "")),
                    "type": "function",
                    "function": {
                        "name": str(b.get("name", "")),
                        "arguments": json.dumps(b.get("input")),
                    },
                }
                for b in blocks
                if b.get("type") == "tool_use"
            ]
            entry: dict[str, Any] = {"role": "assistant", "content": _text_parts(blocks)}
            if calls:
                entry["tool_calls"] = calls
            out.append(entry)
            continue
        for block in blocks:
            if block.get("type") == "tool_result":
                result = block.get("content")
                out.append(
                    {
                        "role": "tool",
                        "tool_call_id": str(block.get("tool_use_id", "")),
                        "content": result if isinstance(result, str) else _text_parts(result),
                    }
                )
        texts = [b for b in blocks if b.get("type") == "text"]
        if texts:
            out.append({"role": str(role or "user"), "content": _text_parts(texts)})
    return out


_RESPONSES_OUTPUT_ITEMS = frozenset(
    {"function_call", "reasoning", "custom_tool_call", "local_shell_call", "web_search_call"}
)
_RESPONSES_TOOL_OUTPUTS = frozenset(
    {"function_call_output", "custom_tool_call_output", "local_shell_call_output"}
)


def _responses_api_history(body: Mapping[str, Any]) -> list[dict[str, Any]]:
    """A Responses API request's ``instructions`` and ``input`` items as chat messages.

    Consecutive output items (an assistant message, function calls, reasoning)
    make one assistant message, so ``turn`` counts model replies as in chat.
    """
    out: list[dict[str, Any]] = []
    instructions = _text_parts(body.get("instructions"))
    if instructions:
        out.append({"role": "system", "content": instructions})
    raw = body.get("input")
    if isinstance(raw, str):
        return [*out, {"role": "user", "content": raw}]
    assistant: dict[str, Any] | None = None
    for item in raw if isinstance(raw, list) else []:
        if not isinstance(item, dict):
            continue
        kind = item.get("type", "message")
        role = item.get("role")
        if kind in _RESPONSES_OUTPUT_ITEMS or (kind == "message" and role == "assistant"):
            if assistant is None:
                assistant = {"role": "assistant", "content": ""}
                out.append(assistant)
            if kind == "message":
                assistant["content"] += _text_parts(item.get("content"))
            elif kind in ("function_call", "custom_tool_call"):
                args = item.get("arguments", item.get("input", ""))
                assistant.setdefault("tool_calls", []).append(
                    {
                        "id": str(item.get("call_id", "")),
                        "type": "function",
                        "function": {"name": str(item.get("name", "")), "arguments": str(args)},
                    }
                )
            continue
        assistant = None
        if kind in _RESPONSES_TOOL_OUTPUTS:
            output = item.get("output")
            out.append(
                {
                    "role": "tool",
                    "tool_call_id": str(item.get("call_id", "")),
                    "content": output if isinstance(output, str) else _text_parts(output),
                }
            )
        elif kind == "message":
            role = "system" if role == "developer" else str(role or "user")
            out.append({"role": role, "content": _text_parts(item.get("content"))})
    return out


def _matches(match: Match, request: RequestView) -> bool:
    if match.api is not None and request.api != match.api:
        return False
    if match.model is not None and request.model != match.model:
        return False
    if match.stream is not None and request.stream != match.stream:
        return False
    if match.has_tools is not None and request.has_tools != match.has_tools:
        return False
    if match.after_tool is not None and request.after_tool != match.after_tool:
        return False
    if match.turn is not None:
        turns = match.turn if isinstance(match.turn, list) else [match.turn]
        if request.turn not in turns:
            return False
    if match.last_user_contains is not None and match.last_user_contains not in request.last_user:
        return False
    if match.last_user_regex is not None and not re.search(
        match.last_user_regex, request.last_user
    ):
        return False
    needle = match.any_message_contains
    return needle is None or any(needle in message_text(m) for m in request.messages)


class Script:
    """Rules tried in order (first match wins), then the default reply.

    >>> Script.from_json({"default": {"content": "hi"}}).choose(
    ...     RequestView(model="m", messages=[], stream=False, has_tools=False)
    ... )[0].content
    'hi'
    """

    def __init__(
        self,
        rules: list[Rule] | None = None,
        default: Reply | None = None,
        models: list[str] | None = None,
    ) -> None:
        self.rules = list(rules or [])
        self.default = default if default is not None else Reply(content="ok")
        self.models = list(models or ["scripted-model"])
        self._used = [0] * len(self.rules)
        self._lock = threading.Lock()

    @classmethod
    def from_json(cls, data: Any, *, source: str | None = None) -> Script:
        """Build a script from parsed JSON, strictly (unknown keys are errors naming their path)."""
        parsed = structure(data, _ScriptFile, source=source or "model script")
        return cls(parsed.rules, parsed.default, parsed.models)

    def choose(self, request: RequestView) -> tuple[Reply, int | None]:
        """The reply for ``request`` and the index of the rule that gave it (None: default)."""
        for index, rule in enumerate(self.rules):
            if not _matches(rule.match, request):
                continue
            if rule.times is not None:
                with self._lock:
                    if self._used[index] >= rule.times:
                        continue
                    self._used[index] += 1
            return rule.reply, index
        return self.default, None


@attrs.frozen(kw_only=True)
class _ScriptFile:
    rules: list[Rule] = attrs.field(factory=list)
    default: Reply | None = None
    models: list[str] | None = None


def load_script(script: Script | Mapping[str, Any] | str | Path | None) -> Script:
    """Turn what users pass into a :class:`Script`.

    ``None`` answers "ok" to everything; a :class:`~pathlib.Path` (or a string
    ending in ``.json`` that names a file) is read as a JSON script; any other
    string is the text of every reply; a mapping is the parsed JSON format.
    """
    if script is None:
        return Script()
    if isinstance(script, Script):
        return script
    if isinstance(script, str) and not (script.endswith(".json") and Path(script).is_file()):
        return Script(default=Reply(content=script))
    if isinstance(script, (str, Path)):
        path = Path(script)
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except OSError as exc:
            raise ValidationError(
                "", f"cannot read model script: {exc.strerror}", str(path)
            ) from None
        except json.JSONDecodeError as exc:
            raise ValidationError(
                f"line {exc.lineno}", f"invalid JSON: {exc.msg}", str(path)
            ) from None
        return Script.from_json(data, source=str(path))
    if isinstance(script, Mapping):
        return Script.from_json(dict(script))
    raise ValidationError(
        "",
        f"expected a Script, a mapping, a path or a string, got {type(script).__name__}",
        "model script",
    )
