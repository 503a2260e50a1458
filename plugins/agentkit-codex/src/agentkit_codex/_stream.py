"""Reading ``codex exec --json``: one JSON event per line, turned into agentkit events live.

The stream of codex 0.169 (its ``ThreadEvent``s):

- ``thread.started`` (``thread_id``: the session id), ``turn.started``;
- ``item.started`` / ``item.updated`` / ``item.completed`` with an ``item``
  (``id``, ``type`` and the type's fields): ``agent_message`` (``text``),
  ``reasoning`` (``text``), ``plan`` (``text``), ``command_execution``
  (``command``, ``aggregated_output``, ``exit_code``, ``status``:
  ``in_progress | completed | failed | declined``), ``file_change``
  (``changes``, ``status``; completed only), ``mcp_tool_call`` (``server``,
  ``tool``, ``arguments``, ``result``, ``error``, ``status``), ``web_search``
  (``query``), ``collab_tool_call``, ``todo_list`` and ``error`` (a
  non-fatal notice, such as unknown model metadata);
- ``turn.completed`` (``usage``: ``input_tokens`` with cached ones,
  ``cached_input_tokens``, ``output_tokens`` with reasoning ones,
  ``reasoning_output_tokens``) or ``turn.failed`` (``error.message``);
- ``error`` (``message``): ``Reconnecting... n/m (...)`` while codex retries,
  else the failure that ``turn.failed`` then repeats.

The stream does not say which model call an item came from nor name the
function the model called: the transcript, turns and per-call usage come from
codex's session file (:mod:`agentkit_codex._rollout`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

from agentkit import EventRecorder, Usage
from agentkit.programs import http_error_kind, json_line, loads_bounded
from agentkit.programs import json_int as _int
from agentkit.programs import json_object as _obj

__all__ = ["CodexStream", "classify_error", "clean_error"]

#: Item types that are tool calls, and the name their events carry.
_TOOL_ITEMS = {
    "command_execution": "command_execution",
    "file_change": "file_change",
    "mcp_tool_call": "mcp_tool_call",
    "web_search": "web_search",
    "collab_tool_call": "collab_tool_call",
}
_STATUS = re.compile(r"(?:unexpected status|last status:?)\s*(\d{3})", re.IGNORECASE)
_CONNECTION = re.compile(
    r"stream disconnected|error sending request|connection (?:failed|refused|reset)|"
    r"timed out|timeout|network error|dns error",
    re.IGNORECASE,
)


def classify_error(message: str) -> str:
    """The ``error_kind`` of a codex failure message.

    codex reports HTTP errors as ``unexpected status 503 ...: <body message>``,
    ``exceeded retry limit, last status: 429 ...``, a generic "high demand"
    sentence for a 500 (the server's message is not kept), or the error body
    itself (``{"error": {...}}``) for a 400.
    """
    found = _STATUS.search(message)
    status = int(found.group(1)) if found else None
    if status is None and "high demand" in message.lower():
        status = 500
    if status is None and message.lstrip().startswith("{"):
        status = 400
    if status is not None:
        return http_error_kind(status)
    lowered = message.lower()
    if "rate limit" in lowered or "quota" in lowered or "usage limit" in lowered:
        return "model_rate_limit"
    if "decod" in lowered and "body" in lowered and "disconnected" not in lowered:
        return "model_bad_response"
    if _CONNECTION.search(message):
        return "model_connection"
    return "agent_error"


def clean_error(message: str) -> str:
    """A codex failure message, with an error body reduced to its ``message``, and
    codex's sentence for a 500 saying what happened (codex drops the server's own
    message for a 500)."""
    text = message.strip()
    if "high demand" in text.lower() and "HTTP 500" not in text:
        return f"{text} (the model endpoint answered HTTP 500; codex does not report its message)"
    if text.startswith("{"):
        try:
            body = loads_bounded(text)
        except ValueError:
            return text
        error = _obj(_obj(body).get("error"))
        if isinstance(error.get("message"), str):
            return str(error["message"])
    return text


def _tool_name(item: dict[str, Any]) -> str:
    kind = str(item.get("type"))
    if kind == "mcp_tool_call":
        return f"{item.get('server') or 'mcp'}.{item.get('tool') or 'tool'}"
    if kind == "collab_tool_call":
        return f"collab.{item.get('tool') or 'tool'}"
    return _TOOL_ITEMS.get(kind, kind)


def _tool_arguments(item: dict[str, Any]) -> Any:
    kind = item.get("type")
    if kind == "command_execution":
        return {"command": item.get("command")}
    if kind == "file_change":
        return {"changes": item.get("changes") or []}
    if kind == "mcp_tool_call":
        return item.get("arguments") if item.get("arguments") is not None else {}
    if kind == "web_search":
        return {"query": item.get("query")}
    if kind == "collab_tool_call":
        return {"prompt": item.get("prompt"), "receivers": item.get("receiver_thread_ids")}
    return {}


def _tool_outcome(item: dict[str, Any]) -> tuple[str, Any, str | None, int | None]:
    """``(status, output, error, exit_code)`` of a finished tool item.

    A command that ran and exited non-zero is a completed call (its exit code
    says how it went); one that could not run or was declined is an error.
    """
    kind = item.get("type")
    status = str(item.get("status") or "completed")
    if kind == "command_execution":
        exit_code = item.get("exit_code")
        code = exit_code if isinstance(exit_code, int) else None
        output = str(item.get("aggregated_output") or "")
        failed = status == "declined" or (status == "failed" and code is None)
        return ("error" if failed else "completed"), output, (status if failed else None), code
    if kind == "mcp_tool_call":
        error = _obj(item.get("error")).get("message")
        result = _obj(item.get("result"))
        parts = [
            str(c.get("text"))
            for c in result.get("content") or []
            if isinstance(c, dict) and "text" in c
        ]
        output = "\n".join(parts) if parts else json.dumps(result) if result else ""
        failed = status == "failed" or error is not None
        return ("error" if failed else "completed"), output, error, None
    if kind == "file_change":
        changes = item.get("changes") or []
        summary = "\n".join(
            f"{c.get('kind')} {c.get('path')}" for c in changes if isinstance(c, dict)
        )
        failed = status == "failed"
        return ("error" if failed else "completed"), summary, (status if failed else None), None
    failed = status == "failed"
    return ("error" if failed else "completed"), "", None, None


class CodexStream:
    """Feeds codex JSON lines to an :class:`~agentkit.EventRecorder` and keeps what they say.

    ``redact`` is applied to every string that leaves this class (event data,
    output, errors).
    """

    def __init__(self, recorder: EventRecorder, redact: Callable[[str], str] | None = None) -> None:
        self.recorder = recorder
        self.redact: Callable[[str], str] = redact or (lambda text: text)
        self.session_id: str | None = None
        self.usage: Usage | None = None
        self.output: str | None = None
        self.failure: str | None = None
        self.errors: list[str] = []
        self.retries = 0
        self.tool_calls = 0
        self.tool_errors = 0
        self.unparsed: list[str] = []
        #: Fallback transcript (assistant text and tool calls as the stream shows them).
        self.items: list[dict[str, Any]] = []
        self._started: set[str] = set()
        #: Called with the thread id when ``thread.started`` arrives.
        self.on_thread: Callable[[str], Any] | None = None

    async def feed(self, line: str) -> None:
        """Handle one line of codex's standard output."""
        obj = await json_line(
            line, self.recorder, source="codex", redact=self.redact, unparsed=self.unparsed
        )
        if obj is None:
            return
        kind = obj["type"]
        if kind == "thread.started":
            self.session_id = str(obj.get("thread_id") or "") or None
            if self.on_thread is not None and self.session_id:
                await self.on_thread(self.session_id)
        elif kind in ("item.started", "item.completed"):
            await self._item(_obj(obj.get("item")), done=kind == "item.completed")
        elif kind == "turn.completed":
            usage = _obj(obj.get("usage"))
            self.usage = Usage(
                input_tokens=_int(usage.get("input_tokens")),
                output_tokens=_int(usage.get("output_tokens")),
                cached_tokens=_int(usage.get("cached_input_tokens")),
                reasoning_tokens=_int(usage.get("reasoning_output_tokens")),
            )
            await self._debug(kind, usage=usage)
        elif kind == "turn.failed":
            message = self.redact(str(_obj(obj.get("error")).get("message") or "codex failed"))
            self.failure = message
            await self.recorder.emit(
                "error",
                source="codex",
                kind=classify_error(message),
                message=clean_error(message),
            )
        elif kind == "error":
            message = self.redact(str(obj.get("message") or ""))
            if message.startswith("Reconnecting"):
                self.retries += 1
                await self.recorder.emit("log", level="warning", source="codex", message=message)
            else:
                self.errors.append(message)
                await self.recorder.emit("log", level="warning", source="codex", message=message)
        else:
            await self._debug(kind)

    async def _debug(self, kind: str, **data: Any) -> None:
        await self.recorder.emit(
            "log",
            level="debug",
            source="codex",
            message=f"codex event {kind!r}",
            codex_type=kind,
            **data,
        )

    async def _item(self, item: dict[str, Any], *, done: bool) -> None:
        kind = str(item.get("type") or "")
        item_id = str(item.get("id") or f"item_{len(self.items)}")
        if kind in _TOOL_ITEMS:
            await self._tool(item, item_id, done=done)
        elif not done:
            return
        elif kind in ("agent_message", "reasoning", "plan"):
            text = self.redact(str(item.get("text") or ""))
            label = {"agent_message": "text"}.get(kind, kind)
            if kind == "agent_message":
                self.output = text
            self.items.append({"kind": label, "text": text})
            await self.recorder.emit("model.response", kind=label, text=text, item_id=item_id)
        elif kind == "error":
            message = self.redact(str(item.get("message") or ""))
            await self.recorder.emit("log", level="warning", source="codex", message=message)
        else:
            await self._debug(f"item.{kind}", item_id=item_id)

    async def _tool(self, item: dict[str, Any], item_id: str, *, done: bool) -> None:
        name = _tool_name(item)
        if item_id not in self._started:
            self._started.add(item_id)
            self.tool_calls += 1
            await self.recorder.emit(
                "tool.call",
                id=item_id,
                name=name,
                arguments=self._redact_json(_tool_arguments(item)),
            )
        if not done:
            return
        status, output, error, exit_code = _tool_outcome(item)
        output_text = self.redact(output if isinstance(output, str) else json.dumps(output))
        if status == "error":
            self.tool_errors += 1
        self.items.append(
            {
                "kind": "tool",
                "id": item_id,
                "name": name,
                "arguments": self._redact_json(_tool_arguments(item)),
                "output": output_text,
            }
        )
        await self.recorder.emit(
            "tool.result",
            id=item_id,
            name=name,
            status=status,
            output=output_text,
            error=self.redact(error) if error else None,
            exit_code=exit_code,
        )

    def _redact_json(self, value: Any) -> Any:
        text = self.redact(json.dumps(value, ensure_ascii=False))
        return json.loads(text)
