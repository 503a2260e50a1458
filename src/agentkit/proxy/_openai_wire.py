"""What chat completions and legacy completions share through the proxy.

Both speak OpenAI's shapes and get vLLM's token fields: the proxy notes the
same thing when the server returns no ids, keeps the same flags of what it
asked for on the agent's behalf (ids, logprobs, a stream's usage: each taken
out of the answer again), keeps a stream's top-level fields and a whole
answer for the record, and asks a stream for its usage the same way.
"""

from __future__ import annotations

from typing import Any, ClassVar

from agentkit.proxy._wire import Wire

__all__ = ["OpenAIWire"]


class OpenAIWire(Wire):
    """A chat or completions call (subclasses: ``ChatWire``, ``CompletionsWire``)."""

    no_ids_note: ClassVar[str] = (
        "the server returned no token ids (vLLM returns them from 0.10.2 on; other servers may not)"
    )

    def __init__(
        self, request: dict[str, Any], settings: Any, memory: dict[str, Any] | None = None
    ) -> None:
        #: The proxy asked for the token ids, the logprobs, a stream's usage (the agent
        #: did not): each is taken out of the answer again.
        self._strip_ids = False
        self._strip_logprobs = False
        self._strip_usage = False
        self._top: dict[str, Any] = {}  # a stream's top-level fields (id, model, ...)
        self._whole: Any = None  # a whole answer, as the agent got it
        super().__init__(request, settings, memory)

    def ask_stream_usage(self) -> None:
        """Ask a stream for its usage (``stream_options.include_usage``) when the agent
        did not; then the usage is taken out of what the agent gets."""
        if not self.stream:
            return
        options = self.request.get("stream_options")
        if not (isinstance(options, dict) and options.get("include_usage") is True):
            self.ask("stream_options", {**(options or {}), "include_usage": True})
            self._strip_usage = True
