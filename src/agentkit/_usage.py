"""Token and cost accounting for one rollout."""

from __future__ import annotations

from typing import Any

import attrs

from agentkit._errors import ValidationError
from agentkit._limits import json_type

__all__ = ["Usage"]


@attrs.frozen(kw_only=True)
class Usage:
    """Tokens and cost of one harness run.

    ``input_tokens`` counts every prompt token, cache reads included;
    ``cached_tokens`` says how many of them were cache reads.
    """

    input_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0
    reasoning_tokens: int = 0
    cost: float = 0.0
    requests: int = 0

    @classmethod
    def from_openai(cls, usage: Any, *, where: str = "usage") -> Usage:
        """One model call's usage from an OpenAI-style ``usage`` object, as reported.

        Reads ``prompt_tokens``, ``completion_tokens``,
        ``prompt_tokens_details.cached_tokens`` and
        ``completion_tokens_details.reasoning_tokens``; an absent or null count
        is 0, and no usage at all (None) is a call without counts. A count that
        is not a whole number >= 0 (a string, a fraction, a boolean), or a
        usage or details block that is not an object, raises
        :class:`~agentkit.ValidationError` naming the field
        (``usage.prompt_tokens: expected a whole number of tokens >= 0 or
        null, got a string ('12')``); ``where`` is the name it starts from.
        """
        if usage is None:
            return cls(requests=1)
        block = _block(usage, where)
        prompt = _block(block.get("prompt_tokens_details"), f"{where}.prompt_tokens_details")
        completion = _block(
            block.get("completion_tokens_details"), f"{where}.completion_tokens_details"
        )
        return cls(
            input_tokens=_count(block, "prompt_tokens", where),
            output_tokens=_count(block, "completion_tokens", where),
            cached_tokens=_count(prompt, "cached_tokens", f"{where}.prompt_tokens_details"),
            reasoning_tokens=_count(
                completion, "reasoning_tokens", f"{where}.completion_tokens_details"
            ),
            requests=1,
        )

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            cached_tokens=self.cached_tokens + other.cached_tokens,
            reasoning_tokens=self.reasoning_tokens + other.reasoning_tokens,
            cost=self.cost + other.cost,
            requests=self.requests + other.requests,
        )

    def to_json(self) -> dict[str, int | float]:
        """The usage as plain JSON (a fast path: rollout records write one each)."""
        return {
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cached_tokens": self.cached_tokens,
            "reasoning_tokens": self.reasoning_tokens,
            "cost": self.cost,
            "requests": self.requests,
        }

    @property
    def total_tokens(self) -> int:
        """Input plus output tokens."""
        return self.input_tokens + self.output_tokens


def _block(value: Any, where: str) -> dict[str, Any]:
    """A usage object (null: empty); anything else is a ValidationError at ``where``."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ValidationError(where, f"expected an object or null, got {json_type(value)}")
    return value


def _count(block: dict[str, Any], name: str, where: str) -> int:
    """The token count ``block[name]``: a whole number >= 0 (0 when absent or null)."""
    value = block.get(name)
    if value is None:
        return 0
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    if isinstance(value, float) and value.is_integer() and value >= 0:
        return int(value)
    shown = repr(value)
    shown = shown if len(shown) <= 40 else shown[:37] + "..."
    raise ValidationError(
        f"{where}.{name}",
        f"expected a whole number of tokens >= 0 or null, got {json_type(value)} ({shown})",
    )
