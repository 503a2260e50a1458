"""A rollout's page (``/run/RUN/rollout/ID``): everything about one rollout, live.

``/api/run/RUN/rollout/ID`` has its record, task, transcript, events,
verifier output, model calls in brief, branches and files (or, while it
runs, its events so far); ``/api/run/RUN/rollout/ID/call/N`` one model call
whole; ``/api/run/RUN/rollout/ID/stream`` a running rollout's new events,
then whether it finished.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from aiohttp import web

from agentkit._convert import unstructure
from agentkit.rundir import RunDirError
from agentkit.runs import Rollout
from agentkit.view._cached_run import CachedRun
from agentkit.view._catalog import Catalog
from agentkit.view._http import (
    CATALOG,
    in_worker,
    json_response,
    open_stream,
    ping,
    send_event,
    ticks,
)
from agentkit.view._listing import rollout_row
from agentkit.view._paths import NotFound, is_safe_name

__all__ = [
    "MAX_CALLS",
    "MAX_EVENTS",
    "MAX_FILES",
    "ROLLOUT_POLL_S",
    "call",
    "live",
    "rollout",
    "routes",
]

#: Events sent with a rollout at most (the rest are counted, not sent).
MAX_EVENTS = 5000
#: Files listed per rollout at most.
MAX_FILES = 2000
#: Model calls listed on a rollout's page (each one's JSON is fetched when opened).
MAX_CALLS = 2000
#: How often the stream looks at a running rollout's live file (seconds).
ROLLOUT_POLL_S = 0.25

routes = web.RouteTableDef()


def rollout(catalog: Catalog, name: str, rollout_id: str) -> dict[str, Any]:
    """Everything about one rollout: record, task, transcript, events, verifier, files."""
    cached = catalog.run(name)
    if not is_safe_name(rollout_id):
        raise NotFound(f"no rollout {rollout_id!r}")
    state = cached.run.state()
    running = [x for x in cached.run.live_rollouts() if x.rollout_id == rollout_id]
    if running:
        doc = _running(cached, name, running[0], state)
    else:
        doc = _finished(cached, name, rollout_id, state)
    task_of: str | None = doc["task_id"]
    task = cached.tasks().get(task_of) if task_of else None
    doc["task"] = (
        None
        if task is None
        else {
            "task_id": task.task_id,
            "input": task.input,
            "target": task.target,
            "metadata": task.metadata,
        }
    )
    doc["siblings"] = [
        {
            "rollout_id": s.rollout_id,
            "index": s.rollout_index,
            "reward": s.reward,
            "ok": s.ok,
            "infrastructure": s.infrastructure,
        }
        for s in (cached.task_rollouts(task_of) if task_of else [])
    ]
    doc["metrics"] = cached.metrics()
    doc["files"], doc["files_truncated"] = _files(cached, rollout_id)
    doc["branches"] = _branches(doc.get("record"))
    return doc


def _running(cached: CachedRun, name: str, x: Any, state: str) -> dict[str, Any]:
    """A rollout running now (or left so by an interrupted run): its events so far."""
    steps, offset = cached.run.live_steps(x.rollout_id)
    doc: dict[str, Any] = {
        "run": name,
        "rollout_id": x.rollout_id,
        "running": state == "running",
        "interrupted": state != "running",
        "state": state,
        "live": {
            "task_id": x.task_id,
            "rollout_index": x.rollout_index,
            "attempt": x.attempt,
            "started_at": x.started_at,
        },
        "record": None,
        "events": [_step(s) for s in steps[-MAX_EVENTS:]],
        "events_total": len(steps),
        "offset": offset,
        "task_id": x.task_id,
    }
    if x.rollout_id in cached.run.rollout_ids():  # run again by --resume: the earlier result
        doc["previous"] = rollout_row(cached.run.rollout(x.rollout_id))
    return doc


def _finished(cached: CachedRun, name: str, rollout_id: str, state: str) -> dict[str, Any]:
    """A finished rollout: its record, events, verifier output and model calls."""
    try:
        r = cached.run.rollout(rollout_id)
    except KeyError:
        raise NotFound(f"no rollout {rollout_id!r} in run {name!r}") from None
    if r.rollout_id != rollout_id:  # a prefix: the page asks for the full id
        raise NotFound(f"no rollout {rollout_id!r} in run {name!r}")
    try:
        steps = cached.run.steps(rollout_id)
    except RunDirError as exc:
        steps = []
        events_error: str | None = str(exc)
    else:
        events_error = None
    record = r.to_json()
    return {
        "run": name,
        "rollout_id": rollout_id,
        "running": False,
        "interrupted": False,
        "state": state,
        "record": record,
        "row": rollout_row(r),
        "reason": r.reason,
        "ok": r.ok,
        "infrastructure": r.infrastructure,
        "events": [_step(s) for s in steps[:MAX_EVENTS]],
        "events_total": len(steps),
        "events_error": events_error,
        "verifier": _verifiers(record.get("raw") or {}),
        "steps": _harness_steps(record.get("raw") or {}),
        **_calls(cached, r),
        "task_id": r.task_id,
    }


def _calls(cached: CachedRun, r: Rollout) -> dict[str, Any]:
    """The rollout's model calls in brief (``calls``), and which lack token ids."""
    try:
        calls = cached.run.calls(r.rollout_id)
    except RunDirError as exc:
        return {"calls": [], "calls_total": r.calls, "calls_error": str(exc)}
    return {
        "calls": [_call_row(c) for c in calls[:MAX_CALLS]],
        "calls_total": len(calls),
        "calls_error": None,
        "calls_without_tokens": r.calls_without_tokens,
    }


