"""The model proxy: every model call of a rollout passes it, and is recorded.

agentkit runs one proxy per event loop (the driver's with the local
executor; each Ray worker process's on its node) on ``127.0.0.1``. Each
rollout attempt opens a :class:`ProxyRoute`; its harness is given the
route's ``base_url`` (the proxy, with the real endpoint's path) and ``key``
(in place of the API key: the real key stays with the proxy and never
enters a sandbox). The proxy forwards each call to the real endpoint
(``https`` included), passes streams on as they arrive, adds the session
header and, with :class:`ProxySettings`, asks the server for token ids on the
agent's behalf, and records each model call as an :class:`~agentkit.runs.ModelCall`.
It forwards model calls only (each protocol's ``POST`` path under the
endpoint's base path, :attr:`Wire.endpoints`) and what agents ask before their
first call (``GET …/models``, ``POST …/messages/count_tokens``); any other
request gets a 403 before anything goes upstream, and is recorded too.

Protocols are handled by :class:`Wire` subclasses, looked up by path
(:func:`wire_for`; :func:`register_wire` adds one): chat completions,
legacy completions, the Responses API and Anthropic Messages. In translation
mode (``ProxySettings.translate_to_chat``) Messages and Responses calls are
served from the server's chat completions (:class:`MessagesFromChat`,
:class:`ResponsesFromChat`; :func:`register_translation` adds one);
:func:`translated_answer` says which chat message a translated call's recorded
answer stands for. See docs/model-proxy.md.

>>> async with shared_proxy() as proxy:  # doctest: +SKIP
...     route = proxy.open_route(rollout_id="r0", upstream="http://127.0.0.1:8000/v1",
...                              api_key="sk-...")
...     ...  # the agent calls route.base_url with route.key
...     calls = route.close()
"""

from __future__ import annotations

from agentkit._calls import ModelCall
from agentkit._proxy_settings import DEFAULT_SESSION_HEADER, ProxySettings
from agentkit.proxy._chat import ChatWire
from agentkit.proxy._completions import CompletionsWire
from agentkit.proxy._messages import MessagesWire
from agentkit.proxy._responses import ResponsesWire
from agentkit.proxy._route import KEY_PREFIX, ProxyRoute
from agentkit.proxy._server import ModelProxy, acquire_proxy, release_proxy, shared_proxy
from agentkit.proxy._translate import ChatTranslation
from agentkit.proxy._translate_messages import MessagesFromChat
from agentkit.proxy._translate_responses import ResponsesFromChat
from agentkit.proxy._translated_answer import translated_answer
from agentkit.proxy._wire import (
    TRANSLATIONS,
    WIRES,
    Recorded,
    Wire,
    register_translation,
    register_wire,
    wire_for,
)

__all__ = [
    "DEFAULT_SESSION_HEADER",
    "KEY_PREFIX",
    "TRANSLATIONS",
    "WIRES",
    "ChatTranslation",
    "ChatWire",
    "CompletionsWire",
    "MessagesFromChat",
    "MessagesWire",
    "ModelCall",
    "ModelProxy",
    "ProxyRoute",
    "ProxySettings",
    "Recorded",
    "ResponsesFromChat",
    "ResponsesWire",
    "Wire",
    "acquire_proxy",
    "register_translation",
    "register_wire",
    "release_proxy",
    "shared_proxy",
    "translated_answer",
    "wire_for",
]

for _wire in (ChatWire, CompletionsWire, ResponsesWire, MessagesWire):
    if _wire not in WIRES:
        register_wire(_wire, first=False)
del _wire
for _agent_wire, _translator in (
    (MessagesWire, MessagesFromChat),
    (ResponsesWire, ResponsesFromChat),
):
    TRANSLATIONS.setdefault(_agent_wire, _translator)
del _agent_wire, _translator
