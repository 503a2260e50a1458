"""Reading ``claude -p --output-format stream-json --verbose --include-partial-messages``:
one JSON object per line, turned into agentkit events, a transcript, usage and a status.

The lines of Claude Code 2.1 (each with ``session_id``; ``parent_tool_use_id``
is set on a subagent's lines):

- ``system`` with ``subtype``: ``init`` (``model``, ``tools``,
  ``claude_code_version``), ``api_retry`` (``attempt``, ``max_retries``,
  ``retry_delay_ms``, ``error_status``, ``error``), ``status``,
  ``thinking_tokens`` and others;
- ``stream_event`` with an Anthropic stream ``event``: ``message_start``
  (a model call began: its ``message.id`` and input usage), content block
  deltas (skipped here), ``message_delta`` (``stop_reason`` and the call's
  whole ``usage``), ``message_stop``;
- ``assistant``: one finished content block of a model call (``message.id``,
  ``message.content[0]``: ``thinking``, ``text`` or ``tool_use``). An API
  error arrives as a synthetic assistant message (``model: <synthetic>``,
  ``is_api_error_message``, ``api_error_status``, ``error``);
- ``user``: ``tool_result`` blocks (``tool_use_id``, ``content``,
  ``is_error``) answering the tool calls;
- ``result``: the end (``subtype``: ``success`` or ``error_max_turns``...,
  ``is_error``, ``result`` text, ``num_turns``, ``usage``, ``modelUsage``
  per model, ``total_cost_usd``, ``api_error_status``, ``terminal_reason``,
  ``errors``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

import attrs

from agentkit import EventRecorder, Usage
from agentkit.programs import ModelCall, final_text, http_error_kind, json_line, transcript
from agentkit.programs import json_int as _int
from agentkit.programs import json_object as _obj

__all__ = ["ClaudeStream", "classify_error"]

_EXIT = re.compile(r"Exit code (\d+)")
_CONNECTION = re.compile(
    r"connection error|connection refused|econnrefused|econnreset|fetch failed|"
    r"socket hang up|network error|timed out|timeout|enotfound",
    re.IGNORECASE,
)


def classify_error(status: Any, kind: Any, message: str) -> str:
    """The ``error_kind`` of a Claude Code failure: from the HTTP status it reports
    (``api_error_status``), else its error name, else the message."""
    if isinstance(status, int) and not isinstance(status, bool) and status >= 400:
        return http_error_kind(status)
    name = str(kind or "")
    if name == "rate_limit":
        return "model_rate_limit"
    if name in ("server_error", "overloaded"):
        return "model_server_error"
    if name in ("authentication_failed", "billing_error"):
        return "model_auth"
    if name == "invalid_request":
        return "model_request_error"
    if _CONNECTION.search(message):
        return "model_connection"
    return "agent_error"


def _tool_output(content: Any) -> str:
    """A tool result's content as text (text blocks joined; other blocks as JSON)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for block in content:
            if isinstance(block, dict) and block.get("type") == "text":
                parts.append(str(block.get("text") or ""))
            else:
                parts.append(json.dumps(block, ensure_ascii=False))
        return "".join(parts)
    return "" if content is None else json.dumps(content, ensure_ascii=False)


def _usage_of(start: dict[str, Any], end: dict[str, Any] | None) -> Usage:
    """One model call's usage: what its end (``message_delta``) reports, completed by
    its start (``message_start``); input counts cache reads and writes."""
    merged = {**start, **{k: v for k, v in (end or {}).items() if v is not None}}
    return Usage(
        input_tokens=_int(merged.get("input_tokens"))
        + _int(merged.get("cache_read_input_tokens"))
        + _int(merged.get("cache_creation_input_tokens")),
        output_tokens=_int(merged.get("output_tokens")),
        cached_tokens=_int(merged.get("cache_read_input_tokens")),
        requests=1,
    )


@attrs.define
class _Call(ModelCall):
    """One model call (one API message) of the main agent, with its usage."""

    start_usage: dict[str, Any] = attrs.field(factory=dict)
    end_usage: dict[str, Any] | None = None


