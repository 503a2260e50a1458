"""What an export leaves out of a damaged run directory, and why.

A run directory can be damaged (a disk, a copy cut short, a hand edit) or hostile (a
calls file that is a link out of the run, a record naming a file elsewhere). Export
reads what it can: a rollout whose files cannot be read is left out, whole, with one
message naming the file, the field or line and what was expected; the others are
exported as usual (``docs/training-data.md``, "A damaged run directory").
"""

from __future__ import annotations

import attrs

__all__ = ["LeftOut"]


@attrs.frozen
class LeftOut:
    """A rollout an export left out, or a line of ``rollouts.jsonl`` it could not read.

    ``rollout_id``: the rollout (None for a line too corrupt to say whose it is).
    ``reason``: one line naming the file, the field or line, and what was expected.
    """

    rollout_id: str | None
    reason: str
