"""RunContext: everything about *how* a task is run, never part of the task."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

import attrs

from agentkit._convert import unstructure
from agentkit._errors import SpecError
from agentkit._limits import non_finite
from agentkit._redact import MARKER, looks_like_key, public_fields

if TYPE_CHECKING:
    from agentkit._pricing import Pricing
    from agentkit._sandbox import Sandbox
    from agentkit._usage import Usage

__all__ = ["SECRET_HEADER_WORDS", "Limits", "RunContext", "is_secret_header", "public_headers"]

#: Header names holding one of these words carry credentials: their values are
#: never written to a manifest, an event or a log.
SECRET_HEADER_WORDS = (
    "authorization",
    "key",
    "token",
    "secret",
    "cookie",
    "password",
    "credential",
)


def is_secret_header(name: str) -> bool:
    """True when a request header's name says it carries a credential (any case)."""
    lower = name.lower()
    return any(word in lower for word in SECRET_HEADER_WORDS)


def public_headers(headers: dict[str, str]) -> dict[str, str]:
    """``headers`` as they are shown and stored: the values of secret-looking names
    (:func:`is_secret_header`), and values that look like a key whatever the name
    (:func:`~agentkit._redact.looks_like_key`), replaced by ``***``."""
    return {
        name: MARKER if is_secret_header(name) or looks_like_key(value) else value
        for name, value in headers.items()
    }


def _finite(_instance: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    """Every number in a setting finite: NaN or Infinity would reach the model server
    and every file the run writes."""
    found = non_finite(value, attribute.name)
    if found is not None:
        raise SpecError(f"{found[0]} must be a finite number, got {found[1]!r}")


@attrs.frozen(kw_only=True)
class Limits:
    """Bounds on one rollout.

    ``timeout_sec``: wall time; ``max_turns``: model calls; ``max_tokens``:
    output tokens per model call; ``token_limit``: input plus output tokens
    of the whole rollout; ``cost_limit``: its cost in USD; ``message_limit``:
    messages in its conversation (the prompt's included). A harness that hits
    one stops the rollout and records why (``error_kind`` ``max_turns``,
    ``token_limit``, ``cost_limit`` or ``message_limit``); the rollout is
    still scored.
    """

    timeout_sec: float | None = attrs.field(default=None, validator=_finite)
    max_turns: int | None = None
    max_tokens: int | None = None
    token_limit: int | None = None
    cost_limit: float | None = attrs.field(default=None, validator=_finite)
    message_limit: int | None = None

    def exceeded(self, usage: Usage, cost: float | None) -> tuple[str, str] | None:
        """``(error_kind, message)`` when ``usage`` (costing ``cost``) is over a limit."""
        if self.token_limit is not None and usage.total_tokens >= self.token_limit:
            return (
                "token_limit",
                f"stopped at {usage.total_tokens} tokens (token limit {self.token_limit})",
            )
        if self.cost_limit is not None and cost is not None and cost >= self.cost_limit:
            return ("cost_limit", f"stopped at ${cost:.4f} (cost limit ${self.cost_limit:g})")
        return None


@attrs.frozen(kw_only=True)
class RunContext:
    """The model endpoint, sampling, limits and sandbox a rollout runs with.

    ``api_key`` is a secret: it is left out of ``repr``, of :meth:`to_json`
    and of every manifest, event and log agentkit writes. When it is not
    given, :attr:`resolved_api_key` reads ``api_key_env`` (``OPENAI_API_KEY``
    by default) from the environment at the moment of use.

    ``headers`` are sent with every model request; values of secret-looking
    names (``Authorization``, ``X-Api-Key``...) are never written anywhere.
    ``pricing`` prices the model's tokens (see :meth:`cost`);
    ``max_connections`` is how many connections a harness may keep open to
    the model endpoint (the run's concurrency).

    ``artifacts_dir`` is a host directory (not yet created) for files worth
    keeping from this rollout, such as collected artifacts and verifier logs:
    unlike the sandbox's own directory, it is kept after a successful rollout.
    """

    model: str | None = None
    base_url: str | None = None
    api_key: str | None = attrs.field(default=None, repr=False)
    api_key_env: str = "OPENAI_API_KEY"
    sampling_args: dict[str, Any] = attrs.field(factory=dict, validator=_finite)
    headers: dict[str, str] = attrs.field(factory=dict, repr=False)
    limits: Limits = attrs.field(factory=Limits)
    pricing: Pricing | None = attrs.field(default=None, repr=False, eq=False)
    max_connections: int | None = None
    sandbox: Sandbox | None = attrs.field(default=None, repr=False, eq=False)
    rollout_id: str = ""
    artifacts_dir: str | None = None
    extra: dict[str, Any] = attrs.field(factory=dict)

    @property
    def resolved_api_key(self) -> str | None:
        """The key to send: ``api_key``, else the ``api_key_env`` variable, else None."""
        if self.api_key is not None:
            return self.api_key
        return os.environ.get(self.api_key_env)

    def cost(self, usage: Usage) -> float | None:
        """What ``usage`` costs in USD with :attr:`pricing` (None: no price known)."""
        if self.pricing is None:
            return None
        return self.pricing.cost(usage, self.model)

    def limit_hit(self, usage: Usage, messages: int | None = None) -> tuple[str, str] | None:
        """``(error_kind, message)`` when a rollout with ``usage`` and ``messages``
        messages must stop for one of :attr:`limits`, else None."""
        limits = self.limits
        if (
            limits.message_limit is not None
            and messages is not None
            and messages >= limits.message_limit
        ):
            return (
                "message_limit",
                f"stopped at {messages} messages (message limit {limits.message_limit})",
            )
        if limits.token_limit is None and limits.cost_limit is None:
            return None
        return limits.exceeded(usage, self.cost(usage) if limits.cost_limit is not None else None)

    def evolve(self, **changes: Any) -> RunContext:
        """A copy with some fields changed."""
        return attrs.evolve(self, **changes)

    def to_json(self) -> dict[str, Any]:
        """The context as JSON, without the API key, secret header and request field values
        or the sandbox."""
        return {
            "model": self.model,
            "base_url": self.base_url,
            "api_key_env": self.api_key_env,
            "api_key_set": self.resolved_api_key is not None,
            "sampling_args": public_fields(self.sampling_args),
            "headers": public_headers(self.headers),
            "limits": unstructure(self.limits),
            "max_connections": self.max_connections,
            "sandbox": getattr(self.sandbox, "name", None),
            "rollout_id": self.rollout_id,
            "artifacts_dir": self.artifacts_dir,
            "extra": dict(self.extra),
        }
