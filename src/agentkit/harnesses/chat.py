"""The built-in ``chat`` harness: a task's input sent to an OpenAI-compatible endpoint.

Text input becomes one user message. Chat-message input is replayed turn by
turn: every user message that is not already followed by an assistant
message gets one model call, whose reply is appended before going on, so a
task with 8 user messages makes 8 calls. Structured (dict) input is sent as
JSON text. The harness never runs tools; tool calls in a reply are recorded
in the transcript as they came.

Calls go through the chat client (:mod:`agentkit.chat`): plain JSON over
pooled ``httpcore`` connections, shared by every rollout on an event loop and
sized from the run's concurrency; the ``openai`` package is never imported,
because importing it takes longer than a whole one-task run.

>>> result = await ChatHarness().run(task, RunContext(model="m", base_url=url))  # doctest: +SKIP
"""

from __future__ import annotations

import json
from typing import Any

import anyio

from agentkit._context import RunContext
from agentkit._errors import OptionError
from agentkit._events import EventCallback, EventRecorder
from agentkit._harness import run_model
from agentkit._result import HarnessResult
from agentkit._task import Task
from agentkit._usage import Usage
from agentkit.chat import (
    MAX_REPLY_BYTES,
    MAX_REPLY_CHARS,
    ChatClient,
    ConnectionCache,
    ModelCallError,
    TokenTrace,
    retry_after_seconds,
)

__all__ = [
    "MAX_REPLY_BYTES",
    "MAX_REPLY_CHARS",
    "ChatHarness",
    "retry_after_seconds",
]


class _TurnLimit(Exception):
    pass


class _LimitHit(Exception):
    """A token, cost or message limit of the rollout was reached."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


class ChatHarness:
    """Plain chat: one model call per pending user message, no tools.

    Options (``-H name=value`` on the command line):

    - ``model``: the model name; overrides ``RunContext.model`` when set.
    - ``base_url``: the endpoint; overrides ``RunContext.base_url`` when set.
    - ``system_prompt``: prepended as a system message unless the task
      already starts with one.
    - ``max_tokens``: output tokens per call (else ``RunContext.limits.max_tokens``).
    - ``request_timeout``: seconds one model call may take, start to end
      (connecting, sending, and reading the whole reply or stream).
    - ``stream``: use streamed completions (usage read from the final chunk).
    - ``token_ids``: ask the server for token ids and logprobs (vLLM's
      ``return_token_ids`` and ``logprobs``; servers that do not know them may
      refuse the request). Token data a server returns is recorded either
      way: ``raw`` gets ``prompt_token_ids``, ``completion_token_ids``,
      ``completion_mask`` and ``completion_logprobs`` for ``agentkit export``.
    """

    name = "chat"
    description = "Send the task's prompt or chat messages to an OpenAI-compatible endpoint."
    #: It calls the run's model: the preflight checks the endpoint and the API key.
    uses_model = True

    def __init__(
        self,
        model: str | None = None,
        base_url: str | None = None,
        system_prompt: str | None = None,
        max_tokens: int | None = None,
        request_timeout: float = 600.0,
        stream: bool = False,
        token_ids: bool = False,
    ) -> None:
        if max_tokens is not None and max_tokens < 1:
            raise OptionError(
                f"option 'max_tokens' for harness 'chat': expected >= 1, got {max_tokens}"
            )
        if not request_timeout > 0:
            raise OptionError(
                f"option 'request_timeout' for harness 'chat': expected > 0, got {request_timeout}"
            )
        self.model = model
        self.base_url = base_url
        self.system_prompt = system_prompt
        self.max_tokens = max_tokens
        self.request_timeout = request_timeout
        self.stream = stream
        self.token_ids = token_ids
        # the connection pools, per event loop and endpoint, shared by every rollout
        # (pickled empty: the Ray executor's workers open their own)
        self._clients = ConnectionCache()

    def __repr__(self) -> str:
        return f"ChatHarness(model={self.model!r}, stream={self.stream!r})"

    async def aclose(self) -> None:
        """Close the connections this harness opened on the running event loop.

        Optional: connections are reused across runs on the same loop, and a
        later run opens new ones.
        """
        await self._clients.aclose()

    async def __aenter__(self) -> ChatHarness:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def supports(self, task: Task) -> bool:
        """Every task with a payload: text, chat messages or structured data."""
        return True

    async def run(
        self,
        task: Task,
        context: RunContext | None = None,
        on_event: EventCallback | None = None,
    ) -> HarnessResult:
        """Run the task's conversation and return the transcript, usage and events."""
        task.require_payload()
        context = context or RunContext()
        model = run_model(self, context)
        recorder = EventRecorder(task.task_id, context.rollout_id, on_event)
        conversation = _initial_messages(task, self.system_prompt)
        state = _RunState(model=model)
        await recorder.emit("harness.start", harness="chat", model=model)
        status = "completed"
        error: str | None = None
        error_kind: str | None = None
        retry_after: float | None = None
        try:
            with anyio.fail_after(context.limits.timeout_sec):
                await self._converse(conversation, state, context, recorder)
        except TimeoutError:
            status, error_kind = "timeout", "timeout"
            error = f"the run exceeded its time limit of {context.limits.timeout_sec:g} s"
        except _TurnLimit:
            status, error_kind = "timeout", "max_turns"
            error = (
                f"stopped after max_turns={context.limits.max_turns} model calls with "
                "user messages still unanswered"
            )
        except _LimitHit as exc:
            status, error_kind, error = "timeout", exc.kind, str(exc)
        except ModelCallError as exc:  # its message never holds the API key
            status, error_kind, error = "failed", exc.kind, str(exc)
            retry_after = exc.retry_after
        if error is not None:
            await recorder.emit("error", kind=error_kind, message=error)
        await recorder.emit("harness.end", status=status)
        return HarnessResult(
            status=status,  # type: ignore[arg-type]
            output=_last_assistant_text(state.transcript),
            messages=state.transcript,
            error=error,
            error_kind=error_kind,
            usage=state.usage,
            events=list(recorder.events),
            raw={
                "model": model,
                "response_ids": state.response_ids,
                "finish_reasons": state.finish_reasons,
                **state.tokens.to_raw(),
                # the runner waits this long before retrying (the server's Retry-After)
                **({} if retry_after is None else {"retry_after": retry_after}),
                **({"replies_cut": state.cuts} if state.cuts else {}),
            },
        )

    async def _converse(
        self,
        conversation: list[dict[str, Any]],
        state: _RunState,
        context: RunContext,
        recorder: EventRecorder,
    ) -> None:
        """Replay the conversation, calling the model for each pending user message."""
        calls = 0
        for index, message in enumerate(conversation):
            state.transcript.append(message)
            following = conversation[index + 1] if index + 1 < len(conversation) else None
            pending = message.get("role") == "user" and (
                following is None or following.get("role") != "assistant"
            )
            if pending:
                if context.limits.max_turns is not None and calls >= context.limits.max_turns:
                    raise _TurnLimit
                _check_limits(state, context)
                calls += 1
                state.transcript.append(await self._call(state, context, recorder))
        if calls == 0:  # nothing pending (ends with a tool result, say): answer once
            if context.limits.max_turns is not None and context.limits.max_turns < 1:
                raise _TurnLimit
            _check_limits(state, context)
            state.transcript.append(await self._call(state, context, recorder))

    def _client(self, state: _RunState, context: RunContext) -> ChatClient:
        """The run's client (made at its first call), on the harness's shared connections."""
        if state.client is None:
            max_tokens = (
                self.max_tokens if self.max_tokens is not None else context.limits.max_tokens
            )
            # the run's tools go to the API; this harness's max_tokens, else the
            # run's limit, wins over a max_tokens sampling argument
            state.client = ChatClient.for_run(
                context,
                model=state.model,
                base_url=self.base_url,
                max_tokens=max_tokens,
                tools=True,
                token_ids=self.token_ids,
                stream=self.stream,
                request_timeout=self.request_timeout,
                max_reply_chars=MAX_REPLY_CHARS,
                max_reply_bytes=MAX_REPLY_BYTES,
                connections=self._clients,
            )
        return state.client

    async def _call(
        self, state: _RunState, context: RunContext, recorder: EventRecorder
    ) -> dict[str, Any]:
        """One chat completion; returns the assistant message."""
        client = self._client(state, context)
        turn = state.usage.requests
        transcript = state.transcript
        await recorder.emit(
            "model.request",
            turn=turn,
            model=state.model,
            stream=self.stream,
            n_messages=len(transcript),
            last_message=transcript[-1] if transcript else None,
        )
        response = await client.complete(transcript)
        for cut in response.cuts:
            state.cuts.append({**cut, "turn": turn})
            await recorder.emit(
                "log",
                level="warning",
                message=f"the model's {cut['field']} had {cut['chars']} characters; "
                f"cut to {MAX_REPLY_CHARS} (MAX_REPLY_CHARS)",
            )
        usage = response.usage
        state.usage = state.usage + usage
        state.response_ids.append(response.id)
        state.finish_reasons.append(response.finish_reason)
        state.tokens.add(
            response.prompt_token_ids,
            response.token_ids,
            response.logprobs,
            gap=response.token_gap,
        )
        await recorder.emit(
            "model.response",
            turn=turn,
            message=response.message,
            reasoning=response.reasoning,
            finish_reason=response.finish_reason,
            usage={
                "input_tokens": usage.input_tokens,
                "output_tokens": usage.output_tokens,
                "cached_tokens": usage.cached_tokens,
                "reasoning_tokens": usage.reasoning_tokens,
            },
            latency_sec=round(response.duration_s, 6),
        )
        return response.message


