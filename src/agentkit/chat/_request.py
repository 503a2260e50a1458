"""What every call of one client sends besides the model and the messages.

Sampling arguments are read as the ``openai`` client's
``chat.completions.create`` reads its keywords: the ones the API knows go in
the body as they are; a given ``extra_body``, then the unknown arguments, are
merged in over them; ``extra_headers`` and ``extra_query`` become request
headers and query.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["CLIENT_ARGS", "OWNED_ARGS", "RequestShape"]

#: Sampling arguments the openai client takes as keywords; others go in ``extra_body``.
CLIENT_ARGS = frozenset(
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
#: Arguments the client sets itself: given as sampling arguments, they are ignored.
OWNED_ARGS = frozenset({"model", "messages", "stream", "stream_options", "timeout"})


class RequestShape:
    """The body fields, headers and query of every call, from the sampling arguments."""

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
        sampling: Mapping[str, Any],
        max_tokens: int | None,
        *,
        stream: bool,
        token_ids: bool,
    ) -> RequestShape:
        """The shape ``chat.completions.create`` would send for these arguments.

        ``max_tokens``, when given, is sent over a sampling argument of that
        name; ``stream`` adds ``stream`` and ``stream_options.include_usage``
        (before ``extra_body``, which may change them); ``token_ids`` asks for
        vLLM's ``return_token_ids`` and ``logprobs`` unless the arguments set them.
        """
        body: dict[str, Any] = {}
        given_extra: dict[str, Any] = {}
        extra_body: dict[str, Any] = {}
        headers: dict[str, Any] = {}
        query: dict[str, Any] | None = None
        for key, value in sampling.items():
            if key in OWNED_ARGS:
                continue
            if key == "extra_body":
                given_extra = dict(value or {})
            elif key == "extra_headers":
                headers.update(value or {})
            elif key == "extra_query":
                if value:
                    query = dict(value)
            elif key in CLIENT_ARGS:
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
        if token_ids:  # vLLM's names; sampling arguments may set them otherwise
            body.setdefault("return_token_ids", True)
            body.setdefault("logprobs", True)
        return cls(body, headers, query)
