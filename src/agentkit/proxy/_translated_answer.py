"""The chat message a translated call's answer stands for (for exports that speak chat).

A call the proxy translated (``upstream_protocol`` set) recorded the answer the
agent received, in the agent's protocol (an Anthropic ``message``, a Responses
``response``); the translation that made it says which chat assistant message
that answer is (:meth:`ChatTranslation.chat_message`).
"""

from __future__ import annotations

from typing import Any

from agentkit._calls import ModelCall
from agentkit.proxy._translate import ChatTranslation
from agentkit.proxy._wire import TRANSLATIONS

__all__ = ["translated_answer"]


def translated_answer(call: ModelCall) -> dict[str, Any] | None:
    """The chat assistant message ``call``'s answer stands for, when the proxy translated
    the call to chat completions and its translation (registered with
    :func:`register_translation`) can say; else None."""
    if call.upstream_protocol != "chat":
        return None
    for translator in TRANSLATIONS.values():
        if issubclass(translator, ChatTranslation) and translator.protocol == call.protocol:
            return translator.chat_message(call.response)
    return None
