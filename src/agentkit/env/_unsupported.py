"""Tasks the harness cannot run: left out of a run and listed, or the run refused.

A harness says which tasks it runs with ``supports(task)`` (and why not with
``unsupported_reason(task)``). When it runs none of the selected tasks the
pairing is refused before anything starts; when it runs some, the others are
left out of the plan: no rollout, no reward, in no statistic, listed in the
manifest (``plan.unsupported``), the summary (``unsupported_tasks``) and a
warning. They are not rollouts that could not run, so ``--resume`` does not
try them again: the same harness would refuse them again.
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs

__all__ = ["Unsupported", "left_out_warning", "refusal"]


@attrs.frozen
class Unsupported:
    """A selected task the harness cannot run, and why."""

    task_id: str
    reason: str

    def to_json(self) -> dict[str, str]:
        """``{"task_id", "reason"}``, as the manifest and summary list it."""
        return {"task_id": self.task_id, "reason": self.reason}


def refusal(harness: str, taskset: str, unsupported: Sequence[Unsupported]) -> str:
    """The message refusing a run whose harness can run none of the selected tasks."""
    count = len(unsupported)
    which = "the selected task" if count == 1 else f"any of the {count} selected tasks"
    single = len({u.reason for u in unsupported}) == 1
    why = _reasons(unsupported)
    if single and count > 1:
        why = f"for each, {why}"
    return (
        f"harness {harness!r} cannot run {which} of taskset {taskset!r}: {why}. "
        "Pair the taskset with a harness that runs its tasks (agentkit list harnesses)"
    )


def left_out_warning(harness: str, unsupported: Sequence[Unsupported], total: int) -> str:
    """The warning for tasks left out of a run the harness runs the rest of."""
    count = len(unsupported)
    return (
        f"harness {harness!r} cannot run {count} of the {total} selected tasks; "
        f"{'it is' if count == 1 else 'they are'} left out of the run (no rollouts, "
        f"not in the statistics): {_reasons(unsupported, with_ids=True)}"
    )


def _reasons(
    unsupported: Sequence[Unsupported], *, with_ids: bool = False, shown: int = 3, ids: int = 5
) -> str:
    """The reasons, each once with the tasks it applies to (a few of each); one reason
    for every task alone, unless ``with_ids``."""
    by_reason: dict[str, list[str]] = {}
    for u in unsupported:
        by_reason.setdefault(u.reason, []).append(u.task_id)
    if len(by_reason) == 1 and not with_ids:
        return next(iter(by_reason))
    parts = []
    for reason, task_ids in list(by_reason.items())[:shown]:
        listed = ", ".join(task_ids[:ids]) + (
            f" and {len(task_ids) - ids} more" if len(task_ids) > ids else ""
        )
        parts.append(f"{listed}: {reason}")
    if len(by_reason) > shown:
        parts.append(f"{len(by_reason) - shown} other reasons")
    return "; ".join(parts)