def call(catalog: Catalog, name: str, rollout_id: str, index: str) -> dict[str, Any]:
    """One model call of a finished rollout, whole (as ``calls/`` holds it)."""
    cached = catalog.run(name)
    if not is_safe_name(rollout_id) or not index.isdigit():
        raise NotFound(f"no call {index!r} of rollout {rollout_id!r}")
    try:
        calls = cached.run.calls(rollout_id)
    except KeyError:
        raise NotFound(f"no rollout {rollout_id!r} in run {name!r}") from None
    found = [c for c in calls if c.index == int(index)]
    if not found:
        raise NotFound(f"no call {index} of rollout {rollout_id!r}")
    data: dict[str, Any] = unstructure(found[0])
    return data


def live(catalog: Catalog, name: str, rollout_id: str, offset: int) -> dict[str, Any]:
    """A running rollout's events after ``offset``; ``finished`` once its line is written."""
    cached = catalog.run(name)
    if not is_safe_name(rollout_id):
        raise NotFound(f"no rollout {rollout_id!r}")
    running = {x.rollout_id for x in cached.run.live_rollouts()}
    if rollout_id in running:
        steps, new_offset = cached.run.live_steps(rollout_id, offset)
    else:
        steps, new_offset = [], 0
    return {
        "events": [_step(s) for s in steps],
        "offset": new_offset if rollout_id in running else offset,
        "finished": rollout_id not in running and rollout_id in cached.run.rollout_ids(),
        "state": cached.run.state(),
    }


def _files(cached: CachedRun, rollout_id: str) -> tuple[list[dict[str, Any]], bool]:
    """Files kept for a rollout: artifacts/<id>/ and rollouts/<id>/ (symlinks not followed)."""
    out: list[dict[str, Any]] = []
    for top, kind in (("artifacts", "artifact"), ("rollouts", "sandbox")):
        base = cached.path / top / rollout_id
        if not base.is_dir() or base.is_symlink():
            continue
        for dirpath, dirnames, filenames in os.walk(base, followlinks=False):
            dirnames.sort()
            for fname in sorted(filenames):
                full = Path(dirpath) / fname
                rel = full.relative_to(cached.path).as_posix()
                try:
                    st = full.lstat()
                except OSError:
                    continue
                link = full.is_symlink()
                size = None if link else st.st_size
                out.append({"path": rel, "size": size, "kind": kind, "symlink": link})
                if len(out) >= MAX_FILES:
                    return out, True
    return out, False


def _call_row(c: Any) -> dict[str, Any]:
    """A model call in brief, for the rollout page's table."""
    return {
        "index": c.index,
        "protocol": c.protocol,
        "model": c.model,
        "stream": c.stream,
        "status": c.status,
        "finish_reason": c.finish_reason,
        "started_at": c.started_at,
        "ttft_s": c.ttft_s,
        "duration_s": c.duration_s,
        "input_tokens": None if c.usage is None else c.usage.input_tokens,
        "output_tokens": None if c.usage is None else c.usage.output_tokens,
        "prompt_ids": None if c.prompt_token_ids is None else len(c.prompt_token_ids),
        "completion_ids": None if c.completion_token_ids is None else len(c.completion_token_ids),
        "logprobs": c.completion_logprobs is not None,
        "token_note": c.token_note,
        "forwarded": c.forwarded,
        "error": c.error,
    }


