"""An OpenAI-compatible chat-completions front over a token-in/token-out sampler.

Agents (and agentkit's model proxy in front of them) call
``POST /v1/chat/completions``; the front renders the conversation with the
model's chat template (the tokenizer's ``apply_chat_template``), asks the
:class:`~agentkit_tinker.Sampler` for tokens, decodes them and parses tool
calls and thinking back into the assistant message. The answer carries the ids
exactly as sampled, in vLLM's fields (``prompt_token_ids`` beside the choices,
each choice's ``token_ids`` and ``logprobs.content``), so the proxy records them
by construction: no re-tokenisation anywhere.
"""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import Any

from aiohttp import web

from agentkit_tinker._chat import assistant_message, render
from agentkit_tinker._sampler import Sampler, SamplingRequest

__all__ = ["SamplerFront"]

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class _BadRequest(Exception):
    """A request the front cannot serve; the message says which field and why."""


class SamplerFront:
    """Serve ``/v1/chat/completions`` (and ``/v1/models``) from ``sampler``.

    ``tokenizer``: the model's (a ``transformers`` tokenizer with its chat template,
    loaded offline); ``model``: the name the front answers as; ``max_tokens``: the
    limit when a request gives none. Loopback by default (``host``, ``port=0``: a
    free port, :attr:`url` once entered). One choice per request. A stream
    (``"stream": true``) is sent once the sampler has answered: one chunk with the
    whole message and its ids, one with the finish reason (and the usage, when
    ``stream_options.include_usage``).

    >>> front = SamplerFront(TinkerSampler(client), tokenizer, model="policy")  # doctest: +SKIP
    >>> async with front:  # doctest: +SKIP
    ...     options = RunOptions(model="policy", base_url=front.url, token_ids=True)
    """

    def __init__(
        self,
        sampler: Sampler,
        tokenizer: Any,
        *,
        model: str = "policy",
        max_tokens: int = 1024,
        host: str = "127.0.0.1",
        port: int = 0,
    ) -> None:
        self.sampler = sampler
        self.tokenizer = tokenizer
        self.model = model
        self.max_tokens = max_tokens
        self.host = host
        self.port = port
        eos = getattr(tokenizer, "eos_token_id", None)
        self.stop_token_ids: list[int] = [eos] if isinstance(eos, int) else []
        self._ids = itertools.count()
        self._runner: web.AppRunner | None = None

    @property
    def url(self) -> str:
        """The front's base URL (``http://127.0.0.1:PORT/v1``)."""
        return f"http://{self.host}:{self.port}/v1"

    async def __aenter__(self) -> SamplerFront:
        app = web.Application(middlewares=[self._errors])
        app.add_routes(
            [
                web.post("/v1/chat/completions", self._chat),
                web.get("/v1/models", self._models),
            ]
        )
        runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await runner.setup()
        site = web.TCPSite(runner, self.host, self.port)
        try:
            await site.start()
        except BaseException:
            await runner.cleanup()
            raise
        self.port = runner.addresses[0][1]
        self._runner = runner
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()

    @web.middleware
    async def _errors(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        try:
            return await handler(request)
        except _BadRequest as exc:
            return web.json_response(
                {"error": {"message": str(exc), "type": "invalid_request_error"}}, status=400
            )

    async def _models(self, request: web.Request) -> web.Response:
        return web.json_response(
            {
                "object": "list",
                "data": [{"id": self.model, "object": "model", "owned_by": "agentkit"}],
            }
        )

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        try:
            body = await request.json()
        except ValueError:
            raise _BadRequest("the body must be a JSON object") from None
        if not isinstance(body, dict):
            raise _BadRequest("the body must be a JSON object")
        messages = body.get("messages")
        if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
            raise _BadRequest("messages: expected a list of message objects")
        stream = body.get("stream") is True
        if body.get("n", 1) != 1:
            raise _BadRequest("n: this front samples one choice per request (n: 1)")
        tools = body.get("tools")
        if tools is not None and not isinstance(tools, list):
            raise _BadRequest("tools: expected a list of tools")
        limit = body.get("max_completion_tokens", body.get("max_tokens"))
        if limit is not None and (type(limit) is not int or limit < 1):
            raise _BadRequest(f"max_tokens: expected a whole number of at least 1, got {limit!r}")
        temperature = _number(body, "temperature", 1.0)
        top_p = _number(body, "top_p", 1.0)
        seed = body.get("seed")
        prompt = render(self.tokenizer, messages, tools)
        sampled = await self.sampler.sample(
            SamplingRequest(
                prompt_ids=prompt,
                max_tokens=limit or self.max_tokens,
                temperature=temperature,
                top_p=top_p,
                stop_token_ids=self.stop_token_ids,
                seed=seed if type(seed) is int else None,
            )
        )
        text = self.tokenizer.decode(sampled.token_ids, skip_special_tokens=True)
        message, calls = assistant_message(text)
        finish = (
            "length" if sampled.finish_reason == "length" else ("tool_calls" if calls else "stop")
        )
        as_ids = body.get("return_tokens_as_token_ids") is True
        content: list[dict[str, Any]] = [
            {
                "token": f"token_id:{t}" if as_ids else self.tokenizer.decode([t]),
                "logprob": lp,
                "bytes": None,
                "top_logprobs": [],
            }
            for t, lp in zip(sampled.token_ids, sampled.logprobs, strict=True)
        ]
        choice: dict[str, Any] = {
            "index": 0,
            "message": message,
            "finish_reason": finish,
            "token_ids": sampled.token_ids,
            "logprobs": {"content": content},
        }
        usage = {
            "prompt_tokens": len(prompt),
            "completion_tokens": len(sampled.token_ids),
            "total_tokens": len(prompt) + len(sampled.token_ids),
        }
        head = {
            "id": f"chatcmpl-{next(self._ids)}",
            "created": int(time.time()),
            "model": body.get("model") or self.model,
        }
        if not stream:
            answer = {
                **head,
                "object": "chat.completion",
                "prompt_token_ids": prompt,
                "choices": [choice],
                "usage": usage,
            }
            return web.json_response(answer, dumps=json.dumps)
        # a stream, as vLLM's: the prompt's ids in the first chunk, the choice's ids and
        # logprobs beside its delta, the finish reason last, then the usage when asked
        delta = dict(message)
        for n, call in enumerate(delta.get("tool_calls") or []):
            call["index"] = n
        chunk = {**head, "object": "chat.completion.chunk"}
        first = {k: v for k, v in choice.items() if k != "message"}
        chunks = [
            {**chunk, "prompt_token_ids": prompt,
             "choices": [{**first, "delta": delta, "finish_reason": None}]},
            {**chunk, "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]},
        ]  # fmt: skip
        options = body.get("stream_options")
        if isinstance(options, dict) and options.get("include_usage") is True:
            chunks.append({**chunk, "choices": [], "usage": usage})
        response = web.StreamResponse(
            headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
        )
        await response.prepare(request)
        for c in chunks:
            await response.write(f"data: {json.dumps(c)}\n\n".encode())
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response


def _number(body: dict[str, Any], name: str, default: float) -> float:
    value = body.get(name)
    if value is None:
        return default
    if type(value) not in (int, float):
        raise _BadRequest(f"{name}: expected a number, got {json.dumps(value)[:80]}")
    return float(value)
