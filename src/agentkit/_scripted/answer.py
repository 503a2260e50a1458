"""One scripted reply, resolved for one request, before any wire protocol renders it.

:class:`Answer` holds what every protocol needs: the text, reasoning, tool
calls (with their arguments as JSON text), the finish reason in chat
completions' words, and the token counts. The protocol modules
(``chat_wire``, ``messages_wire``, ``responses_wire``) render it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import attrs

from agentkit._scripted import tokens
from agentkit._scripted.script import Reply, RequestView, message_text
from agentkit._sse import sse_event

__all__ = [
    "ENDED",
    "END_OF_TURN",
    "THINK_OPEN",
    "Answer",
    "Call",
    "completion_segments",
    "estimate_prompt_tokens",
    "estimate_tokens",
    "prompt_segments",
    "prompt_text",
    "segment_texts",
    "split",
    "sse",
]


@attrs.frozen
class Call:
    """One tool call: its id, name and arguments as JSON text (or raw text)."""

    id: str
    name: str
    arguments: str

    def input_object(self) -> Any:
        """The arguments parsed (Anthropic sends an object); the raw text when not JSON."""
        try:
            return json.loads(self.arguments)
        except ValueError:
            return self.arguments


@attrs.define  # built once per request: a plain (not frozen) init is cheaper
class Answer:
    """A reply resolved for a request: placeholders filled, ids chosen, usage counted."""

    seq: int
    created: int
    model: str
    content: str | None
    reasoning: str | None
    calls: list[Call]
    finish_reason: str
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int
    cache_creation_tokens: int
    reasoning_tokens: int
    chunk_size: int

    def arguments(self) -> list[str]:
        """Each tool call's arguments text, in order."""
        return [call.arguments for call in self.calls]

    @property
    def tag(self) -> str:
        """The sequence number as ids use it (``000042``)."""
        return f"{self.seq:06d}"

    @classmethod
    def build(cls, reply: Reply, view: RequestView, seq: int, created: int) -> Answer:
        """Resolve ``reply`` for the request ``view``; ``seq`` numbers the ids."""

        def fill(text: str) -> str:
            if "{{" not in text:
                return text
            return (
                text.replace("{{last_user}}", view.last_user)
                .replace("{{turn}}", str(view.turn))
                .replace("{{model}}", view.model)
            )

        content = fill(reply.content) if reply.content is not None else None
        if content is None and not reply.tool_calls:
            content = ""
        prefix = "toolu" if view.api == "messages" else "call"
        calls = [
            Call(
                id=call.id or f"{prefix}_{seq:06d}_{i}",
                name=call.name,
                arguments=fill(
                    call.arguments
                    if isinstance(call.arguments, str)
                    else json.dumps(call.arguments)
                ),
            )
            for i, call in enumerate(reply.tool_calls)
        ]
        finish = reply.finish_reason or ("tool_calls" if calls else "stop")
        spec = reply.usage
        prompt = spec.prompt_tokens if spec and spec.prompt_tokens is not None else None
        if prompt is None:
            prompt = estimate_prompt_tokens(view)
        reasoning = fill(reply.reasoning) if reply.reasoning is not None else None
        thinking = spec.reasoning_tokens if spec and spec.reasoning_tokens is not None else None
        if thinking is None:
            thinking = len(tokens.pieces(reasoning)) if reasoning else 0
        completion = spec.completion_tokens if spec and spec.completion_tokens is not None else None
        if completion is None:
            # the completion's tokens, as vLLM counts them: every id it samples, the
            # template's wrappers and the end-of-turn token included
            texts = segment_texts(reasoning, content, calls, finish)
            completion = sum(len(tokens.pieces(text)) for _, text in texts)
        return cls(
            seq=seq,
            created=created,
            model=view.model,
            content=content,
            reasoning=reasoning,
            calls=calls,
            finish_reason=finish,
            prompt_tokens=prompt,
            completion_tokens=completion,
            cached_tokens=spec.cached_tokens if spec else 0,
            cache_creation_tokens=spec.cache_creation_tokens if spec else 0,
            reasoning_tokens=thinking,
            chunk_size=reply.chunk_size,
        )


def _text_of(message: Mapping[str, Any]) -> str:
    text = message_text(message)
    calls = message.get("tool_calls")
    if calls:
        text += json.dumps(calls)
    return text


#: The stand-in chat template's markers around what a model samples, as a real
#: template's (Qwen's ``<think>``, Hermes ``<tool_call>``, ChatML's ``<|im_end|>``):
#: they are tokens of the completion (in its ids, counted in its usage) that the
#: answer's text does not show.
THINK_OPEN = "<think>"
THINK_CLOSE = "</think>"
CALL_CLOSE = "}</tool_call>"
END_OF_TURN = "<|end|>"
#: The finish reasons of a turn the model ended itself (its last token is
#: :data:`END_OF_TURN`); a turn cut at its length limit has none.
ENDED = frozenset({"stop", "tool_calls"})


def call_open(name: str) -> str:
    """A tool call's tokens before its arguments (Hermes: ``<tool_call>{"name": ...``)."""
    return f'<tool_call>{{"name": {json.dumps(name)}, "arguments": '


