"""Reading ``opencode run --format json``: one JSON object per line, turned into
agentkit events, an OpenAI-style transcript, usage and a final status.

The stream of opencode 1.18 has these line types (every line also carries
``timestamp`` in ms and ``sessionID``):

- ``step_start``: ``part`` with ``messageID``: one model call begins.
- ``reasoning``: ``part.text``: the model's reasoning (only with ``--thinking``).
- ``text``: ``part.text``: a finished text part of the assistant message.
- ``tool_use``: ``part.tool``, ``part.callID`` and ``part.state`` with ``status``
  (``completed`` or ``error``), ``input``, ``output``, ``error``, ``title``,
  ``metadata.exit`` (bash) and ``time.start``/``time.end``; emitted once the
  tool has finished. A call of an unknown tool arrives as tool ``invalid``
  whose input names the tool the model asked for.
- ``step_finish``: ``part.reason`` (``stop``, ``tool-calls``...), ``part.cost``
  and ``part.tokens`` = ``{input, output, reasoning, cache: {read, write}}``
  where ``input`` excludes cache reads and writes and ``output`` excludes
  reasoning tokens.
- ``error``: ``error`` = ``{name, data: {message, statusCode?, isRetryable?,
  responseBody?...}}``: the session failed (after opencode's own retries).

Parts of one step can arrive out of order (a tool that finishes first is
reported first), so assistant messages are assembled per ``messageID`` and
placed in the transcript in the order their steps started.
"""

from __future__ import annotations

import json
import re
from typing import Any

import attrs

from agentkit import EventRecorder, Usage
from agentkit.programs import (
    ModelCall,
    final_text,
    http_error_kind,
    json_line,
    json_or_text,
    transcript,
)
from agentkit.programs import json_int as _as_int
from agentkit.programs import json_object as _obj

__all__ = ["StreamState", "classify_error"]

_CONNECTION = re.compile(
    r"cannot connect|connection (?:refused|reset|error|lost)|econnrefused|econnreset|"
    r"fetch failed|failed to fetch|socket hang up|network error|getaddrinfo|enotfound|"
    r"etimedout|timed out",
    re.IGNORECASE,
)


def classify_error(error: dict[str, Any]) -> str:
    """The ``HarnessResult.error_kind`` of an opencode ``error`` event's ``error`` object."""
    data = _obj(error.get("data"))
    status = data.get("statusCode")
    message = str(data.get("message") or error.get("name") or "")
    if isinstance(status, int):
        return http_error_kind(status)
    if _CONNECTION.search(message):
        return "model_connection"
    if re.search(r"json pars|unexpected (?:eof|token)|invalid json", message, re.IGNORECASE):
        return "model_bad_response"
    return "agent_error"


def error_message(error: Any) -> str:
    """The human message of an opencode error object (its ``data.message``, else its name)."""
    if isinstance(error, dict):
        data = error.get("data")
        if isinstance(data, dict) and data.get("message"):
            return str(data["message"])
        if error.get("message"):
            return str(error["message"])
        if error.get("name"):
            return str(error["name"])
    return str(error)


@attrs.define
class _Step(ModelCall):
    """One model call (one opencode assistant message) being assembled."""

    finished: bool = False


def _tokens_of(part: dict[str, Any]) -> Usage:
    """agentkit usage of one ``step_finish``: input with cache reads, output with reasoning."""
    tokens = _obj(part.get("tokens"))
    cache = _obj(tokens.get("cache"))
    cache_read = _as_int(cache.get("read"))
    cache_write = _as_int(cache.get("write"))
    reasoning = _as_int(tokens.get("reasoning"))
    cost = part.get("cost")
    return Usage(
        input_tokens=_as_int(tokens.get("input")) + cache_read + cache_write,
        output_tokens=_as_int(tokens.get("output")) + reasoning,
        cached_tokens=cache_read,
        reasoning_tokens=reasoning,
        cost=float(cost) if isinstance(cost, (int, float)) and not isinstance(cost, bool) else 0.0,
        requests=1,
    )