class _RunState:
    """What one run accumulates: transcript, usage, response ids."""

    def __init__(self, model: str) -> None:
        self.model = model
        self.client: ChatClient | None = None
        self.transcript: list[dict[str, Any]] = []
        self.usage = Usage()
        self.response_ids: list[str | None] = []
        self.finish_reasons: list[str | None] = []
        self.tokens = TokenTrace()
        #: Reply texts cut to MAX_REPLY_CHARS: ``{"field", "chars", "turn"}``.
        self.cuts: list[dict[str, Any]] = []


def _initial_messages(task: Task, system_prompt: str | None) -> list[dict[str, Any]]:
    value = task.input
    if isinstance(value, str):
        messages = [{"role": "user", "content": value}]
    elif isinstance(value, list):
        messages = [dict(m) for m in value]
    else:
        messages = [{"role": "user", "content": json.dumps(value, ensure_ascii=False)}]
    if system_prompt is not None and not (messages and messages[0].get("role") == "system"):
        messages.insert(0, {"role": "system", "content": system_prompt})
    return messages


def _last_assistant_text(messages: list[dict[str, Any]]) -> str | None:
    for message in reversed(messages):
        if message.get("role") == "assistant":
            content = message.get("content")
            if isinstance(content, list):
                return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
            return content if isinstance(content, str) else ""
    return None


def _check_limits(state: _RunState, context: RunContext) -> None:
    """Before a model call: stop when a token, cost or message limit is reached."""
    limits = context.limits
    if limits.token_limit is None and limits.cost_limit is None and limits.message_limit is None:
        return
    hit = context.limit_hit(state.usage, len(state.transcript))
    if hit is not None:
        raise _LimitHit(*hit)
