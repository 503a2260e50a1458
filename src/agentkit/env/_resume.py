"""What ``--resume`` may change, what it refuses (naming the setting), and what it runs again.

A resumed run keeps everything that changes results: the tasks and their
contents, the harness and its options, the sampling settings and limits, the
rubric, the sandbox and the scoring options. The model name, the endpoint and
the API key variable may change (the endpoint moved); each change is recorded
in the manifest. ``-n`` may grow: the run is extended with more rollouts per
task.

On resume, rollouts that could not run (an infrastructure failure) run again;
with ``retry_errors`` so do rollouts that errored (the harness failed, or a
reward function raised). Rollouts that hit a limit (time, turns, tokens,
cost, messages) ran to it and are kept.
"""

from __future__ import annotations

import json
from typing import Any

from agentkit._errors import AgentkitError
from agentkit._result import INFRA_ERROR_KINDS
from agentkit.rundir import RolloutRecord

__all__ = ["ResumeError", "diff_identity", "is_infrastructure_failure", "rerun_on_resume"]


class ResumeError(AgentkitError):
    """A run cannot be resumed with these settings."""


#: Manifest sections that must be equal to resume a run.
IDENTITY_KEYS: tuple[str, ...] = ("taskset", "harness", "context", "plan", "rubric", "sandbox")

#: Run options that shape what is recorded (each record's ``passed``, each
#: group's advantages): they must be equal too. The others (concurrency,
#: retries, timeout, run limits) may change on resume.
SCORING_OPTIONS: tuple[str, ...] = ("pass_threshold", "normalize_advantages")

#: Context fields that may change on resume (recorded in ``manifest["resumes"]``).
MAY_CHANGE: tuple[str, ...] = ("context.model", "context.base_url", "context.api_key_env")

#: ``error_kind`` values of rollouts that could not run at all (the sandbox, the
#: environment or the model endpoint failed): read from lines written before
#: records carried ``infra_error``.
INFRASTRUCTURE_KINDS: frozenset[str] = INFRA_ERROR_KINDS

#: ``error_kind`` values of rollouts that ran to one of their limits.
LIMIT_KINDS: frozenset[str] = frozenset(
    {"timeout", "max_turns", "token_limit", "cost_limit", "message_limit"}
)

#: Defaults of sections added in schema version 2 (older manifests lack them).
_CONTEXT_DEFAULTS: dict[str, Any] = {
    "headers": {},
    "limits": {
        "max_turns": None,
        "max_tokens": None,
        "token_limit": None,
        "cost_limit": None,
        "message_limit": None,
    },
}

_FLAGS: dict[str, str] = {
    "context.sampling_args.temperature": "--temperature",
    "context.sampling_args.top_p": "--top-p",
    "context.sampling_args.seed": "--seed",
    "context.limits.max_tokens": "--max-tokens",
    "context.limits.max_turns": "--max-turns",
    "context.limits.token_limit": "--token-limit",
    "context.limits.cost_limit": "--cost-limit",
    "context.limits.message_limit": "--message-limit",
    "taskset.spec": "TASKSET_SPEC",
    "harness.name": "HARNESS",
    "sandbox.name": "--sandbox",
    "sandbox.used": "--sandbox",
    "plan.limit": "--limit",
    "options.pass_threshold": "--pass-threshold",
    "options.normalize_advantages": "--normalize-advantages",
}
_PREFIXES: tuple[tuple[str, str], ...] = (
    ("context.sampling_args.", "-M "),
    ("context.headers.", "--header "),
    ("harness.options.", "-H "),
    ("taskset.options.", "-T "),
    ("sandbox.options.", "-S "),
)


def is_infrastructure_failure(record: RolloutRecord) -> bool:
    """True when the rollout could not run (its sandbox, environment or model endpoint)."""
    marker = getattr(record, "infra_error", None)  # set by runners that mark it
    if isinstance(marker, bool):
        return marker
    return record.status == "failed" and record.error_kind in INFRASTRUCTURE_KINDS


def rerun_on_resume(record: RolloutRecord, *, retry_errors: bool) -> bool:
    """Whether ``--resume`` runs this finished rollout again."""
    if is_infrastructure_failure(record):
        return True
    if not retry_errors or record.ok:
        return False
    # a rollout that ran to its limit would spend the same again
    return not (record.status == "timeout" or record.error_kind in LIMIT_KINDS)


def _normalized(manifest: dict[str, Any]) -> dict[str, Any]:
    out = dict(manifest)
    context = dict(out.get("context") or {})
    for key, default in _CONTEXT_DEFAULTS.items():
        context.setdefault(key, default)
    out["context"] = context
    return out


