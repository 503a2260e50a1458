"""The built-in ``chat`` harness: a task's input sent to an OpenAI-compatible endpoint.

Text input becomes one user message. Chat-message input is replayed turn by
turn: every user message that is not already followed by an assistant
message gets one model call, whose reply is appended before going on, so a
task with 8 user messages makes 8 calls. Structured (dict) input is sent as
JSON text. The harness never runs tools; tool calls in a reply are recorded
in the transcript as they came.

Calls go to the endpoint as plain JSON over pooled connections
(:mod:`agentkit._endpoint`, on ``httpcore``): the ``openai`` package is never
imported, because importing it takes longer than a whole one-task run.
Connections are reused across rollouts, sized from the run's concurrency.

>>> result = await ChatHarness().run(task, RunContext(model="m", base_url=url))  # doctest: +SKIP
"""

from __future__ import annotations

import json
import os
import time
import weakref
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import anyio

from agentkit._context import RunContext
from agentkit._endpoint import EndpointError, ModelEndpoint, retry_after_seconds
from agentkit._errors import HarnessError, ValidationError
from agentkit._events import EventCallback, EventRecorder
from agentkit._limits import json_type
from agentkit._redact import MARKER
from agentkit._result import HarnessResult
from agentkit._task import Task
from agentkit._token_trace import TokenTrace, response_tokens
from agentkit._usage import Usage

if TYPE_CHECKING:
    import asyncio

__all__ = [
    "MAX_REPLY_BYTES",
    "MAX_REPLY_CHARS",
    "ChatHarness",
    "retry_after_seconds",
]

#: Sampling arguments the openai client takes as keywords; others go in ``extra_body``.
_CLIENT_ARGS = frozenset(
    {
        "temperature",
        "top_p",
        "max_tokens",
        "max_completion_tokens",
        "stop",
        "seed",
        "n",
        "presence_penalty",
        "frequency_penalty",
        "logit_bias",
        "logprobs",
        "top_logprobs",
        "response_format",
        "tools",
        "tool_choice",
        "parallel_tool_calls",
        "reasoning_effort",
        "user",
        "metadata",
        "service_tier",
        "extra_body",
        "extra_headers",
        "extra_query",
    }
)
_OWNED_ARGS = frozenset({"model", "messages", "stream", "stream_options", "timeout"})

#: A reply's text (content, reasoning, each tool call's arguments) longer than
#: this many characters is cut to it; ``raw["replies_cut"]`` and a ``log``
#: event say so.
MAX_REPLY_CHARS = 1_000_000
#: A reply body (not streamed) larger than this many bytes is refused as a bad
#: response: JSON cannot be cut, and reading it would hold it all in memory.
MAX_REPLY_BYTES = 64 * 1024 * 1024