def _step(s: Any) -> dict[str, Any]:
    return {"seq": s.seq, "type": s.type, "timestamp": s.timestamp, "data": s.data}


def _verifiers(raw: dict[str, Any]) -> list[dict[str, Any]]:
    """A harness's verifier output wherever it keeps it (as ``agentkit show`` finds it)."""
    found: list[dict[str, Any]] = []
    if isinstance(raw.get("verifier"), dict):
        found.append({"label": "verifier", "step": None, "data": raw["verifier"]})
    for name, inner in raw.items():
        if not isinstance(inner, dict):
            continue
        if isinstance(inner.get("verifier"), dict):
            found.append({"label": f"{name} verifier", "step": None, "data": inner["verifier"]})
        for i, step in enumerate(inner.get("steps") or []):
            if isinstance(step, dict) and isinstance(step.get("verifier"), dict):
                label = f"step {step.get('name', i)}"
                found.append(
                    {"label": label, "step": step.get("name", i), "data": step["verifier"]}
                )
    for key in ("reason", "verifier_output", "stdout", "stderr"):
        if isinstance(raw.get(key), str) and raw[key].strip():
            found.append({"label": key, "step": None, "data": {"stdout": raw[key]}})
    return found


def _harness_steps(raw: dict[str, Any]) -> list[dict[str, Any]]:
    """Multi-step tasks (Harbor's ``steps``): name, status, rewards of each step."""
    for inner in raw.values():
        if isinstance(inner, dict) and isinstance(inner.get("steps"), list):
            out = []
            for i, step in enumerate(inner["steps"]):
                if not isinstance(step, dict):
                    continue
                out.append(
                    {
                        "name": step.get("name", str(i)),
                        "index": step.get("index", i),
                        "status": step.get("agent_status"),
                        "rewards": step.get("rewards") or {},
                        "error": step.get("error"),
                    }
                )
            return out
    return []


def _branches(record: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """A branching run's tree around a rollout (docs/branching.md): the rollout it was
    forked from and at which step, and the rollouts forked from it; None elsewhere."""
    if not record:
        return None
    parent = record.get("parent_rollout_id")
    children = record.get("children") or []
    if parent is None and not children:
        return None
    return {"parent": parent, "branch_step": record.get("branch_step"), "children": children}


@routes.get("/api/run/{run}/rollout/{rid}")
async def _rollout(request: web.Request) -> web.StreamResponse:
    catalog, info = request.app[CATALOG], request.match_info
    return json_response(await in_worker(request, rollout, catalog, info["run"], info["rid"]))


@routes.get("/api/run/{run}/rollout/{rid}/call/{index}")
async def _call(request: web.Request) -> web.StreamResponse:
    catalog, info = request.app[CATALOG], request.match_info
    found = await in_worker(request, call, catalog, info["run"], info["rid"], info["index"])
    return json_response(found)


@routes.get("/api/run/{run}/rollout/{rid}/stream")
async def _rollout_stream(request: web.Request) -> web.StreamResponse:
    catalog = request.app[CATALOG]
    name, rid = request.match_info["run"], request.match_info["rid"]
    try:
        offset = max(0, int(request.query.get("offset", "0")))
    except ValueError:
        offset = 0
    await in_worker(request, catalog.run, name)
    resp = await open_stream(request)
    with contextlib.suppress(ConnectionError, asyncio.CancelledError):
        async for heartbeat in ticks(request, ROLLOUT_POLL_S):
            try:
                found = await in_worker(request, live, catalog, name, rid, offset)
            except (NotFound, RunDirError) as exc:
                await send_event(resp, "gone", {"error": str(exc)})
                break
            if found["events"]:
                offset = found["offset"]
                await send_event(resp, "events", {"events": found["events"], "offset": offset})
            if found["finished"]:
                await send_event(resp, "finished", {"state": found["state"]})
                break
            if found["state"] != "running":
                await send_event(resp, "ended", {"state": found["state"]})
                break
            if heartbeat:
                await ping(resp)
    return resp