def segment_texts(
    reasoning: str | None, content: str | None, calls: list[Call], finish: str | None
) -> list[tuple[str, str]]:
    """A completion's texts in token order, each with its kind: ``open``/``close``
    (a template's markers), ``reasoning``, ``content``, ``arguments`` (one per call),
    ``end`` (the end-of-turn token, when the turn ended). Empty texts are left out."""
    out: list[tuple[str, str]] = []
    if reasoning:
        out += [("open", THINK_OPEN), ("reasoning", reasoning), ("close", THINK_CLOSE)]
    if content:
        out.append(("content", content))
    for call in calls:
        out += [("open", call_open(call.name)), ("arguments", call.arguments)]
        out.append(("close", CALL_CLOSE))
    if finish in ENDED:
        out.append(("end", END_OF_TURN))
    return [(kind, text) for kind, text in out if text]


def _assistant_segments(message: Mapping[str, Any]) -> list[str]:
    """An assistant message as its completion's tokens were cut (:func:`segment_texts`):
    its reasoning when it carries it (``reasoning`` or ``reasoning_content``) between
    the think markers, its text, then each tool call wrapped as sampled, and the
    end-of-turn token, so a prompt that goes on from a completion extends its tokens."""
    reasoning = message.get("reasoning", message.get("reasoning_content"))
    calls = []
    for call in message.get("tool_calls") or []:
        function = call.get("function") if isinstance(call, Mapping) else None
        function = function if isinstance(function, Mapping) else {}
        arguments = function.get("arguments")
        name = function.get("name")
        calls.append(
            Call(
                id="",
                name=name if isinstance(name, str) else "",
                arguments=arguments if isinstance(arguments, str) else json.dumps(arguments),
            )
        )
    text = message_text(message)
    reasoning = reasoning if isinstance(reasoning, str) else None
    return [t for _, t in segment_texts(reasoning, text, calls, "stop")]


def prompt_segments(view: RequestView, *, tool_calls_as_json: bool = False) -> list[str]:
    """The request's prompt as a chat template cuts it: per message the role marker
    ``<|role|>``, the text and ``\n``; then the generation prompt ``<|assistant|>``.
    An assistant message's text is cut as its completion was (see
    :func:`_assistant_segments`): its tokens are those the model sampled.

    ``tool_calls_as_json`` (``Reply.tool_calls_in_prompt: "json"``): an assistant
    message with tool calls is written as its text, then the calls as JSON, as a
    template that shows a tool call otherwise than it was sampled: the prompt then
    does not extend the completion that made it (a prefix break)."""
    out: list[str] = []
    for m in view.messages:
        if m.get("role") == "assistant" and not (tool_calls_as_json and m.get("tool_calls")):
            out += ["<|assistant|>", *_assistant_segments(m), "\n"]
        else:
            out += [f"<|{m.get('role')}|>", _text_of(m), "\n"]
    return [*out, "<|assistant|>"]


def prompt_text(view: RequestView) -> str:
    """The request's messages as one text (``<|role|>text`` lines), as a chat template would."""
    return "".join(prompt_segments(view))


def estimate_prompt_tokens(view: RequestView) -> int:
    """The prompt tokens a reply reports when the script does not say: 4 per message + text."""
    return sum(4 + estimate_tokens(_text_of(m)) for m in view.messages)


def estimate_tokens(text: str) -> int:
    """A deterministic stand-in for a tokenizer: about 4 characters per token."""
    return (len(text) + 3) // 4


def split(text: str, size: int) -> list[str]:
    """``text`` in pieces of ``size`` characters (none for empty text)."""
    return [text[i : i + size] for i in range(0, len(text), size)]


def sse(data: Any, event: str | None = None) -> bytes:
    """One server-sent event (:func:`agentkit._sse.sse_event`) of ``data`` as JSON, in
    Python's default spelling (``", "``, ``": "``, ASCII), as this server writes JSON."""
    return sse_event(json.dumps(data), event)


def prompt_token_ids(view: RequestView, *, tool_calls_as_json: bool = False) -> list[int]:
    """The prompt's token ids, segment by segment (see :func:`prompt_segments`)."""
    segments = prompt_segments(view, tool_calls_as_json=tool_calls_as_json)
    return [i for text in segments for i in tokens.encode(text)]


def completion_texts(answer: Answer) -> list[str]:
    """The completion's texts in token order (:func:`segment_texts`): the reasoning
    between think markers, the content, each tool call wrapped as Hermes writes it, and
    the end-of-turn token when the turn ended."""
    return [text for _, text in completion_segments(answer)]


def completion_segments(answer: Answer) -> list[tuple[str, str]]:
    """:func:`segment_texts` of ``answer``."""
    return segment_texts(answer.reasoning, answer.content, answer.calls, answer.finish_reason)


def completion_token_ids(answer: Answer) -> list[int]:
    """The completion's token ids (those of :func:`completion_texts`)."""
    return [i for text in completion_texts(answer) for i in tokens.encode(text)]


def logprob_at(reply: Reply, index: int) -> float:
    """The logprob of completion token ``index``: the reply's ``logprobs`` in turn, else
    ``-0.1, -0.2, ... -0.9`` again and again."""
    if reply.logprobs:
        return reply.logprobs[index % len(reply.logprobs)]
    return -round(0.1 * (1 + index % 9), 1)
