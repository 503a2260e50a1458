"""Per-environment aggregates of a finished (or partial) run, as Fleet training reports them.

The core's run summary aggregates per task; Fleet users read results per
environment (``env_key``). :func:`env_summary` computes that from the
rollout records of a run directory (``rollouts.jsonl``).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from agentkit import AgentkitError

__all__ = ["env_summary", "read_rollouts"]


def read_rollouts(run_dir: str | Path) -> list[dict[str, Any]]:
    """The rollout records of a run directory: the last line of each rollout id
    (a rollout run again on resume replaces its earlier line); lines that are
    not JSON are skipped."""
    path = Path(run_dir) / "rollouts.jsonl"
    if not path.is_file():
        raise AgentkitError(
            f"{path}: no such file; expected a run directory written by 'agentkit run'"
        )
    records: dict[str, dict[str, Any]] = {}
    for number, line in enumerate(path.read_text().splitlines()):
        try:
            item = json.loads(line)
        except ValueError:
            continue
        if isinstance(item, dict):
            records[str(item.get("rollout_id", number))] = item
    return list(records.values())


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def env_summary(
    rollouts: Iterable[Mapping[str, Any]], pass_threshold: float = 1.0
) -> dict[str, dict[str, Any]]:
    """Per env_key: rollouts, errors, mean reward, pass rate, mean turns/tool calls/tool errors."""
    groups: dict[str, list[Mapping[str, Any]]] = {}
    for r in rollouts:
        raw = r.get("raw") or {}
        env = raw.get("env_key") or "unknown"
        groups.setdefault(str(env), []).append(r)
    out: dict[str, dict[str, Any]] = {}
    for env, recs in sorted(groups.items()):
        scored = [r for r in recs if isinstance(r.get("reward"), (int, float))]
        rewards = [float(r["reward"]) for r in scored]

        def metric(name: str, recs: list[Mapping[str, Any]] = scored) -> float | None:
            values = [
                float(v)
                for r in recs
                if isinstance(v := (r.get("raw") or {}).get(name), (int, float))
            ]
            return _mean(values)

        out[env] = {
            "rollouts": len(recs),
            "errors": sum(1 for r in recs if r.get("status") not in ("completed", None)),
            "mean_reward": _mean(rewards),
            "pass_rate": _mean([1.0 if x >= pass_threshold else 0.0 for x in rewards]),
            "mean_turns": metric("turns"),
            "mean_tool_calls": metric("tool_calls"),
            "mean_tool_errors": metric("tool_errors"),
        }
    return out
