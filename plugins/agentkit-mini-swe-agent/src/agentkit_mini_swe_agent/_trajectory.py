"""Reading mini-swe-agent's trajectory file: events, transcript, usage and exit status.

mini rewrites its trajectory (``-o``, format ``mini-swe-agent-1.1``) after
every step: one JSON object with ``info`` (``model_stats`` with
``instance_cost`` and ``api_calls``, ``mini_version``, ``exit_status``,
``submission``, the configuration) and ``messages``, the whole conversation
so far. Messages carry mini's ``extra``:

- ``assistant`` messages (OpenAI chat format: ``content``, ``tool_calls``,
  ``reasoning_content``) have ``extra.response`` (the model's whole answer,
  ``usage`` included), ``extra.cost`` and ``extra.actions``;
- ``tool`` messages (``tool_call_id``, ``content`` rendered by mini's
  observation template) have ``extra.raw_output``, ``extra.returncode`` and
  ``extra.exception_info`` (a timeout, or ``action was not executed``);
- a ``user`` message with ``extra.interrupt_type: FormatError`` answers a
  model reply without a valid ``bash`` call (that reply is in its
  ``extra.response``);
- the last message has role ``exit``: ``extra.exit_status`` is
  ``Submitted``, ``LimitsExceeded``, ``TimeExceeded``,
  ``RepeatedFormatError``, or the name of the exception that stopped mini
  (litellm's ``RateLimitError``...), and its ``content`` the message.

Messages only ever get appended, so each read turns the new ones into events.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from agentkit import EventRecorder, Usage
from agentkit.chat import message_reasoning
from agentkit.programs import json_int as _int
from agentkit.programs import json_object as _obj
from agentkit.programs import json_or_text

__all__ = ["NOT_EXECUTED", "TrajectoryState", "classify_exit"]

#: mini's exception_info for actions it did not run (after the submission).
NOT_EXECUTED = "action was not executed"
#: The roles that make the transcript (mini's ``exit`` message does not).
_CHAT_ROLES = frozenset({"system", "user", "assistant", "tool"})

#: ``error_kind`` of the exceptions (litellm's, by class name) that stop mini.
_EXCEPTION_KINDS = {
    "RateLimitError": "model_rate_limit",
    "InternalServerError": "model_server_error",
    "ServiceUnavailableError": "model_server_error",
    "BadGatewayError": "model_server_error",
    "APIError": "model_server_error",
    "AuthenticationError": "model_auth",
    "PermissionDeniedError": "model_auth",
    "APIConnectionError": "model_connection",
    "Timeout": "model_connection",
    "BadRequestError": "model_request_error",
    "NotFoundError": "model_request_error",
    "UnprocessableEntityError": "model_request_error",
    "UnsupportedParamsError": "model_request_error",
    "ContextWindowExceededError": "model_request_error",
    "ContentPolicyViolationError": "model_request_error",
    "APIResponseValidationError": "model_bad_response",
    "JSONDecodeError": "model_bad_response",
}


def classify_exit(exit_status: str) -> str:
    """The ``HarnessResult.error_kind`` of an exception name in mini's ``exit_status``."""
    return _EXCEPTION_KINDS.get(exit_status, "agent_error")


def _float(value: Any) -> float:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    return 0.0


def usage_of(response: dict[str, Any], cost: Any) -> Usage:
    """agentkit usage of one chat completion as litellm reported it to mini."""
    usage = _obj(response.get("usage"))
    return Usage(
        input_tokens=_int(usage.get("prompt_tokens")),
        output_tokens=_int(usage.get("completion_tokens")),
        cached_tokens=_int(_obj(usage.get("prompt_tokens_details")).get("cached_tokens")),
        reasoning_tokens=_int(_obj(usage.get("completion_tokens_details")).get("reasoning_tokens")),
        cost=_float(cost),
        requests=1,
    )


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return "" if content is None else json.dumps(content)