class ClaudeStream:
    """Feeds Claude Code's stream-json lines to an :class:`~agentkit.EventRecorder`
    and keeps the transcript, usage and outcome.

    ``redact`` is applied to every string that leaves this class.
    """

    def __init__(
        self, recorder: EventRecorder, prompt: str, redact: Callable[[str], str] | None = None
    ) -> None:
        self.recorder = recorder
        self.redact: Callable[[str], str] = redact or (lambda text: text)
        self.prompt = prompt
        self.session_id: str | None = None
        self.version: str | None = None
        self.calls: list[_Call] = []
        self._by_id: dict[str, _Call] = {}
        self._tool_names: dict[str, str] = {}
        self._tool_call: dict[str, _Call] = {}
        self.subagent_calls = 0
        self.tool_calls = 0
        self.tool_errors = 0
        self.retries = 0
        self.api_error: dict[str, Any] | None = None
        self.result: dict[str, Any] | None = None
        self.unparsed: list[str] = []
        #: Set by the harness when a token, cost or message limit stopped Claude Code.
        self.limit_hit: tuple[str, str] | None = None

    # -- feeding ------------------------------------------------------------

    async def feed(self, line: str) -> None:
        """Handle one line of Claude Code's standard output."""
        obj = await json_line(
            line, self.recorder, source="claude-code", redact=self.redact, unparsed=self.unparsed
        )
        if obj is None:
            return
        if isinstance(obj.get("session_id"), str):
            self.session_id = obj["session_id"]
        kind = obj["type"]
        if kind == "stream_event":
            await self._stream_event(obj)
        elif kind == "assistant":
            await self._assistant(obj)
        elif kind == "user":
            await self._user(obj)
        elif kind == "system":
            await self._system(obj)
        elif kind == "result":
            self.result = obj
            await self.recorder.emit(
                "log",
                level="debug",
                source="claude-code",
                message="claude-code result",
                subtype=obj.get("subtype"),
                is_error=obj.get("is_error"),
                num_turns=obj.get("num_turns"),
                total_cost_usd=obj.get("total_cost_usd"),
            )
        else:
            await self._debug(kind)

    async def _debug(self, kind: str, **data: Any) -> None:
        await self.recorder.emit(
            "log",
            level="debug",
            source="claude-code",
            message=f"claude-code event {kind!r}",
            claude_type=kind,
            **data,
        )

    def _call(self, message_id: str) -> _Call:
        call = self._by_id.get(message_id)
        if call is None:
            call = _Call(index=len(self.calls), message_id=message_id)
            self.calls.append(call)
            self._by_id[message_id] = call
        return call

    async def _stream_event(self, obj: dict[str, Any]) -> None:
        event = _obj(obj.get("event"))
        kind = event.get("type")
        subagent = obj.get("parent_tool_use_id") is not None
        if kind == "message_start":
            message = _obj(event.get("message"))
            if subagent:
                self.subagent_calls += 1
                return
            started = self._call(str(message.get("id") or f"msg-{len(self.calls)}"))
            started.start_usage = _obj(message.get("usage"))
            await self.recorder.emit(
                "model.request", turn=started.index, message_id=started.message_id
            )
        elif kind == "message_delta" and not subagent:
            message_id = obj.get("api_message_id")
            call = self._by_id.get(str(message_id)) if message_id else None
            if call is None and self.calls:
                call = self.calls[-1]
            if call is None:
                return
            call.end_usage = _obj(event.get("usage"))
            usage = _usage_of(call.start_usage, call.end_usage)
            await self.recorder.emit(
                "model.response",
                turn=call.index,
                kind="message_end",
                stop_reason=_obj(event.get("delta")).get("stop_reason"),
                usage={
                    "input_tokens": usage.input_tokens,
                    "output_tokens": usage.output_tokens,
                    "cached_tokens": usage.cached_tokens,
                },
            )

    async def _assistant(self, obj: dict[str, Any]) -> None:
        message = _obj(obj.get("message"))
        if obj.get("is_api_error_message") or message.get("model") == "<synthetic>":
            text = "".join(
                str(b.get("text") or "")
                for b in message.get("content") or []
                if isinstance(b, dict)
            )
            self.api_error = {
                "message": self.redact(text),
                "status": obj.get("api_error_status"),
                "error": obj.get("error"),
            }
            return
        subagent = obj.get("parent_tool_use_id")
        call = None if subagent else self._call(str(message.get("id") or f"msg-{len(self.calls)}"))
        for block in message.get("content") or []:
            if isinstance(block, dict):
                await self._block(block, call, subagent)

    async def _block(self, block: dict[str, Any], call: _Call | None, subagent: Any) -> None:
        kind = block.get("type")
        extra = {"parent_tool_use_id": subagent} if subagent else {}
        turn = call.index if call is not None else None
        if kind == "text":
            text = self.redact(str(block.get("text") or ""))
            if call is not None:
                call.texts.append(text)
            await self.recorder.emit("model.response", turn=turn, kind="text", text=text, **extra)
        elif kind in ("thinking", "redacted_thinking"):
            text = self.redact(str(block.get("thinking") or ""))
            if call is not None:
                call.reasoning.append(text)
            await self.recorder.emit(
                "model.response", turn=turn, kind="reasoning", text=text, **extra
            )
        elif kind in ("tool_use", "server_tool_use"):
            call_id = str(block.get("id") or f"toolu_{self.tool_calls}")
            name = str(block.get("name") or "")
            arguments = block.get("input") if block.get("input") is not None else {}
            args_text = self.redact(json.dumps(arguments, ensure_ascii=False))
            self._tool_names[call_id] = name
            if call is not None:
                self.tool_calls += 1
                self._tool_call[call_id] = call
                call.tool_calls.append(
                    {
                        "id": call_id,
                        "type": "function",
                        "function": {"name": name, "arguments": args_text},
                    }
                )
            await self.recorder.emit(
                "tool.call",
                turn=turn,
                id=call_id,
                name=name,
                arguments=json.loads(args_text),
                **extra,
            )

    async def _user(self, obj: dict[str, Any]) -> None:
        message = _obj(obj.get("message"))
        content = message.get("content")
        if not isinstance(content, list):
            return
        subagent = obj.get("parent_tool_use_id")
        for block in content:
            if not isinstance(block, dict) or block.get("type") != "tool_result":
                continue
            call_id = str(block.get("tool_use_id") or "")
            failed = bool(block.get("is_error"))
            output = self.redact(_tool_output(block.get("content")))
            exit_code: int | None = None
            if self._tool_names.get(call_id) == "Bash":
                # Claude Code flags a command that exits non-zero as an error ("Exit code
                # N"); like the other harnesses, a command that ran is not a tool error.
                found = _EXIT.match(output)
                exit_code = int(found.group(1)) if found else (None if failed else 0)
                failed = failed and found is None
            call = self._tool_call.get(call_id)
            if call is not None and not subagent:
                if failed:
                    self.tool_errors += 1
                call.tool_messages.append(
                    {"role": "tool", "tool_call_id": call_id, "content": output}
                )
            extra = {"parent_tool_use_id": subagent} if subagent else {}
            await self.recorder.emit(
                "tool.result",
                turn=call.index if call is not None else None,
                id=call_id,
                name=self._tool_names.get(call_id),
                status="error" if failed else "completed",
                output=output,
                exit_code=exit_code,
                **extra,
            )

    async def _system(self, obj: dict[str, Any]) -> None:
        subtype = str(obj.get("subtype") or "")
        if subtype == "init":
            self.version = str(obj.get("claude_code_version") or "") or None
            await self._debug(
                "system.init", model=obj.get("model"), tools=obj.get("tools"), cwd=obj.get("cwd")
            )
        elif subtype == "api_retry":
            self.retries += 1
            delay = obj.get("retry_delay_ms")
            await self.recorder.emit(
                "log",
                level="warning",
                source="claude-code",
                message=f"model call failed ({obj.get('error_status') or obj.get('error')}); "
                f"retry {obj.get('attempt')}/{obj.get('max_retries')}"
                + (f" in {delay / 1000:.1f} s" if isinstance(delay, (int, float)) else ""),
                status_code=obj.get("error_status"),
            )
        elif subtype not in ("status", "thinking_tokens"):
            await self._debug(f"system.{subtype}")

    # -- results ------------------------------------------------------------

    @property
    def messages(self) -> list[dict[str, Any]]:
        """The OpenAI-style transcript: the prompt, then each model call and its tool results."""
        return transcript(self.redact(self.prompt), self.calls)

    @property
    def output(self) -> str | None:
        """The final answer: the result's text, else the last model call's text."""
        if self.result is not None and not self.result.get("is_error"):
            text = self.result.get("result")
            if isinstance(text, str):
                return self.redact(text)
        return final_text(self.calls)

    @property
    def turns(self) -> int:
        """Model calls of the main agent that began answering."""
        return len(self.calls)

    @property
    def usage(self) -> Usage:
        """From the result's per-model usage (everything the endpoint served, subagents
        included), else summed over the model calls seen in the stream."""
        requests = len(self.calls) + self.subagent_calls
        result = self.result or {}
        per_model = result.get("modelUsage")
        cost = result.get("total_cost_usd")
        cost_value = (
            float(cost) if isinstance(cost, (int, float)) and not isinstance(cost, bool) else 0.0
        )
        if isinstance(per_model, dict) and per_model:
            total = Usage()
            for entry in per_model.values():
                entry = _obj(entry)
                total = total + Usage(
                    input_tokens=_int(entry.get("inputTokens"))
                    + _int(entry.get("cacheReadInputTokens"))
                    + _int(entry.get("cacheCreationInputTokens")),
                    output_tokens=_int(entry.get("outputTokens")),
                    cached_tokens=_int(entry.get("cacheReadInputTokens")),
                    reasoning_tokens=_int(entry.get("thinkingTokens")),
                )
            return attrs.evolve(total, cost=cost_value, requests=requests)
        total = sum(
            (_usage_of(c.start_usage, c.end_usage) for c in self.calls if c.start_usage), Usage()
        )
        return attrs.evolve(total, cost=cost_value, requests=requests)
