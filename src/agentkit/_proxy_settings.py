"""ProxySettings: what the model proxy does to every call of a run, besides recording it."""

from __future__ import annotations

import re
from typing import Any

import attrs

from agentkit._errors import SpecError

__all__ = ["DEFAULT_SESSION_HEADER", "ROUTE_KEY_PREFIX", "ProxySettings", "is_route_key"]

#: The header that carries a rollout's session id with every call it makes.
DEFAULT_SESSION_HEADER = "X-Session-ID"

#: How a rollout's proxy key starts (``akp-`` and 32 random URL-safe characters).
ROUTE_KEY_PREFIX = "akp-"
_ROUTE_KEY = re.compile(r"akp-[A-Za-z0-9_-]{32}")


def is_route_key(value: str | None) -> bool:
    """Whether ``value`` is a key the model proxy gives a rollout (``akp-`` and 32
    characters): a capability that opens one rollout's route until it ends, not a
    secret the run's redactor keeps (docs/security.md, "The model proxy")."""
    return value is not None and _ROUTE_KEY.fullmatch(value) is not None


_TOKEN = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")  # an HTTP header name (RFC 9110 token)


def _header_name(_instance: object, attribute: attrs.Attribute[Any], value: str | None) -> None:
    if value is not None and not _TOKEN.match(value):
        raise SpecError(
            f"{attribute.name} must be an HTTP header name (letters, digits, '-'), got {value!r}"
        )


def _salt(_instance: object, attribute: attrs.Attribute[Any], value: str | None) -> None:
    if value is not None and not value:
        raise SpecError(f"{attribute.name} must be a non-empty string (vLLM refuses an empty one)")


@attrs.frozen(kw_only=True)
class ProxySettings:
    """How the model proxy treats a run's calls (see docs/model-proxy.md).

    ``token_ids``: ask the server for token ids and the sampler's logprobs on
    the agent's behalf (vLLM's ``return_token_ids`` and ``logprobs`` on chat
    and completions, ``enable_response_messages`` on Responses) and record
    them; the answer the agent gets is what it asked for, without them.
    ``session_header``: the header that carries the rollout's session id with
    every call (None: none is sent), so a router keeps one rollout on one
    replica's prefix cache. ``cache_salt``: vLLM's ``cache_salt``, added to
    chat, completions and Responses bodies that have none (separates policy
    versions in the prefix cache). ``translate_to_chat``: serve the agent's
    Anthropic Messages and OpenAI Responses calls from the server's chat
    completions (translated both ways), which return token ids where those
    protocols give none; the call is recorded in the protocol the agent spoke,
    with the upstream protocol and request beside it. ``model``: the model name
    every call is sent upstream with, in place of the agent's (a trainer's new
    model or LoRA adapter, ``agentkit.service``; None: the agent's own), listed
    in the call's ``forwarded``.
    """

    token_ids: bool = False
    session_header: str | None = attrs.field(default=DEFAULT_SESSION_HEADER, validator=_header_name)
    cache_salt: str | None = attrs.field(default=None, validator=_salt)
    translate_to_chat: bool = False
    model: str | None = None
