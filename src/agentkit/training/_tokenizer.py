"""The tokenizer fallback: token ids for the model calls a server returned none for,
made with a local Hugging Face tokenizer the user names (``agentkit export
--tokenizer PATH``), and marked: such calls have ``token_source: "tokenizer"``, and
so has every training sequence they are in. Nothing is re-tokenized otherwise.

``transformers`` is imported only when a tokenizer is asked for (``pip install
'agentkit[tokenizer]'``); the tokenizer is loaded from local files only.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from agentkit._calls import ModelCall
from agentkit._errors import missing_extra
from agentkit.training._errors import ExportError

__all__ = ["load_tokenizer", "retokenized"]


def load_tokenizer(path: str | os.PathLike[str]) -> Any:
    """The Hugging Face tokenizer saved at ``path`` (``AutoTokenizer``, local files only)."""
    try:
        transformers = importlib.import_module("transformers")
    except ImportError:
        raise ExportError(missing_extra("--tokenizer", "transformers", "tokenizer")) from None
    try:
        return transformers.AutoTokenizer.from_pretrained(os.fspath(path), local_files_only=True)
    except (OSError, ValueError) as exc:
        raise ExportError(f"{path}: cannot load a tokenizer from it: {exc}") from None


def _chat_ids(tokenizer: Any, messages: list[Any], tools: Any, *, generation: bool) -> list[int]:
    ids = tokenizer.apply_chat_template(
        messages, tools=tools, add_generation_prompt=generation, tokenize=True, return_dict=False
    )
    return [int(i) for i in ids]


def _reply(call: ModelCall) -> Mapping[str, Any] | None:
    response = call.response
    if not isinstance(response, Mapping):
        return None
    choices = response.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], Mapping):
        return None
    message = choices[0].get("message")
    return message if isinstance(message, Mapping) else None


def retokenized(calls: Sequence[ModelCall], tokenizer: Any, name: str) -> list[ModelCall]:
    """``calls``, each chat call that has no token ids but an answer given token ids by
    ``tokenizer`` (named ``name`` in the note): the prompt is the request's messages
    through the tokenizer's chat template with the generation prompt, the completion
    what the answer adds to them (its text when the template shows the conversation
    otherwise). No logprobs: the sampler's are not known."""
    out = []
    for call in calls:
        request = call.request if isinstance(call.request, Mapping) else {}
        messages = request.get("messages")
        reply = _reply(call)
        if call.has_tokens or call.protocol != "chat" or not messages or reply is None:
            out.append(call)
            continue
        tools = request.get("tools") or None
        prompt = _chat_ids(tokenizer, list(messages), tools, generation=True)
        whole = _chat_ids(tokenizer, [*messages, dict(reply)], tools, generation=False)
        if whole[: len(prompt)] == prompt:
            completion = whole[len(prompt) :]
        else:
            text = reply.get("content") if isinstance(reply.get("content"), str) else ""
            completion = [int(i) for i in tokenizer.encode(text, add_special_tokens=False)]
        why = call.token_note or "the server returned none"
        out.append(
            attrs.evolve(
                call,
                prompt_token_ids=prompt,
                completion_token_ids=completion,
                completion_logprobs=None,
                token_source="tokenizer",
                token_note=f"re-tokenized with the tokenizer at {name} ({why})",
            )
        )
    return out