class TrajectoryState:
    """Feeds successive reads of the trajectory to an :class:`~agentkit.EventRecorder`.

    ``redact`` is applied to every string that leaves this class.
    """

    def __init__(self, recorder: EventRecorder, redact: Callable[[str], str] | None = None):
        self.recorder = recorder
        self.redact: Callable[[str], str] = redact or (lambda text: text)
        self.data: dict[str, Any] = {}
        self.seen = 0
        self.turns = 0
        self.tool_calls = 0
        self.tool_errors = 0
        self.format_errors = 0
        self.usage = Usage()
        self._names: dict[str, str] = {}
        #: Set by the harness when a token, cost or message limit stopped mini.
        self.limit_hit: tuple[str, str] | None = None

    async def update(self, data: dict[str, Any]) -> None:
        """Take a fresh read of the whole trajectory; emit events for its new messages."""
        messages = data.get("messages")
        if not isinstance(messages, list):
            return
        self.data = data
        for message in messages[self.seen :]:
            if isinstance(message, dict):
                await self._message(message)
        self.seen = max(self.seen, len(messages))

    async def _message(self, message: dict[str, Any]) -> None:
        role = message.get("role")
        extra = _obj(message.get("extra"))
        if role == "assistant":
            await self._assistant(message, extra)
        elif role == "tool":
            await self._tool(message, extra)
        elif role == "user" and extra.get("interrupt_type") == "FormatError":
            self.format_errors += 1
            response = _obj(extra.get("response"))
            if response:
                await self._response(response, extra.get("cost"), kind="format_error")
            await self.recorder.emit(
                "log",
                level="warning",
                source="mini-swe-agent",
                message=self.redact(_text(message.get("content")))[:2000],
                kind="format_error",
            )

    async def _response(self, response: dict[str, Any], cost: Any, *, kind: str) -> int:
        turn = self.turns
        self.turns += 1
        usage = usage_of(response, cost)
        self.usage = self.usage + usage
        choices = response.get("choices")
        choice = _obj(choices[0]) if isinstance(choices, list) and choices else {}
        reply = _obj(choice.get("message"))
        reasoning = message_reasoning(reply)[1]  # ``reasoning`` (vLLM) or ``reasoning_content``
        await self.recorder.emit(
            "model.response",
            turn=turn,
            kind=kind,
            text=self.redact(_text(reply.get("content"))),
            reasoning=self.redact(reasoning) if isinstance(reasoning, str) and reasoning else None,
            finish_reason=choice.get("finish_reason"),
            usage={
                "input_tokens": usage.input_tokens,
                "output_tokens": usage.output_tokens,
                "cached_tokens": usage.cached_tokens,
                "reasoning_tokens": usage.reasoning_tokens,
            },
            cost=usage.cost,
        )
        return turn

    async def _assistant(self, message: dict[str, Any], extra: dict[str, Any]) -> None:
        turn = await self._response(_obj(extra.get("response")), extra.get("cost"), kind="reply")
        for call in message.get("tool_calls") or []:
            if not isinstance(call, dict):
                continue
            function = _obj(call.get("function"))
            name = str(function.get("name") or "")
            call_id = str(call.get("id") or f"call_{self.tool_calls}")
            self._names[call_id] = name
            self.tool_calls += 1
            arguments = self.redact(str(function.get("arguments") or ""))
            await self.recorder.emit(
                "tool.call", turn=turn, id=call_id, name=name, arguments=json_or_text(arguments)
            )

    async def _tool(self, message: dict[str, Any], extra: dict[str, Any]) -> None:
        call_id = str(message.get("tool_call_id") or "")
        exception = extra.get("exception_info") or None
        returncode = extra.get("returncode")
        if exception == NOT_EXECUTED:
            status = "not_executed"
        elif exception:
            status = "error"
            self.tool_errors += 1
        else:
            status = "completed"
        output = extra.get("raw_output")
        await self.recorder.emit(
            "tool.result",
            turn=max(self.turns - 1, 0),
            id=call_id,
            name=self._names.get(call_id, "bash"),
            status=status,
            output=self.redact(
                output if isinstance(output, str) else _text(message.get("content"))
            ),
            exit_code=returncode if isinstance(returncode, int) else None,
            error=self.redact(str(exception)) if exception else None,
        )

    # -- results ------------------------------------------------------------

    @property
    def _messages(self) -> list[dict[str, Any]]:
        messages = self.data.get("messages")
        return [m for m in messages if isinstance(m, dict)] if isinstance(messages, list) else []

    @property
    def messages(self) -> list[dict[str, Any]]:
        """The OpenAI-style transcript mini sent and received (its ``exit`` message left out)."""
        out: list[dict[str, Any]] = []
        for message in self._messages:
            role = message.get("role")
            content = message.get("content")
            content = self.redact(content) if isinstance(content, str) else content
            if role == "assistant":
                entry: dict[str, Any] = {"role": "assistant", "content": content}
                reasoning = message.get("reasoning_content")
                if isinstance(reasoning, str) and reasoning:
                    entry["reasoning_content"] = self.redact(reasoning)
                calls = [
                    {
                        "id": str(c.get("id") or ""),
                        "type": "function",
                        "function": {
                            "name": str(_obj(c.get("function")).get("name") or ""),
                            "arguments": self.redact(
                                str(_obj(c.get("function")).get("arguments") or "")
                            ),
                        },
                    }
                    for c in message.get("tool_calls") or []
                    if isinstance(c, dict)
                ]
                if calls:
                    entry["tool_calls"] = calls
                elif entry["content"] is None:
                    entry["content"] = ""
                out.append(entry)
            elif role == "tool":
                out.append(
                    {
                        "role": "tool",
                        "tool_call_id": str(message.get("tool_call_id") or ""),
                        "content": content,
                    }
                )
            elif role in _CHAT_ROLES:
                out.append({"role": role, "content": content})
        return out

    @property
    def message_count(self) -> int:
        """How many messages the conversation has (what :attr:`messages` would hold)."""
        return sum(1 for m in self._messages if m.get("role") in _CHAT_ROLES)

    @property
    def exit_message(self) -> dict[str, Any]:
        """mini's final ``exit`` message (empty while it runs)."""
        messages = self._messages
        return messages[-1] if messages and messages[-1].get("role") == "exit" else {}

    @property
    def info(self) -> dict[str, Any]:
        """The trajectory's ``info`` object."""
        return _obj(self.data.get("info"))

    @property
    def exit_status(self) -> str | None:
        """How mini ended (``Submitted``, ``LimitsExceeded``, an exception name...)."""
        status = _obj(self.exit_message.get("extra")).get("exit_status")
        if not status:
            status = self.info.get("exit_status")
        return str(status) if status else None

    @property
    def exit_text(self) -> str:
        """The exit message's text (the exception's message when mini failed)."""
        return self.redact(_text(self.exit_message.get("content")))

    @property
    def submission(self) -> str:
        """What the agent submitted (the output after its final echo)."""
        value = _obj(self.exit_message.get("extra")).get("submission")
        if not value:
            value = self.info.get("submission")
        return self.redact(value) if isinstance(value, str) else ""

    @property
    def output(self) -> str | None:
        """The submission when there is one, else the last assistant text."""
        if self.submission.strip():
            return self.submission
        for message in reversed(self._messages):
            if message.get("role") == "assistant":
                text = _text(message.get("content"))
                if text:
                    return self.redact(text)
        return None

    @property
    def api_calls(self) -> int:
        """Model calls mini made (its ``model_stats.api_calls``)."""
        stats = _obj(self.info.get("model_stats"))
        return _int(stats.get("api_calls")) or self.turns

    @property
    def cost(self) -> float:
        """mini's ``model_stats.instance_cost`` (litellm's price of the calls, 0 when unknown)."""
        return _float(_obj(self.info.get("model_stats")).get("instance_cost"))

    @property
    def mini_version(self) -> str | None:
        """The ``mini_version`` mini wrote."""
        value = self.info.get("mini_version")
        return str(value) if value else None
