"""The chat client: calls to an OpenAI-compatible chat completions endpoint.

The built-in ``chat`` harness and the Fleet tool-call harness call their
model through it, and so can any plugin's harness:

>>> from agentkit.chat import ChatClient                                # doctest: +SKIP
>>> client = ChatClient.for_run(context, connections=self._connections) # doctest: +SKIP
>>> response = await client.complete(messages)                          # doctest: +SKIP
>>> response.message, response.usage, response.finish_reason            # doctest: +SKIP

- :class:`ChatClient` sends one call (:meth:`ChatClient.complete`), plain
  or streamed, as plain JSON over pooled ``httpcore`` connections, and reads
  the reply strictly into a :class:`ChatResponse`: the assistant message
  (text, tool calls), usage, finish reason, vLLM's token ids and logprobs
  when the server returns them, the request and response bodies and the
  call's timing; :meth:`ChatClient.for_run` makes the one a rollout's
  :class:`~agentkit.RunContext` describes.
- :class:`ModelCallError` is every failure, with the ``error_kind`` the
  runner retries by (``model_rate_limit``, ``model_connection``...) and the
  server's ``Retry-After``.
- :class:`ConnectionCache` keeps the connection pools per event loop and
  endpoint, so a harness's rollouts share them.
- :class:`TokenTrace` stitches a rollout's calls into one token-level record
  for training export; :func:`response_tokens` reads the token fields of a
  completion body, :func:`completion_ids_gap` says when its ids are not all
  the completion's (a gap: the rollout then records none);
  :func:`retry_after_seconds` reads a server's ``Retry-After`` as the
  ``openai`` client does; :func:`message_reasoning`
  reads a message's or delta's thinking under either of its names
  (:data:`REASONING_FIELDS`: vLLM's ``reasoning``, then ``reasoning_content``),
  and :func:`with_reasoning` gives a request's assistant turn its thinking
  under both.
- Caps: :data:`MAX_REPLY_CHARS` (a longer text is cut, and the cut noted),
  :data:`MAX_REPLY_BYTES` (a larger body is refused unread).

See docs/chat-client.md.
"""

from __future__ import annotations

from agentkit._reasoning import REASONING_FIELDS, message_reasoning, with_reasoning
from agentkit._tokens import completion_ids_gap
from agentkit.chat._client import (
    DEFAULT_BASE_URL,
    DEFAULT_CONNECTIONS,
    MAX_REPLY_BYTES,
    MAX_REPLY_CHARS,
    ChatClient,
)
from agentkit.chat._connections import ConnectionCache
from agentkit.chat._endpoint import retry_after_seconds
from agentkit.chat._errors import ModelCallError
from agentkit.chat._response import ChatResponse
from agentkit.chat._tokens import TokenTrace, response_tokens

__all__ = [
    "DEFAULT_BASE_URL",
    "DEFAULT_CONNECTIONS",
    "MAX_REPLY_BYTES",
    "MAX_REPLY_CHARS",
    "REASONING_FIELDS",
    "ChatClient",
    "ChatResponse",
    "ConnectionCache",
    "ModelCallError",
    "TokenTrace",
    "completion_ids_gap",
    "message_reasoning",
    "response_tokens",
    "retry_after_seconds",
    "with_reasoning",
]
