"""OpenAI chat completions: an :class:`Answer` as a ``chat.completion`` or as stream chunks.

With ``logprobs: true`` (and ``top_logprobs``) in the request, choices carry
``logprobs.content``; with vLLM's ``return_token_ids: true`` (or the reply's
``token_ids``), the completion has ``prompt_token_ids`` and each choice
``token_ids``. Tokens come from :mod:`agentkit.testing.tokens`; the
completion's tokens are those of the reasoning, then the content, then each
tool call's arguments.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agentkit._scripted import tokens
from agentkit._scripted.answer import (
    THINK_OPEN,
    Answer,
    completion_segments,
    logprob_at,
    prompt_token_ids,
    split,
    sse,
)
from agentkit._scripted.script import Reply, RequestView
from agentkit._sse import sse_event

__all__ = ["error_body", "events", "render"]

DONE = sse_event("[DONE]")


class _Tokens:
    """What the request asked for at token level, and the logprob of each token."""

    def __init__(self, reply: Reply, body: Mapping[str, Any], view: RequestView) -> None:
        self.ids = reply.token_ids or body.get("return_token_ids") is True
        self.logprobs = body.get("logprobs") is True
        top = body.get("top_logprobs")
        self.top = top if isinstance(top, int) and not isinstance(top, bool) and top > 0 else 0
        self.reply = reply
        self.view = view
        self.position = 0
        self.pieces = 0  # pieces of completion text annotated so far (Reply.drop_token_chunks)

    @property
    def any(self) -> bool:
        return self.ids or self.logprobs

    def prompt_ids(self) -> list[int]:
        # segment by segment, as chat templates' special tokens cut a prompt: the next
        # turn's prompt then starts with this prompt and the completion sampled after it
        return prompt_token_ids(
            self.view, tool_calls_as_json=self.reply.tool_calls_in_prompt == "json"
        )

    def annotate(self, choice: dict[str, Any], text: str) -> None:
        """Add ``token_ids`` and ``logprobs`` for ``text``, the next completion tokens
        (none when the reply drops this piece's, ``Reply.drop_token_chunks``)."""
        pieces = tokens.pieces(text)
        dropped = self.pieces in self.reply.drop_token_chunks
        self.pieces += 1
        if dropped:
            self.position += len(pieces)
            return
        if self.ids:
            choice["token_ids"] = [*choice.get("token_ids", []), *tokens.encode(text)]
        if self.logprobs:
            entries = []
            for piece in pieces:
                value = logprob_at(self.reply, self.position)
                self.position += 1
                entry: dict[str, Any] = {
                    "token": piece,
                    "logprob": value,
                    "bytes": list(piece.encode("utf-8")),
                    "top_logprobs": [],
                }
                for rank in range(self.top):
                    alt = piece if rank == 0 else f"<alt{rank}>"
                    entry["top_logprobs"].append(
                        {"token": alt, "logprob": value - rank, "bytes": list(alt.encode())}
                    )
                entries.append(entry)
            logprobs = choice.get("logprobs") or {"content": [], "refusal": None}
            logprobs["content"] = logprobs["content"] + entries
            choice["logprobs"] = logprobs


def _aligned(text: str, size: int) -> list[str]:
    """``text`` in pieces of at most ``size`` characters that never cut a token."""
    out: list[str] = []
    for piece in tokens.pieces(text):
        if out and len(out[-1]) + len(piece) <= size:
            out[-1] += piece
        else:
            out.append(piece)
    return out


def _usage(answer: Answer) -> dict[str, Any]:
    return {
        "prompt_tokens": answer.prompt_tokens,
        "completion_tokens": answer.completion_tokens,
        "total_tokens": answer.prompt_tokens + answer.completion_tokens,
        "prompt_tokens_details": {"cached_tokens": answer.cached_tokens},
        "completion_tokens_details": {"reasoning_tokens": answer.reasoning_tokens},
    }


def _envelope(answer: Answer, obj: str) -> dict[str, Any]:
    return {
        "id": f"chatcmpl-{answer.tag}",
        "object": obj,
        "created": answer.created,
        "model": answer.model,
        "system_fingerprint": "fp_agentkit",
    }


def _tool_calls(answer: Answer) -> list[dict[str, Any]]:
    return [
        {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
        for c in answer.calls
    ]


def render(answer: Answer, reply: Reply, body: Mapping[str, Any], view: RequestView) -> Any:
    """The non-streamed ``chat.completion`` body."""
    message: dict[str, Any] = {"role": "assistant", "content": answer.content, "refusal": None}
    if answer.reasoning is not None:
        message[reply.reasoning_field] = answer.reasoning
    if answer.calls:
        message["tool_calls"] = _tool_calls(answer)
    choice: dict[str, Any] = {
        "index": 0,
        "message": message,
        "logprobs": None,
        "finish_reason": answer.finish_reason,
    }
    out: dict[str, Any] = {**_envelope(answer, "chat.completion"), "choices": [choice]}
    token_level = _Tokens(reply, body, view)
    if token_level.any:
        if token_level.ids:
            choice["token_ids"] = []
        # piece by piece, as a stream cuts them: the same tokens either way (the
        # template's markers and the end-of-turn token included, as vLLM's ids have them)
        for kind, text in completion_segments(answer):
            if kind in ("reasoning", "content", "arguments"):
                for piece in _aligned(text, answer.chunk_size):
                    token_level.annotate(choice, piece)
            else:
                token_level.annotate(choice, text)
        if token_level.ids:
            out["prompt_token_ids"] = token_level.prompt_ids()
    out["usage"] = _usage(answer)
    return out


def events(answer: Answer, reply: Reply, body: Mapping[str, Any], view: RequestView) -> list[bytes]:
    """The server-sent events of the streamed answer, ``data: [DONE]`` last."""
    options = body.get("stream_options")
    include_usage = isinstance(options, Mapping) and bool(options.get("include_usage"))
    token_level = _Tokens(reply, body, view)
    cut = _aligned if token_level.any else split
    size = answer.chunk_size
    envelope = _envelope(answer, "chat.completion.chunk")
    out: list[bytes] = []

    def add(delta: dict[str, Any], finish: str | None = None, text: str | None = None) -> None:
        choice: dict[str, Any] = {
            "index": 0,
            "delta": delta,
            "logprobs": None,
            "finish_reason": finish,
        }
        if token_level.ids and "role" not in delta:  # vLLM's first chunk has no token_ids
            choice["token_ids"] = []
        if text:
            token_level.annotate(choice, text)
        chunk: dict[str, Any] = {**envelope, "choices": [choice]}
        if not out and token_level.ids:
            chunk["prompt_token_ids"] = token_level.prompt_ids()
        if include_usage:
            chunk["usage"] = None
        out.append(sse(chunk))

    # (delta, the completion text whose tokens the chunk carries), in order; as vLLM
    # streams, every sampled token's ids go out on some chunk: a template's marker the
    # tool or reasoning parser holds back on a chunk of its own with an empty delta
    # (when ids or logprobs were asked for), the end-of-turn token on the finishing chunk
    chunks: list[tuple[dict[str, Any], str | None]] = []
    calls = iter(enumerate(answer.calls))
    for kind, text in completion_segments(answer):
        if kind == "reasoning":
            chunks += [({reply.reasoning_field: p}, p) for p in cut(text, size)]
        elif kind == "content":
            chunks += [({"content": p}, p) for p in cut(text, size)]
        elif kind == "open" and text != THINK_OPEN:  # a tool call's head: its id and name
            index, call = next(calls)
            head = {"name": call.name, "arguments": ""}
            part = {"index": index, "id": call.id, "type": "function", "function": head}
            chunks.append(({"tool_calls": [part]}, text if token_level.any else None))
        elif kind == "arguments":
            for p in cut(text, size):
                part = {"index": index, "function": {"arguments": p}}
                chunks.append(({"tool_calls": [part]}, p))
        elif token_level.any or kind == "end":  # a marker, the end-of-turn token
            chunks.append(({}, text if token_level.any else None))
    if not chunks:
        chunks.append(({}, None))  # the finishing chunk of an empty answer
    add({"role": "assistant", "content": "", "refusal": None})
    for n, (delta, carried) in enumerate(chunks):
        add(delta, answer.finish_reason if n == len(chunks) - 1 else None, carried)
    if include_usage:
        out.append(sse({**envelope, "choices": [], "usage": _usage(answer)}))
    out.append(DONE)
    return out


def error_body(status: int, message: str) -> dict[str, Any]:
    """An OpenAI error body (chat completions and the Responses API share it)."""
    kinds: dict[int, tuple[str, str | None]] = {
        429: ("requests", "rate_limit_exceeded"),
        404: ("invalid_request_error", "not_found"),
        400: ("invalid_request_error", "invalid_request"),
        401: ("invalid_request_error", "invalid_api_key"),
    }
    fallback = ("server_error" if status >= 500 else "invalid_request_error", None)
    kind = kinds.get(status, fallback)
    return {"error": {"message": message, "type": kind[0], "param": None, "code": kind[1]}}
