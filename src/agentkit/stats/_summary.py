"""The summary of a run: per-task and overall statistics (summary.json, the results
table, ``agentkit show``), written by the runner and recomputed by the reader."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from agentkit.rundir import RUN_SCHEMA_VERSION, RolloutRecord
from agentkit.stats._pass_at_k import pass_table

__all__ = ["summarize"]


def _mean(values: Sequence[float]) -> float | None:
    return math.fsum(values) / len(values) if values else None


def summarize(
    records: Sequence[RolloutRecord],
    planned_tasks: Sequence[tuple[str, str]],
    rollouts_per_task: int,
    *,
    threshold: float,
    complete: bool,
    interrupted: bool = False,
    extra: dict[str, Any] | None = None,
    breakdowns: Mapping[str, Mapping[str, str]] | None = None,
) -> dict[str, Any]:
    """The summary.json document: per task and overall statistics.

    ``breakdowns`` maps a metadata key (``env_key``) to each task's value of
    it; the summary then aggregates per value under ``by[key][value]``.
    Rollouts that could not run (``infra_error``) have no reward, so they are
    in no mean or pass@k; they are counted and listed (``infra_errors``), and
    a run with any is not ``complete`` (``--resume`` runs them again).
    """
    tasks, task_pass = _task_rows(records, planned_tasks, rollouts_per_task, threshold)
    scored_all = [r.reward for r in records if r.reward is not None]
    metrics: dict[str, list[float]] = {}
    for rec in records:
        for name, value in rec.rewards.items():
            metrics.setdefault(name, []).append(value)
    kinds, first_errors = _errors(records)
    usage_total, usage_mean, priced = _usage(records)
    could_not_run = [r for r in records if r.infra_error]
    durations = [
        float(d)
        for r in records
        if isinstance(d := r.timings.get("duration_s"), (int, float)) and not isinstance(d, bool)
    ]
    summary: dict[str, Any] = {
        "schema_version": RUN_SCHEMA_VERSION,
        "complete": complete and not could_not_run,
        "interrupted": interrupted,
        "planned": len(planned_tasks) * rollouts_per_task,
        "finished": len(records),
        "scored": len(scored_all),
        "errors": sum(1 for r in records if not r.ok),
        "infra_errors": len(could_not_run),
        "infra_error_rollouts": [
            {
                "rollout_id": r.rollout_id,
                "task_id": r.task_id,
                "error_kind": r.error_kind,
                "error": _short(r.error),
            }
            for r in sorted(could_not_run, key=lambda r: (r.group, r.rollout_index))
        ],
        "error_kinds": dict(kinds),
        "first_error_by_kind": first_errors,
        "mean_reward": _mean(scored_all),
        "pass_threshold": threshold,
        "pass_at_k": {k: math.fsum(v) / len(v) for k, v in task_pass.items()},
        "metrics": {name: math.fsum(v) / len(v) for name, v in metrics.items()},
        "usage": usage_total,
        "usage_mean": usage_mean,
        "priced": priced,
        "rollout_time_s": {"total": math.fsum(durations), "timed": len(durations)},
        "tasks": tasks,
    }
    if breakdowns:
        summary["by"] = {
            key: _breakdown(records, tasks, values, threshold) for key, values in breakdowns.items()
        }
    if extra:
        summary.update(extra)
    return summary


def _task_rows(
    records: Sequence[RolloutRecord],
    planned_tasks: Sequence[tuple[str, str]],
    rollouts_per_task: int,
    threshold: float,
) -> tuple[list[dict[str, Any]], dict[str, list[float]]]:
    """Each planned task's statistics, and every task's pass@k values per k."""
    by_task: dict[str, list[RolloutRecord]] = {}
    for rec in records:
        by_task.setdefault(rec.task_id, []).append(rec)
    tasks = []
    task_pass: dict[str, list[float]] = {}
    for task_id, example_id in planned_tasks:
        recs = sorted(by_task.get(task_id, []), key=lambda r: r.rollout_index)
        scored = [r.reward for r in recs if r.reward is not None]
        mean = _mean(scored)
        std = (
            math.sqrt(math.fsum((x - mean) ** 2 for x in scored) / len(scored))
            if mean is not None
            else None
        )
        passes = pass_table(scored, threshold) if scored else {}
        for k, v in passes.items():
            task_pass.setdefault(k, []).append(v)
        tasks.append(
            {
                "task_id": task_id,
                "example_id": example_id,
                "planned": rollouts_per_task,
                "rollouts": len(recs),
                "scored": len(scored),
                "mean_reward": mean,
                "std_reward": std,
                "pass_at_k": passes,
                "errors": sum(1 for r in recs if not r.ok),
                "infra_errors": sum(1 for r in recs if r.infra_error),
            }
        )
    return tasks, task_pass


def _errors(records: Sequence[RolloutRecord]) -> tuple[Counter[str], dict[str, str]]:
    """How many rollouts failed by kind, and the first message of each kind."""
    kinds = Counter(
        r.error_kind or ("scoring_error" if r.scoring_errors else r.status)
        for r in records
        if not r.ok
    )
    first_errors: dict[str, str] = {}
    for r in records:
        if r.ok:
            continue
        kind = r.error_kind or ("scoring_error" if r.scoring_errors else r.status)
        if kind not in first_errors:
            first_errors[kind] = r.error or (
                r.scoring_errors[0]["error"] if r.scoring_errors else r.status
            )
    return kinds, first_errors


def _usage(
    records: Sequence[RolloutRecord],
) -> tuple[dict[str, float], dict[str, float], int]:
    """The rollouts' usage summed, its mean per rollout (the cost's per priced rollout),
    and how many rollouts were priced."""
    usage_total: dict[str, float] = {}
    priced = 0
    for r in records:
        for key, value in r.usage.items():
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                usage_total[key] = usage_total.get(key, 0) + value
        if isinstance(r.usage.get("cost"), (int, float)):
            priced += 1
    usage_mean = {
        key: value / (priced if key == "cost" else len(records))
        for key, value in usage_total.items()
        if records and (key != "cost" or priced)
    }
    return usage_total, usage_mean, priced


def _short(text: str | None, limit: int = 300) -> str | None:
    """A message cut to ``limit`` characters (the summary lists every such rollout)."""
    if text is None or len(text) <= limit:
        return text
    return text[: limit - 3] + "..."


def _breakdown(
    records: Sequence[RolloutRecord],
    tasks: Sequence[dict[str, Any]],
    values: Mapping[str, str],
    threshold: float,
) -> dict[str, dict[str, Any]]:
    """Aggregates per value of one metadata key: tasks, rollouts, rewards, metrics."""
    out: dict[str, dict[str, Any]] = {}
    recs_by: dict[str, list[RolloutRecord]] = {}
    for rec in records:
        if rec.task_id in values:
            recs_by.setdefault(values[rec.task_id], []).append(rec)
    tasks_by: dict[str, list[dict[str, Any]]] = {}
    for task in tasks:
        if task["task_id"] in values:
            tasks_by.setdefault(values[task["task_id"]], []).append(task)
    for value in sorted(tasks_by):
        recs = recs_by.get(value, [])
        scored = [r.reward for r in recs if r.reward is not None]
        metrics: dict[str, list[float]] = {}
        for rec in recs:
            for name, metric in rec.rewards.items():
                metrics.setdefault(name, []).append(metric)
        task_pass: dict[str, list[float]] = {}
        for task in tasks_by[value]:
            for k, v in task["pass_at_k"].items():
                task_pass.setdefault(k, []).append(v)
        out[value] = {
            "tasks": len(tasks_by[value]),
            "rollouts": len(recs),
            "scored": len(scored),
            "errors": sum(1 for r in recs if not r.ok),
            "infra_errors": sum(1 for r in recs if r.infra_error),
            "mean_reward": _mean(scored),
            "pass_rate": (
                sum(1 for x in scored if x >= threshold) / len(scored) if scored else None
            ),
            "pass_at_k": {k: math.fsum(v) / len(v) for k, v in task_pass.items()},
            "metrics": {name: math.fsum(v) / len(v) for name, v in metrics.items()},
        }
    return out
