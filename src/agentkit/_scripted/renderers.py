"""How the scripted server renders an answer in each protocol, and what token data it sends.

Each protocol's module (:mod:`~agentkit._scripted.chat_wire`,
:mod:`~agentkit._scripted.sglang_wire`, :mod:`~agentkit._scripted.messages_wire`,
:mod:`~agentkit._scripted.responses_wire`) renders a whole answer, a stream's events and
an error's body; :func:`renderers` picks them for a server.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Literal, NamedTuple

from agentkit._scripted import chat_wire, messages_wire, responses_wire, sglang_wire
from agentkit._scripted.answer import Answer, completion_token_ids, logprob_at, prompt_token_ids
from agentkit._scripted.script import Reply, RequestView

__all__ = ["AnswerRenderer", "Engine", "renderers", "sent_tokens"]


class AnswerRenderer(NamedTuple):
    """How one protocol renders an answer: whole (``render``), as the events of a stream
    (``events``), and an error's body (``error_body``)."""

    render: Callable[[Answer, Reply, Mapping[str, Any], RequestView], Any]
    events: Callable[[Answer, Reply, Mapping[str, Any], RequestView], list[bytes]]
    error_body: Callable[[int, str], Any]


#: Whose chat completions' token fields the server answers in.
Engine = Literal["vllm", "sglang"]


def renderers(engine: Engine = "vllm") -> dict[str, AnswerRenderer]:
    """Each protocol's renderer; chat completions' token fields as ``engine`` gives them."""
    chat = (
        AnswerRenderer(sglang_wire.render, sglang_wire.events, sglang_wire.error_body)
        if engine == "sglang"
        else AnswerRenderer(chat_wire.render, chat_wire.events, chat_wire.error_body)
    )
    return {
        "chat": chat,
        "messages": AnswerRenderer(
            messages_wire.render, messages_wire.events, messages_wire.error_body
        ),
        "responses": AnswerRenderer(
            responses_wire.render, responses_wire.events, chat_wire.error_body
        ),
    }


def sent_tokens(
    answer: Answer,
    reply: Reply,
    body: Mapping[str, Any],
    view: RequestView,
    engine: Engine = "vllm",
) -> dict[str, Any]:
    """The token data an answer carries (for the request log): vLLM's fields of chat
    completions and the Responses API, when asked (or the reply's ``token_ids``);
    SGLang's, with ``engine="sglang"``."""
    api = view.api
    if api == "chat" and engine == "sglang" and view.stream:
        sends = sglang_wire.stream_ids_asked(body) == (True, True)
    elif api == "chat":
        sends = reply.token_ids or body.get("return_token_ids") is True
    elif api == "responses":
        sends = responses_wire.sends_token_ids(reply, body)
    else:
        sends = False
    if not sends:
        return {}
    completion = completion_token_ids(answer)
    out: dict[str, Any] = {
        "prompt_token_ids": prompt_token_ids(
            view, tool_calls_as_json=reply.tool_calls_in_prompt == "json"
        ),
        "completion_token_ids": completion,
    }
    if api == "chat" and body.get("logprobs") is True:
        out["completion_logprobs"] = [logprob_at(reply, i) for i in range(len(completion))]
    return out
