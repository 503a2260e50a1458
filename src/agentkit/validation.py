"""Reading data strictly: JSON with agentkit's caps, and the strict converter.

The rules every taskset and harness of agentkit reads its input by, for
plugins to read theirs the same way (see docs/security.md for every cap):

- :func:`load_json` parses a file's JSON strictly: invalid JSON, a duplicate
  key, ``NaN``/``Infinity`` and nesting deeper than :data:`MAX_NESTING_DEPTH`
  are one :class:`~agentkit.ValidationError` naming the source and the place.
- :func:`loads_bounded` reads JSON another program sent (a server's reply, a
  tool's output) as leniently as ``json.loads``, but refuses nesting deeper
  than :data:`MAX_NESTING_DEPTH` with a :class:`NestingError` (a
  ``ValueError``) instead of a ``RecursionError``.
- :func:`check_nesting` and :func:`nesting_depth` check data parsed some
  other way (TOML, YAML); :func:`check_finite` refuses NaN and infinities.
- :func:`structure` turns JSON data into an attrs class strictly: unknown
  keys are refused, ``"10"`` never becomes ``10``, and every error is a
  :class:`~agentkit.ValidationError` carrying the path of the bad value
  (``tasks[3].metadata.model``); :func:`unstructure` is the way back.
- :func:`json_type` names a JSON value's type for a message (``an object``).
- :data:`MAX_ROLLOUTS` and :data:`MAX_CELLS` bound what one run plans and one job
  has (``AGENTKIT_MAX_ROLLOUTS`` / ``AGENTKIT_MAX_CELLS`` raise them;
  :func:`max_rollouts` and :func:`max_cells` read them): a larger plan is
  counted and refused before anything is allocated for it.

>>> from agentkit.validation import load_json, structure          # doctest: +SKIP
>>> config = structure(load_json(path.read_bytes(), str(path)), MyConfig, source=str(path))
"""

from __future__ import annotations

from agentkit._convert import structure, unstructure
from agentkit._limits import (
    MAX_CELLS,
    MAX_NESTING_DEPTH,
    MAX_ROLLOUTS,
    NestingError,
    check_finite,
    check_nesting,
    json_type,
    load_json,
    loads_bounded,
    max_cells,
    max_rollouts,
    nesting_depth,
)

__all__ = [
    "MAX_CELLS",
    "MAX_NESTING_DEPTH",
    "MAX_ROLLOUTS",
    "NestingError",
    "check_finite",
    "check_nesting",
    "json_type",
    "load_json",
    "loads_bounded",
    "max_cells",
    "max_rollouts",
    "nesting_depth",
    "structure",
    "unstructure",
]
