"""One model call of a rollout, as the model proxy recorded it.

Every model call a rollout makes (whoever makes it: agentkit's own harnesses or
a real agent program in a sandbox) passes the rollout's model proxy, which
writes one :class:`ModelCall` per call. They are kept in the run directory as
``calls/<rollout_id>.jsonl`` (one JSON object a line, in the order the calls
started; see ``docs/run-directory.md``), read back by :mod:`agentkit.runs`,
and turned into training sequences by :mod:`agentkit.training`.

Token ids and logprobs are those the model server returned (vLLM's
``prompt_token_ids`` and a choice's ``token_ids`` and ``logprobs``, asked for by
the proxy on the agent's behalf); nothing here is re-tokenized. When a call has
no ids, ``token_note`` says why, so no rollout loses its tokens silently.
"""

from __future__ import annotations

from typing import Any, Literal

import attrs

from agentkit._usage import Usage

__all__ = ["PROTOCOLS", "ModelCall", "Protocol", "TokenSource"]

#: The wire protocol of a call, by the path it was sent to.
Protocol = Literal["chat", "responses", "messages", "completions", "other"]
PROTOCOLS: tuple[Protocol, ...] = ("chat", "responses", "messages", "completions", "other")

#: Where a call's token ids came from: the server (exact), a tokenizer the user
#: asked for as a fallback (marked, never silent), or nowhere.
TokenSource = Literal["server", "tokenizer", "none"]


@attrs.frozen(kw_only=True)
class ModelCall:
    """One model call: what was asked, what came back, when, and its tokens.

    ``request`` is the JSON body the agent sent (secrets redacted);
    ``forwarded`` lists the fields the proxy added or changed on its way to
    the server (for example ``return_token_ids``), so ``request`` stays what the
    agent said; ``headers`` are the agent's request headers (secret-looking
    values ``***``). ``response`` is the JSON body the agent received (what the
    server returned, less the fields the proxy asked for on the agent's
    behalf: those are in the token fields); for a streamed call it is the
    final object assembled from the stream's events (``stream`` is then
    True); for a failed call (``status`` 400 or more) the error body. Timing
    is in seconds: ``started_at`` is a Unix time, ``ttft_s`` the time to the
    first byte of the answer's body (the first event of a stream),
    ``duration_s`` the whole call.

    ``upstream_protocol`` is set when the proxy translated the call (its
    translation mode, ``translate_to_chat``): ``protocol`` is what the agent
    spoke (``messages``, ``responses``), ``upstream_protocol`` what the server
    was sent (``chat``), ``upstream_request`` the body it was sent (the token
    fields the proxy asked for included, as ``forwarded`` lists them); the
    token ids are those of the server's answer.

    ``index`` numbers a rollout's calls from 0 in the order they started;
    ``parent`` is the index of the call this one continues when the caller
    said so (a sub-agent or a parallel branch; None otherwise).
    """

    rollout_id: str
    index: int
    protocol: Protocol
    method: str = "POST"
    path: str = ""
    model: str | None = None
    stream: bool = False
    request: Any = None
    forwarded: dict[str, Any] = attrs.field(factory=dict)
    headers: dict[str, str] = attrs.field(factory=dict)
    status: int | None = None
    response: Any = None
    error: str | None = None
    started_at: float = 0.0
    ttft_s: float | None = None
    duration_s: float = 0.0
    usage: Usage | None = None
    finish_reason: str | None = None
    prompt_token_ids: list[int] | None = None
    completion_token_ids: list[int] | None = None
    completion_logprobs: list[float] | None = None
    token_source: TokenSource = "none"
    token_note: str | None = None
    session_id: str | None = None
    parent: int | None = None
    upstream_protocol: Protocol | None = None
    upstream_request: Any = None

    @property
    def call_id(self) -> str:
        """``<rollout_id>:c<index>``: stable across runs of the same rollout id."""
        return f"{self.rollout_id}:c{self.index}"

    @property
    def has_tokens(self) -> bool:
        """Whether the call carries both its prompt's and its completion's token ids."""
        return self.prompt_token_ids is not None and self.completion_token_ids is not None
