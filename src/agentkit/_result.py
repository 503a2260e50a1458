"""HarnessResult: the one result schema every harness returns."""

from __future__ import annotations

from typing import Any, Literal

import attrs

from agentkit._convert import structure, unstructure
from agentkit._errors import ValidationError
from agentkit._events import Event
from agentkit._usage import Usage

__all__ = ["INFRA_ERROR_KINDS", "RETRYABLE_ERROR_KINDS", "HarnessResult", "Status"]

#: ``error_kind`` values worth retrying: the runner retries these (with
#: backoff), never agent timeouts or grading failures.
RETRYABLE_ERROR_KINDS: frozenset[str] = frozenset(
    {
        "model_rate_limit",
        "model_server_error",
        "model_connection",
        "sandbox_start",
        # the Ray executor: the node or worker process running the rollout went away
        "node_died",
        "worker_died",
        "worker_oom",
    }
)

#: ``error_kind`` values meaning the rollout *could not run* (an infrastructure
#: failure: the model server down, rate-limited or refusing the key, a sandbox
#: or environment that did not start, a harness that cannot run here), as
#: opposed to a rollout that ran and failed. Such a rollout gets no reward
#: (null), is left out of pass@k, means and training data, and ``--resume``
#: runs it again. Every retryable kind is one; the others (the model refusing
#: the key, an environment or image that could not be made, a harness that
#: cannot run here) are not retried within a run.
INFRA_ERROR_KINDS: frozenset[str] = RETRYABLE_ERROR_KINDS | frozenset(
    {
        "model_auth",
        "environment_start",
        "harness_setup",
        "worker_error",
        "sandbox_prepare",
        "image_build",
        "image_pull",
        "image_engine",
    }
)

Status = Literal["completed", "failed", "timeout", "cancelled"]
"""A harness result's status: ``completed`` (the harness ran to its end, whatever the
answer), ``failed`` (it could not: ``error_kind`` says why), ``timeout`` (a time, turn,
token, cost or message limit stopped it) or ``cancelled``."""
_STATUSES = ("completed", "failed", "timeout", "cancelled")


def _check_status(_inst: Any, _attr: Any, value: str) -> None:
    if value not in _STATUSES:
        raise ValidationError("status", f"expected one of {', '.join(_STATUSES)}, got {value!r}")


@attrs.frozen(kw_only=True)
class HarnessResult:
    """What a harness returns, whatever it ran.

    ``status`` is ``completed``, ``failed``, ``timeout`` or ``cancelled``;
    ``error`` says why when it is not ``completed`` and ``error_kind`` classifies
    it (``model_rate_limit``, ``model_server_error``, ``model_connection``,
    ``sandbox_start``, ``agent_error``, ...; see :data:`RETRYABLE_ERROR_KINDS`).
    Provider-specific fields go into ``raw``, never new top-level fields.
    """

    status: Status = attrs.field(validator=_check_status)
    output: str | None = None
    messages: list[dict[str, Any]] = attrs.field(factory=list)
    error: str | None = None
    error_kind: str | None = None
    usage: Usage = attrs.field(factory=Usage)
    events: list[Event] = attrs.field(factory=list)
    raw: dict[str, Any] = attrs.field(factory=dict)

    @property
    def retryable(self) -> bool:
        """True when the failure is worth retrying (rate limit, 5xx, connection, sandbox start)."""
        return self.status == "failed" and self.error_kind in RETRYABLE_ERROR_KINDS

    @property
    def infra_error(self) -> bool:
        """True when the rollout could not run (see :data:`INFRA_ERROR_KINDS`)."""
        return self.status == "failed" and self.error_kind in INFRA_ERROR_KINDS

    @property
    def ok(self) -> bool:
        """True when the harness completed."""
        return self.status == "completed"

    def to_state_patch(self) -> dict[str, Any]:
        """Map this result onto a verifiers-style rollout state.

        The keys are those such states use (``completion``, ``responses``...)
        plus ``harness_*`` for the rest; merge with ``state.update(patch)``.
        """
        return {
            "completion": list(self.messages),
            "output": self.output,
            "status": self.status,
            "error": self.error,
            "usage": unstructure(self.usage),
            "events": [unstructure(e) for e in self.events],
            "harness_raw": dict(self.raw),
            "is_completed": self.status == "completed",
            "is_truncated": self.status == "timeout",
        }

    def to_json(self) -> dict[str, Any]:
        """The result as plain JSON."""
        data: dict[str, Any] = unstructure(self)
        return data

    @classmethod
    def from_json(cls, data: Any, *, source: str | None = None) -> HarnessResult:
        """Build a result from JSON, strictly."""
        return structure(data, cls, source=source)
