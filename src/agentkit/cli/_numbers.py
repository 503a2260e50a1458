"""Number flags of the command line: floats that must be finite.

Click's ``float`` and ``FloatRange`` take ``nan`` and ``inf`` (``float("nan")``
passes every range check), and such a value would be sent to the model server
and written into manifest.json, job.json and calls files, which strict JSON
parsers then refuse. Every float flag of agentkit's commands uses
:data:`FINITE_FLOAT` or :func:`finite_range` instead (a test checks each
command), so ``--temperature nan`` is a usage error naming the flag.
"""

from __future__ import annotations

import math
from typing import Any

import click

__all__ = ["FINITE_FLOAT", "FiniteFloat", "FiniteFloatRange", "finite_range"]


def _checked(number: float, value: Any, param: click.Parameter | None, ctx: Any) -> float:
    if not math.isfinite(number):
        raise click.BadParameter(
            f"{value!r} is not a finite number (NaN and infinities are not allowed)",
            ctx=ctx,
            param=param,
        )
    return number


class FiniteFloat(click.types.FloatParamType):
    """A float flag: any finite number."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        return _checked(super().convert(value, param, ctx), value, param, ctx)


class FiniteFloatRange(click.FloatRange):
    """A float flag within a range, finite."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        return _checked(super().convert(value, param, ctx), value, param, ctx)


#: The type of a float flag without bounds (``--temperature``).
FINITE_FLOAT = FiniteFloat()


def finite_range(
    min: float | None = None,  # click's own names
    max: float | None = None,
    *,
    min_open: bool = False,
    max_open: bool = False,
) -> FiniteFloatRange:
    """The type of a float flag with bounds (``finite_range(min=0, min_open=True)``)."""
    return FiniteFloatRange(min=min, max=max, min_open=min_open, max_open=max_open)