def setting_name(path: str) -> str:
    """The command-line name of a manifest path (``--temperature``, ``-H system_prompt``)."""
    if path in _FLAGS:
        return _FLAGS[path]
    for prefix, flag in _PREFIXES:
        if path.startswith(prefix):
            return flag + path[len(prefix) :]
    if path.startswith("rubric"):
        return "the compiled rubric"
    return path


def diff_identity(
    old: dict[str, Any], new: dict[str, Any]
) -> tuple[list[str], dict[str, list[Any]]]:
    """What differs between two manifests: refusals (readable) and allowed changes.

    The refusals name the setting as the user gives it (``--temperature
    differs: the run used 0.2, now 0.7``); the allowed changes map a
    manifest path to ``[old, new]``.
    """
    old, new = _normalized(old), _normalized(new)
    refusals: list[str] = []
    changes: dict[str, list[Any]] = {}
    plan_old, plan_new = old.get("plan") or {}, new.get("plan") or {}
    task_diff = _task_difference(plan_old, plan_new)
    if task_diff:
        refusals.append(task_diff)
    n_old, n_new = plan_old.get("rollouts_per_task"), plan_new.get("rollouts_per_task")
    if isinstance(n_old, int) and isinstance(n_new, int) and n_new < n_old:
        refusals.append(
            f"-n/--rollouts: the run has {n_old} rollouts per task; give {n_old} or more "
            "(more extends the run)"
        )
    for key in IDENTITY_KEYS:
        found: list[tuple[str, Any, Any]] = []
        _diff(old.get(key), new.get(key), key, found)
        for path, was, now in found:
            if path in MAY_CHANGE:
                changes[path] = [was, now]
            elif path.startswith("plan."):
                continue  # the task selection, its digest and -n are handled above
            else:
                refusals.append(_refusal(path, was, now))
    old_options, new_options = old.get("options") or {}, new.get("options") or {}
    for key in SCORING_OPTIONS:
        if key in old_options:  # runs written before this check may lack them
            found = []
            _diff(old_options[key], new_options.get(key), f"options.{key}", found)
            refusals.extend(_refusal(p, a, b) for p, a, b in found)
    rubric = [r for r in refusals if r.startswith("the compiled rubric")]
    if len(rubric) > 1:  # one line for the rubric, whatever changed in it
        refusals = [r for r in refusals if r not in rubric[1:]]
    return refusals, changes


def _task_difference(old: dict[str, Any], new: dict[str, Any]) -> str | None:
    a, b = old.get("task_ids"), new.get("task_ids")
    if isinstance(a, list) and isinstance(b, list) and a != b:
        gone = [t for t in a if t not in set(b)]
        added = [t for t in b if t not in set(a)]
        detail = []
        if gone:
            detail.append(f"not selected now: {', '.join(gone[:5])}")
        if added:
            detail.append(f"new: {', '.join(added[:5])}")
        how = []
        if old.get("requested_task_ids") != new.get("requested_task_ids"):
            how.append("--task")
        if old.get("limit") != new.get("limit"):
            how.append("--limit")
        by = f" ({' and '.join(how)} differ)" if how else " (the taskset changed)"
        if not how and _support_changed(old, new, gone, added):
            by = " (the tasks the harness can run changed since the run started)"
        return (
            f"the tasks differ{by}: {'; '.join(detail) or 'order changed'}; a resumed run "
            "keeps its tasks (start a new run with --out for other tasks)"
        )
    if old.get("tasks_digest") and old.get("tasks_digest") != new.get("tasks_digest"):
        return "the tasks' contents changed since the run started (same ids, edited tasks)"
    return None


def _support_changed(
    old: dict[str, Any], new: dict[str, Any], gone: list[str], added: list[str]
) -> bool:
    """Whether the tasks differ only because the harness now runs others: those gone
    are ones it now cannot run, those added ones it could not run before."""
    could_not = {u.get("task_id") for u in old.get("unsupported") or [] if isinstance(u, dict)}
    cannot = {u.get("task_id") for u in new.get("unsupported") or [] if isinstance(u, dict)}
    return bool(gone or added) and set(gone) <= cannot and set(added) <= could_not


def _refusal(path: str, was: Any, now: Any) -> str:
    name = setting_name(path)
    if name == "the compiled rubric":
        return "the compiled rubric differs (the taskset, harness or rubric plugins changed)"
    return f"{name} differs: the run used {_short(was)}, now {_short(now)}"


def _diff(a: Any, b: Any, path: str, out: list[tuple[str, Any, Any]]) -> None:
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b), key=str):
            _diff(a.get(k), b.get(k), f"{path}.{k}", out)
        return
    if a != b:
        out.append((path, a, b))


def _short(value: Any) -> str:
    if value is None:
        return "nothing"
    text = json.dumps(value, default=str)
    return text if len(text) <= 80 else text[:77] + "..."
