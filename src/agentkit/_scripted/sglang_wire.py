"""SGLang's chat completions (SGLang 0.5.23), for the scripted server's ``engine="sglang"``.

Written from SGLang's own protocol and serving code
(``sglang/srt/entrypoints/openai/protocol.py`` and ``serving_chat.py``): SGLang
does not serve on a CPU from the package index (its CPU attention needs a
CPU build of ``sgl-kernel`` that the index does not have), so its shapes are
kept here rather than checked against a running server.

- ``return_token_ids`` or ``return_prompt_token_ids`` on a streamed request:
  HTTP 400 with SGLang's message (it gives no ids per chunk);
- a whole completion: ``return_token_ids`` puts the ids on the choice, as
  ``prompt_token_ids`` and ``response_token_ids`` (none at the top, no
  ``token_ids``); ``return_prompt_token_ids`` the prompt's alone;
- a stream: ``return_input_ids_in_sglext`` and ``return_output_ids_in_sglext``
  (SGLang also takes them as headers; this server does not) add one chunk
  without choices after the
  last one with a choice, before the usage: ``sglext`` with ``input_ids`` (the
  prompt's) and ``output_ids`` (one list per choice);
- reasoning as ``reasoning_content``; everything else as OpenAI's.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from agentkit._scripted import chat_wire
from agentkit._scripted.answer import Answer, completion_token_ids, prompt_token_ids, sse
from agentkit._scripted.script import Reply, RequestView
from agentkit._sse import event_payloads

__all__ = ["error_body", "events", "refusal", "render", "stream_ids_asked"]

#: SGLang's answer to a streamed request that asks for token ids.
STREAM_REFUSAL = (
    "return_token_ids is not supported with streaming on /v1/chat/completions. "
    "Please set stream=false when using return_token_ids=true."
)
PROMPT_STREAM_REFUSAL = (
    "return_prompt_token_ids is not supported with streaming. "
    "Please set stream=false when using return_prompt_token_ids=true."
)


def error_body(status: int, message: str) -> dict[str, Any]:
    """SGLang's error body (``ErrorResponse``)."""
    kind = "BadRequestError" if status == 400 else "InternalServerError"
    return {"object": "error", "message": message, "type": kind, "param": None, "code": status}


def refusal(body: Mapping[str, Any]) -> str | None:
    """SGLang's 400 message for ``body``, when it refuses it."""
    if body.get("stream") is True:
        if body.get("return_prompt_token_ids") is True:
            return PROMPT_STREAM_REFUSAL
        if body.get("return_token_ids") is True:
            return STREAM_REFUSAL
    return None


def stream_ids_asked(body: Mapping[str, Any]) -> tuple[bool, bool]:
    """(prompt ids, output ids) a streamed request asks for in SGLang's ``sglext``."""
    return (
        body.get("return_input_ids_in_sglext") is True,
        body.get("return_output_ids_in_sglext") is True,
    )


def _prompt(reply: Reply, view: RequestView) -> list[int]:
    return prompt_token_ids(view, tool_calls_as_json=reply.tool_calls_in_prompt == "json")


def render(answer: Answer, reply: Reply, body: Mapping[str, Any], view: RequestView) -> Any:
    """The non-streamed completion, SGLang's way."""
    asked = body.get("return_token_ids") is True or reply.token_ids
    plain = {k: v for k, v in body.items() if k != "return_token_ids"}
    out: dict[str, Any] = chat_wire.render(answer, reply, plain, view)
    choice = out["choices"][0]
    if "reasoning" in choice["message"]:  # SGLang's name for it
        choice["message"]["reasoning_content"] = choice["message"].pop("reasoning")
    if asked or body.get("return_prompt_token_ids") is True:
        choice["prompt_token_ids"] = _prompt(reply, view)
    if asked:
        choice["response_token_ids"] = completion_token_ids(answer)
    return out


def events(answer: Answer, reply: Reply, body: Mapping[str, Any], view: RequestView) -> list[bytes]:
    """The streamed completion, SGLang's way (:func:`refusal` is checked before)."""
    plain = {k: v for k, v in body.items() if k != "return_token_ids"}
    out = [
        e.replace(b'"reasoning":', b'"reasoning_content":')
        for e in chat_wire.events(answer, reply, plain, view)
    ]
    prompt, output = stream_ids_asked(body)
    if prompt or output:
        sglext: dict[str, Any] = {}
        if prompt:
            sglext["input_ids"] = _prompt(reply, view)
        if output:
            sglext["output_ids"] = [completion_token_ids(answer)]
        [(_, text)] = event_payloads(out[0])
        first = json.loads(text)
        chunk = {
            "id": first["id"],
            "object": "chat.completion.chunk",
            "created": first["created"],
            "model": first["model"],
            "choices": [],
            "sglext": sglext,
        }
        options = body.get("stream_options")
        usage = isinstance(options, Mapping) and bool(options.get("include_usage"))
        at = len(out) - (2 if usage else 1)  # before the usage chunk and [DONE]
        out.insert(at, sse(chunk))
    return out
