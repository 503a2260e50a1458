"""The policy of a branching run: the run's model, sampled through agentkit's chat client.

A branching run drives step-capable episodes itself (``init``, then
``step(reply)``), as the terminal harness's ``run()`` drives its episode:
each reply is one chat completion of the episode's chat history against the
run's endpoint (the model, base URL, key, headers, sampling arguments and
``max_tokens`` of the run's :class:`~agentkit.RunContext`). A
:class:`Trace` gathers one rollout's usage, finish reasons and token ids;
a fork copies it, so each leaf's trace holds its shared prefix's calls and
then its own.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

from agentkit._context import RunContext
from agentkit._usage import Usage
from agentkit.chat import ChatClient, ChatResponse, ConnectionCache, TokenTrace

__all__ = ["ChatPolicy", "Trace"]


class Trace:
    """What one rollout's model calls gave: usage, finish reasons, token ids."""

    def __init__(self) -> None:
        self.usage = Usage()
        self.finish_reasons: list[str | None] = []
        self.tokens = TokenTrace()

    def add(self, response: ChatResponse) -> None:
        """Count one model call."""
        self.usage = self.usage + response.usage
        self.finish_reasons.append(response.finish_reason)
        self.tokens.add(
            response.prompt_token_ids,
            response.token_ids,
            response.logprobs,
            gap=response.token_gap,
        )

    def copy(self) -> Trace:
        """An independent copy, for a forked child."""
        return copy.deepcopy(self)

    def raw(self) -> dict[str, Any]:
        """The rollout record's ``raw``: finish reasons, ``stop_reason`` and the token
        fields (as the chat and terminal harnesses record them)."""
        return {
            "finish_reasons": list(self.finish_reasons),
            "stop_reason": self.finish_reasons[-1] if self.finish_reasons else None,
            **self.tokens.to_raw(),
        }


class ChatPolicy:
    """Replies to a chat history with the run's model (one chat completion each)."""

    def __init__(
        self, context: RunContext, *, token_ids: bool, connections: ConnectionCache
    ) -> None:
        self.client = ChatClient.for_run(context, token_ids=token_ids, connections=connections)

    async def reply(self, history: Sequence[Mapping[str, Any]], trace: Trace) -> str:
        """The policy's reply text to ``history``, counted in ``trace``; raises
        :class:`~agentkit.chat.ModelCallError` when the call fails."""
        response = await self.client.complete(history)
        trace.add(response)
        return response.text
