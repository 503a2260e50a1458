"""What a resumed job may change, and what it refuses (naming the cell and the setting).

A job resumed with its job file given again keeps its cells: the same names,
each with the same taskset, harness, model and every setting that changes
results. What may change is what a resumed run allows too (see
``agentkit.env._resume``): the shared budget and each cell's concurrency,
timeouts, retries, run limits, the endpoint (``base_url``, ``api_key_env``),
and a larger ``rollouts_per_task`` (the cells' runs are extended).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["MAY_CHANGE", "diff_cells"]

#: Cell settings a resumed job may change (recorded in job.json's ``resumes``).
MAY_CHANGE: frozenset[str] = frozenset(
    {
        "concurrency",
        "timeout",
        "max_retries",
        "retry_base_delay",
        "retry_max_delay",
        "callback_drain_timeout",
        "event_buffer",
        "run_token_limit",
        "run_cost_limit",
        "preflight",
        "keep_sandboxes",
        "executor",
        "ray_address",
        "base_url",
        "api_key_env",
    }
)


def diff_cells(
    old: Sequence[Mapping[str, Any]], new: Sequence[Mapping[str, Any]]
) -> tuple[list[str], dict[str, dict[str, list[Any]]]]:
    """Refusals (readable) and allowed changes (cell -> setting -> [was, now]) between
    the cells stored in ``job.json`` and those of the job now (both as
    :meth:`~agentkit.jobs.CellSpec.to_json` gives them)."""
    refusals: list[str] = []
    changes: dict[str, dict[str, list[Any]]] = {}
    old_by = {str(c.get("name")): c for c in old}
    new_by = {str(c.get("name")): c for c in new}
    added = [n for n in new_by if n not in old_by]
    removed = [n for n in old_by if n not in new_by]
    if added:
        refusals.append(f"new cells: {_names(added)}")
    if removed:
        refusals.append(f"cells no longer in the job: {_names(removed)}")
    for name, was in old_by.items():
        now = new_by.get(name)
        if now is None:
            continue
        for part in ("taskset", "harness", "axes"):
            if was.get(part) != now.get(part):
                refusals.append(
                    f"cell {name}: its {part} differs: was {_short(was.get(part))}, "
                    f"now {_short(now.get(part))}"
                )
        before, after = was.get("settings") or {}, now.get("settings") or {}
        for key in sorted(set(before) | set(after)):
            a, b = before.get(key), after.get(key)
            if a == b:
                continue
            if key in MAY_CHANGE or (key == "rollouts_per_task" and _grows(a, b)):
                changes.setdefault(name, {})[key] = [a, b]
            else:
                refusals.append(f"cell {name}: {key} differs: was {_short(a)}, now {_short(b)}")
    return refusals, changes


def _grows(a: Any, b: Any) -> bool:
    """A larger ``rollouts_per_task`` (the default, 1, when not given)."""
    was = 1 if a is None else a
    now = 1 if b is None else b
    return isinstance(was, int) and isinstance(now, int) and now > was


def _names(names: Sequence[str]) -> str:
    shown = ", ".join(names[:5])
    return shown + (f" and {len(names) - 5} more" if len(names) > 5 else "")


def _short(value: Any) -> str:
    if value is None:
        return "not given"
    text = json.dumps(value, default=str, sort_keys=True)
    return text if len(text) <= 80 else text[:77] + "..."