class _ModelCallError(Exception):
    """A model call failed; ``kind`` is the HarnessResult ``error_kind``.

    ``retry_after``: the seconds the server asked to wait (``Retry-After``), if any.
    """

    def __init__(self, kind: str, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.kind = kind
        self.retry_after = retry_after


class _TurnLimit(Exception):
    pass


class _LimitHit(Exception):
    """A token, cost or message limit of the rollout was reached."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


#: Connections per endpoint when the run does not say (``RunContext.max_connections``).
_DEFAULT_CONNECTIONS = 100


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
        from agentkit._errors import OptionError

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
        # one client per (event loop, base URL, key): a client's connection
        # pool belongs to the loop that opened it
        self._clients: weakref.WeakKeyDictionary[
            asyncio.AbstractEventLoop, dict[tuple[Any, ...], ModelEndpoint]
        ] = weakref.WeakKeyDictionary()

    def __repr__(self) -> str:
        return f"ChatHarness(model={self.model!r}, stream={self.stream!r})"

    def __getstate__(self) -> dict[str, Any]:
        """Pickled without its clients (they belong to this process's event loops):
        the Ray executor sends the harness to worker processes, which open their own."""
        state = dict(self.__dict__)
        state.pop("_clients", None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._clients = weakref.WeakKeyDictionary()

    async def aclose(self) -> None:
        """Close the HTTP clients this harness opened on the running event loop.

        Optional: clients are reused across runs on the same loop, and a later
        run opens new ones.
        """
        import asyncio

        clients = self._clients.pop(asyncio.get_running_loop(), {})
        for client in clients.values():
            await client.aclose()

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
        model = self.model or context.model
        if not model:
            raise HarnessError(
                "the chat harness needs a model: pass RunContext(model=...), "
                "ChatHarness(model=...) or -H model=NAME"
            )
        recorder = EventRecorder(task.task_id, context.rollout_id, on_event)
        conversation = _initial_messages(task, self.system_prompt)
        state = _RunState(model=model, api_key=context.resolved_api_key)
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
        except _ModelCallError as exc:
            status, error_kind, error = "failed", exc.kind, state.redact(str(exc))
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

    async def _call(
        self, state: _RunState, context: RunContext, recorder: EventRecorder
    ) -> dict[str, Any]:
        """One chat completion; returns the assistant message."""
        client = self._client(self.base_url or context.base_url, state.api_key, context)
        request = state.request
        if request is None:
            max_tokens = (
                self.max_tokens if self.max_tokens is not None else context.limits.max_tokens
            )
            request = state.request = _Request.build(
                context.sampling_args,
                max_tokens,
                stream=self.stream,
            )
            if self.token_ids:  # vLLM's names; sampling arguments may set them otherwise
                request.body.setdefault("return_token_ids", True)
                request.body.setdefault("logprobs", True)
        turn = state.usage.requests
        state.last_reasoning = None
        transcript = state.transcript
        await recorder.emit(
            "model.request",
            turn=turn,
            model=state.model,
            stream=self.stream,
            n_messages=len(transcript),
            last_message=transcript[-1] if transcript else None,
        )
        started = time.monotonic()
        body = {"model": state.model, "messages": transcript, **request.body}
        call = self._streamed if self.stream else self._plain
        outcome = None
        try:
            # request_timeout bounds the whole call: the HTTP client's timeout is per
            # read, so a server dripping a byte a second would never reach it
            with anyio.move_on_after(self.request_timeout):
                outcome = await call(client, state, body, request)
        except _ModelCallError:
            raise
        except EndpointError as exc:
            raise _ModelCallError(exc.kind, str(exc), exc.retry_after) from exc
        except Exception as exc:
            raise _ModelCallError(
                "model_error", f"the model call failed: {type(exc).__name__}: {exc}"
            ) from exc
        if outcome is None:
            raise _ModelCallError(
                "model_connection",
                "the model request timed out: no complete answer within "
                f"request_timeout={self.request_timeout:g}s",
            )
        message, finish, usage, rid = outcome
        for cut in state.cuts[state.cuts_reported :]:
            cut["turn"] = turn
            await recorder.emit(
                "log",
                level="warning",
                message=f"the model's {cut['field']} had {cut['chars']} characters; "
                f"cut to {MAX_REPLY_CHARS} (MAX_REPLY_CHARS)",
            )
        state.cuts_reported = len(state.cuts)
        state.usage = state.usage + usage
        state.response_ids.append(rid)
        state.finish_reasons.append(finish)
        await recorder.emit(
            "model.response",
            turn=turn,
            message=message,
            reasoning=state.last_reasoning if isinstance(state.last_reasoning, str) else None,
            finish_reason=finish,
            usage={
                "input_tokens": usage.input_tokens,
                "output_tokens": usage.output_tokens,
                "cached_tokens": usage.cached_tokens,
                "reasoning_tokens": usage.reasoning_tokens,
            },
            latency_sec=round(time.monotonic() - started, 6),
        )
        return message

    async def _plain(
        self, client: ModelEndpoint, state: _RunState, body: dict[str, Any], request: _Request
    ) -> tuple[dict[str, Any], str | None, Usage, str | None]:
        data = await client.post_json(
            "/chat/completions",
            body,
            query=request.query,
            headers=request.headers,
            max_bytes=MAX_REPLY_BYTES,
        )
        choice = _first_choice(data)
        state.tokens.add_response(data)
        raw = choice.get("message")
        if not isinstance(raw, dict):
            raise _ModelCallError("model_bad_response", "the model response has no message")
        state.last_reasoning = state.cap(raw.get("reasoning_content"), "reasoning")
        content = raw.get("content")
        if content is not None and not isinstance(content, (str, list)):
            raise _ModelCallError(
                "model_bad_response",
                f"the model response's content is {json_type(content)}, "
                "not a string or a list of parts",
            )
        message: dict[str, Any] = {
            "role": "assistant",
            "content": state.cap(content, "content"),
        }
        calls = raw.get("tool_calls")
        if calls is not None and not isinstance(calls, list):
            raise _ModelCallError(
                "model_bad_response",
                f"the model response's tool_calls is {json_type(calls)}, not a list",
            )
        if calls:
            message["tool_calls"] = [_tool_call(c, state) for c in calls]
        return message, choice.get("finish_reason"), _usage_of(data.get("usage")), data.get("id")

    async def _streamed(
        self, client: ModelEndpoint, state: _RunState, body: dict[str, Any], request: _Request
    ) -> tuple[dict[str, Any], str | None, Usage, str | None]:
        text = _CappedText("content", state)
        thought = _CappedText("reasoning", state)
        calls: dict[int, dict[str, Any]] = {}
        arg_chars: dict[int, int] = {}  # characters of arguments sent, per tool call
        finish: str | None = None
        usage = Usage(requests=1)
        rid: str | None = None
        seen = False
        prompt_ids: list[int] | None = None
        token_ids: list[int] = []
        logprobs: list[float] = []
        async for chunk in client.stream_events(
            "/chat/completions", body, query=request.query, headers=request.headers
        ):
            seen = True
            rid = rid or chunk.get("id")
            if chunk.get("usage") is not None:
                usage = _usage_of(chunk["usage"])
            if isinstance(chunk.get("prompt_token_ids"), list):
                prompt_ids = chunk["prompt_token_ids"]
            for choice in _typed(chunk.get("choices"), list, "a stream chunk's choices") or ():
                choice = _typed(choice, dict, "a stream chunk's choice")
                _, ids, lps = response_tokens({"choices": [choice]})
                token_ids += ids or []
                logprobs += lps or []
                delta = _typed(choice.get("delta"), dict, "a stream chunk's delta") or {}
                content = _typed(delta.get("content"), str, "a stream chunk's content")
                if content:
                    text.append(content)
                reasoning = delta.get("reasoning_content")
                if isinstance(reasoning, str):
                    thought.append(reasoning)
                parts = _typed(delta.get("tool_calls"), list, "a stream chunk's tool_calls")
                for part in parts or ():
                    part = _typed(part, dict, "a stream chunk's tool call")
                    index = part.get("index", 0)
                    if not isinstance(index, int) or isinstance(index, bool):
                        raise _ModelCallError(
                            "model_bad_response",
                            f"a stream chunk's tool call index is {json_type(index)}, "
                            "not an integer",
                        )
                    call = calls.setdefault(
                        index,
                        {"id": "", "type": "function", "function": {"name": "", "arguments": ""}},
                    )
                    if part.get("id"):
                        call["id"] = part["id"]
                    function = _typed(part.get("function"), dict, "a stream chunk's function")
                    if function is not None:
                        name = _typed(function.get("name"), str, "a stream chunk's function name")
                        if name:
                            call["function"]["name"] += name
                        piece = _typed(
                            function.get("arguments"), str, "a stream chunk's function arguments"
                        )
                        if piece:
                            arg_chars[index] = arg_chars.get(index, 0) + len(piece)
                            kept = call["function"]["arguments"]
                            if len(kept) < MAX_REPLY_CHARS:
                                call["function"]["arguments"] = (kept + piece)[:MAX_REPLY_CHARS]
                if choice.get("finish_reason"):
                    finish = choice["finish_reason"]
        if not seen:
            raise _ModelCallError("model_bad_response", "the model stream ended without any chunk")
        state.tokens.add(
            prompt_ids,
            token_ids if prompt_ids is not None or token_ids else None,
            logprobs if len(logprobs) == len(token_ids) and logprobs else None,
        )
        state.last_reasoning = thought.value()
        for chars in arg_chars.values():
            if chars > MAX_REPLY_CHARS:
                state.cuts.append({"field": "arguments", "chars": chars})
        message: dict[str, Any] = {"role": "assistant", "content": text.value()}
        if calls:
            message["tool_calls"] = [calls[i] for i in sorted(calls)]
        elif message["content"] is None:
            message["content"] = ""
        return message, finish, usage, rid

    def _client(
        self, base_url: str | None, api_key: str | None, context: RunContext
    ) -> ModelEndpoint:
        """The endpoint's connection pools on the running loop, shared by every rollout."""
        import asyncio

        loop = asyncio.get_running_loop()
        per_loop = self._clients.get(loop)
        if per_loop is None:
            per_loop = self._clients[loop] = {}
        url = base_url or os.environ.get("OPENAI_BASE_URL") or "https://api.openai.com/v1"
        key = (url, api_key, tuple(sorted(context.headers.items())))
        client = per_loop.get(key)
        if client is None:
            try:
                client = ModelEndpoint(
                    url,
                    api_key=api_key,
                    headers=context.headers,
                    max_connections=context.max_connections or _DEFAULT_CONNECTIONS,
                    timeout=self.request_timeout,
                )
            except EndpointError as exc:
                raise _ModelCallError(exc.kind, str(exc)) from None
            per_loop[key] = client
        return client


class _Request:
    """What every call of one run sends besides the model and the messages."""

    __slots__ = ("body", "headers", "query")

    def __init__(
        self, body: dict[str, Any], headers: dict[str, Any], query: dict[str, Any] | None
    ) -> None:
        self.body = body
        self.headers = headers
        self.query = query

    @classmethod
    def build(
        cls,
        sampling_args: Mapping[str, Any],
        max_tokens: int | None,
        *,
        stream: bool,
    ) -> _Request:
        """The body fields, headers and query, as ``chat.completions.create`` makes them.

        Sampling arguments the API knows go in the body as they are; a given
        ``extra_body``, then the unknown arguments, are merged in over them.
        ``extra_headers`` and ``extra_query`` become request headers and query.
        """
        body: dict[str, Any] = {}
        given_extra: dict[str, Any] = {}
        extra_body: dict[str, Any] = {}
        headers: dict[str, Any] = {}
        query: dict[str, Any] | None = None
        for key, value in sampling_args.items():
            if key in _OWNED_ARGS:
                continue
            if key == "extra_body":
                given_extra = dict(value or {})
            elif key == "extra_headers":
                headers.update(value or {})
            elif key == "extra_query":
                if value:
                    query = dict(value)
            elif key in _CLIENT_ARGS:
                body[key] = value
            else:
                extra_body[key] = value
        if max_tokens is not None:
            body["max_tokens"] = max_tokens
        if stream:
            body["stream"] = True
            body["stream_options"] = {"include_usage": True}
        body.update(given_extra)
        body.update(extra_body)
        return cls(body, headers, query)


def _first_choice(data: Any) -> dict[str, Any]:
    choices = data.get("choices") if isinstance(data, dict) else None
    if not choices or not isinstance(choices, list) or not isinstance(choices[0], dict):
        raise _ModelCallError("model_bad_response", "the model response has no choices")
    return choices[0]


def _without_nulls(value: Any) -> Any:
    """A JSON value without its null object members (as the SDK's ``exclude_none``)."""
    if isinstance(value, dict):
        return {k: _without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_without_nulls(v) for v in value]
    return value


def _typed(value: Any, kind: type[Any], what: str) -> Any:
    """``value`` when it is null or a ``kind`` (a JSON object, list or string); anything
    else is a bad response naming ``what``."""
    if value is None or isinstance(value, kind):
        return value
    names: dict[type[Any], str] = {dict: "an object", list: "a list", str: "a string"}
    expected = names.get(kind, kind.__name__)
    raise _ModelCallError("model_bad_response", f"{what} is {json_type(value)}, not {expected}")


def _tool_call(call: Any, state: _RunState) -> dict[str, Any]:
    """One tool call of a reply, without nulls, its arguments cut to MAX_REPLY_CHARS."""
    if not isinstance(call, dict):
        raise _ModelCallError(
            "model_bad_response", f"a tool call in the model response is {json_type(call)}"
        )
    out: dict[str, Any] = _without_nulls(call)
    function = out.get("function")
    if isinstance(function, dict) and isinstance(function.get("arguments"), str):
        function["arguments"] = state.cap(function["arguments"], "arguments")
    return out


class _CappedText:
    """Streamed text pieces, kept up to MAX_REPLY_CHARS (the rest is counted, not kept)."""

    def __init__(self, field: str, state: _RunState) -> None:
        self.field = field
        self.state = state
        self.parts: list[str] = []
        self.kept = 0
        self.seen = 0

    def append(self, piece: str) -> None:
        self.seen += len(piece)
        room = MAX_REPLY_CHARS - self.kept
        if room > 0:
            kept = piece[:room]
            self.parts.append(kept)
            self.kept += len(kept)

    def value(self) -> str | None:
        if self.seen > MAX_REPLY_CHARS:
            self.state.cuts.append({"field": self.field, "chars": self.seen})
        return "".join(self.parts) or None


class _RunState:
    """What one run accumulates: transcript, usage, response ids."""

    def __init__(self, model: str, api_key: str | None) -> None:
        self.model = model
        self.api_key = api_key
        self.transcript: list[dict[str, Any]] = []
        self.usage = Usage()
        self.response_ids: list[str | None] = []
        self.finish_reasons: list[str | None] = []
        self.last_reasoning: str | None = None
        self.request: _Request | None = None
        self.tokens = TokenTrace()
        #: Reply texts cut to MAX_REPLY_CHARS: ``{"turn", "field", "chars"}``.
        self.cuts: list[dict[str, Any]] = []
        self.cuts_reported = 0

    def cap(self, text: Any, field: str) -> Any:
        """``text`` cut to MAX_REPLY_CHARS (noted in ``cuts``); anything else as it is."""
        if isinstance(text, str) and len(text) > MAX_REPLY_CHARS:
            self.cuts.append({"field": field, "chars": len(text)})
            return text[:MAX_REPLY_CHARS]
        return text

    def redact(self, text: str) -> str:
        """``text`` with the API key (if any) blanked out."""
        if self.api_key:
            text = text.replace(self.api_key, MARKER)
        return text


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


def _usage_of(usage: Any) -> Usage:
    """One call's usage from the ``usage`` object of a response or its last chunk;
    counts of the wrong type are a bad response naming the field."""
    try:
        return Usage.from_openai(usage)
    except ValidationError as exc:
        raise _ModelCallError(
            "model_bad_response", f"the model response is malformed: {exc}"
        ) from None


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