class StreamState:
    """Feeds opencode JSON lines to an :class:`~agentkit.EventRecorder` and keeps the result.

    ``redact`` is applied to every string that leaves this class (event data,
    transcript, output, errors), so a secret the agent happened to print
    never reaches on_event, the result or the run directory.
    """

    def __init__(self, recorder: EventRecorder, prompt: str, redact: Any = None) -> None:
        self.recorder = recorder
        self.redact: Any = redact or (lambda text: text)
        self.prompt = prompt
        self.session_id: str | None = None
        self.usage = Usage()
        self.steps: list[_Step] = []
        self._by_message: dict[str, _Step] = {}
        self.errors: list[dict[str, Any]] = []
        self.tool_calls = 0
        self.tool_errors = 0
        self.unparsed: list[str] = []
        #: Set by the harness: the model-call limit, and whether opencode was stopped by it.
        self.max_turns: int | None = None
        self.turn_limit_hit = False
        #: Set by the harness when a token, cost or message limit stopped opencode.
        self.limit_hit: tuple[str, str] | None = None

    # -- feeding ------------------------------------------------------------

    async def feed(self, line: str) -> None:
        """Handle one line of opencode's standard output."""
        obj = await json_line(
            line, self.recorder, source="opencode", redact=self.redact, unparsed=self.unparsed
        )
        if obj is None:
            return
        if isinstance(obj.get("sessionID"), str):
            self.session_id = obj["sessionID"]
        kind = obj["type"]
        part = _obj(obj.get("part"))
        handler = {
            "step_start": self._step_start,
            "text": self._text,
            "reasoning": self._reasoning,
            "tool_use": self._tool_use,
            "step_finish": self._step_finish,
        }.get(kind)
        if handler is not None:
            await handler(part)
        elif kind == "error":
            await self._error(obj.get("error"))
        else:
            await self.recorder.emit(
                "log",
                level="debug",
                source="opencode",
                message=f"opencode event {kind!r}",
                opencode_type=kind,
            )

    def _step(self, part: dict[str, Any]) -> _Step:
        message_id = str(part.get("messageID") or f"step-{len(self.steps)}")
        step = self._by_message.get(message_id)
        if step is None:
            step = _Step(index=len(self.steps), message_id=message_id)
            self.steps.append(step)
            self._by_message[message_id] = step
        return step

    async def _step_start(self, part: dict[str, Any]) -> None:
        step = self._step(part)
        await self.recorder.emit("model.request", turn=step.index, message_id=step.message_id)

    async def _text(self, part: dict[str, Any]) -> None:
        step = self._step(part)
        text = self.redact(str(part.get("text") or ""))
        step.texts.append(text)
        await self.recorder.emit("model.response", turn=step.index, kind="text", text=text)

    async def _reasoning(self, part: dict[str, Any]) -> None:
        step = self._step(part)
        text = self.redact(str(part.get("text") or ""))
        step.reasoning.append(text)
        await self.recorder.emit("model.response", turn=step.index, kind="reasoning", text=text)

    async def _tool_use(self, part: dict[str, Any]) -> None:
        step = self._step(part)
        state = _obj(part.get("state"))
        tool = str(part.get("tool") or "")
        call_id = str(part.get("callID") or part.get("id") or f"call_{self.tool_calls}")
        raw_input = state.get("input")
        arguments: Any = raw_input if raw_input is not None else {}
        status = str(state.get("status") or "")
        error = state.get("error")
        if tool == "invalid" and isinstance(raw_input, dict):
            # opencode's stand-in for a call of a tool that does not exist
            tool = str(raw_input.get("tool") or tool)
            error = raw_input.get("error") or error
            arguments = {}
            status = "error"
        metadata = _obj(state.get("metadata"))
        exit_code = metadata.get("exit")
        output = state.get("output")
        if output is None and error is not None:
            output = f"Error: {error}"
        output_text = self.redact(output if isinstance(output, str) else json.dumps(output))
        args_text = self.redact(
            arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)
        )
        times = _obj(state.get("time"))
        start, end = times.get("start"), times.get("end")
        duration = (
            round((end - start) / 1000.0, 3)
            if isinstance(start, (int, float)) and isinstance(end, (int, float))
            else None
        )
        self.tool_calls += 1
        failed = status == "error"
        if failed:
            self.tool_errors += 1
        step.tool_calls.append(
            {"id": call_id, "type": "function", "function": {"name": tool, "arguments": args_text}}
        )
        step.tool_messages.append({"role": "tool", "tool_call_id": call_id, "content": output_text})
        await self.recorder.emit(
            "tool.call",
            turn=step.index,
            id=call_id,
            name=tool,
            arguments=json_or_text(args_text),
        )
        await self.recorder.emit(
            "tool.result",
            turn=step.index,
            id=call_id,
            name=tool,
            status="error" if failed else "completed",
            output=output_text,
            error=self.redact(str(error)) if error is not None else None,
            exit_code=exit_code if isinstance(exit_code, int) else None,
            title=self.redact(str(state["title"])) if state.get("title") else None,
            duration_sec=duration,
        )

    async def _step_finish(self, part: dict[str, Any]) -> None:
        step = self._step(part)
        step.finished = True
        usage = _tokens_of(part)
        self.usage = self.usage + usage
        await self.recorder.emit(
            "model.response",
            turn=step.index,
            kind="step_finish",
            finish_reason=part.get("reason"),
            usage={
                "input_tokens": usage.input_tokens,
                "output_tokens": usage.output_tokens,
                "cached_tokens": usage.cached_tokens,
                "reasoning_tokens": usage.reasoning_tokens,
            },
            cost=usage.cost,
        )

    async def _error(self, error: Any) -> None:
        err = error if isinstance(error, dict) else {"name": "Error", "data": {"message": error}}
        message = self.redact(error_message(err))
        kind = classify_error(err)
        status = _obj(err.get("data")).get("statusCode")
        self.errors.append({"message": message, "kind": kind, "name": err.get("name")})
        await self.recorder.emit(
            "error",
            source="opencode",
            kind=kind,
            message=message,
            name=err.get("name"),
            status_code=status if isinstance(status, int) else None,
        )

    # -- results ------------------------------------------------------------

    @property
    def messages(self) -> list[dict[str, Any]]:
        """The OpenAI-style transcript: the prompt, then each step and its tool results."""
        return transcript(self.redact(self.prompt), self.steps)

    @property
    def output(self) -> str | None:
        """The final answer: the text of the last step that produced text."""
        return final_text(self.steps)

    @property
    def turns(self) -> int:
        """How many model calls opencode made (steps started)."""
        return len(self.steps)
