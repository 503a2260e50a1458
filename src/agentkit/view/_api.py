"""The viewer's data: JSON documents built from :mod:`agentkit.runs`, nothing else.

:class:`Viewer` serves one directory: a run directory, or a folder whose
direct children are runs. It keeps one :class:`agentkit.runs.Run` per run
(lazy: a page of a 10,000-rollout run parses 50 lines; filters and sorting
parse the small fields of every rollout once, then only new lines) and never
writes anything. It is not thread-safe: the server calls it from one worker
thread.
"""

from __future__ import annotations

import contextlib
import gc
import math
import os
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import agentkit.runs
from agentkit._convert import unstructure
from agentkit._rundir import LOCK, MANIFEST, ROLLOUTS, SUMMARY, RunDirError
from agentkit.runs import Rollout, Run
from agentkit.runs._live import lock_held
from agentkit.stats import RunStats, Scores, scores_of_run, scores_stats
from agentkit.view._charts import Values, distributions, values_of
from agentkit.view._jobs import JOB_FILE, JOINER, JobDir, is_job_dir, open_job
from agentkit.view._paths import NotFound, Refused, inside, is_safe_name
from agentkit.view._stats import Scored, against, heatmap, leaderboard

__all__ = ["MAX_PAGE", "Viewer"]

#: Rows per page at most.
MAX_PAGE = 500
#: Events sent with a rollout at most (the rest are counted, not sent).
MAX_EVENTS = 5000
#: Files listed per rollout at most.
MAX_FILES = 2000
#: Model calls listed on a rollout's page (each one's JSON is fetched when opened).
MAX_CALLS = 2000
#: While a run is written, its summary is recomputed at most this often (seconds), and
#: never more than a fifth of the time (a large run's summary takes a while).
SUMMARY_EVERY_S = 2.0

#: Sortable columns: the value a rollout sorts by (None sorts last either way).
_SORT_KEYS: dict[str, Callable[[Rollout], Any]] = {
    "task": lambda r: (r.group, r.rollout_index),
    "reward": lambda r: r.reward,
    "status": lambda r: r.status,
    "error_kind": lambda r: r.error_kind,
    "turns": lambda r: r.usage.requests,
    "tokens": lambda r: r.usage.input_tokens + r.usage.output_tokens,
    "cost": lambda r: r.cost,
    "duration": lambda r: r.timings.duration_s,
    "finished": lambda r: r.timings.finished_at,
}


@contextlib.contextmanager
def _bulk() -> Iterator[None]:
    """No garbage collection while a large run is read: the reader makes an object or
    more per rollout, and each collection on the way would walk all of those made so far
    (it halves the time to read 100,000 rollouts). What is dropped meanwhile is collected
    after."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


class _Entry:
    """One run and what is derived from it, recomputed only when its files change."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.manifest_mtime = _mtime(path / MANIFEST)
        self.run: Run = agentkit.runs.open(path)
        self._rows: list[Rollout] | None = None
        self._by_task: dict[str, list[Rollout]] | None = None
        self._summary: dict[str, Any] | None = None
        self._summary_len = -1
        self._summary_at = 0.0
        self._summary_cost = 0.0
        self._tasks: dict[str, Any] | None = None
        self._scores: tuple[Any, Scores] | None = None
        self._settled: tuple[Any, dict[str, Any] | None] | None = None
        self._values: tuple[int, Values] | None = None

    def refresh(self) -> None:
        with _bulk():
            new = self.run.refresh()
        if new:
            self._rows = None
            self._by_task = None

    def rows(self) -> list[Rollout]:
        """Every finished rollout, in task order (small fields only)."""
        if self._rows is None:
            with _bulk():
                rows = self.run.rollouts()
            rows.sort(key=lambda r: (r.group, r.rollout_index))
            self._rows = rows
        return self._rows

    def by_task(self) -> dict[str, list[Rollout]]:
        if self._by_task is None:
            out: dict[str, list[Rollout]] = {}
            for r in self.rows():
                out.setdefault(r.task_id, []).append(r)
            self._by_task = out
        return self._by_task

    def summary(self, *, running: bool) -> dict[str, Any]:
        """summary.json when it is current, else recomputed (throttled while running)."""
        n = len(self.run)
        if self._summary is not None and self._summary_len == n:
            return self._summary
        wait = max(SUMMARY_EVERY_S, 5 * self._summary_cost)
        if self._summary is not None and running and time.monotonic() - self._summary_at < wait:
            return self._summary
        start = time.monotonic()
        stored = self.run.stored_summary()
        if stored is not None and stored.get("finished") == n and "tasks" in stored:
            summary = stored
        else:
            summary = self.run.summary()
        self._summary, self._summary_len = summary, n
        self._summary_at = time.monotonic()
        self._summary_cost = self._summary_at - start
        return summary

    def tasks(self) -> dict[str, Any]:
        if self._tasks is None:
            self._tasks = self.run.tasks()
        return self._tasks

    def settled(self) -> dict[str, Any] | None:
        """summary.json when no process writes the run and the summary counts every line of
        rollouts.jsonl (:meth:`agentkit.runs.Run.current_summary`), else None: then what a
        job's page shows of the run comes from the summary, without indexing its rollouts
        (a newline count instead of a scan of every line)."""
        key = (_size(self.path / ROLLOUTS), _mtime(self.path / SUMMARY))
        if self._settled is not None and self._settled[0] == key:
            return self._settled[1]
        found = None
        if lock_held(self.path / LOCK) is False:
            stored = self.run.current_summary()
            if stored is not None and isinstance(stored.get("tasks"), list):
                found = stored
        self._settled = (key, found)
        return found

    def scores(self) -> Scores:
        """The run's per-task scores (:func:`agentkit.stats.scores_of_run`: from a current
        summary.json, else from the rollouts), kept while the run does not change."""
        key = (_size(self.path / ROLLOUTS), _mtime(self.path / SUMMARY))
        if self._scores is None or self._scores[0] != key:
            with _bulk():
                self._scores = (key, scores_of_run(self.run))
        return self._scores[1]

    def row(self, label: str) -> RunStats:
        """The run's leaderboard row (as :func:`agentkit.stats.run_stats` makes it)."""
        info = self.run.info
        return scores_stats(
            self.scores(),
            label=label,
            path=str(self.path),
            taskset=info.taskset,
            harness=info.harness,
            model=info.model,
            planned=info.planned,
        )

    def values(self) -> Values:
        """The values the charts draw (every finished rollout read once), kept while the
        run does not change."""
        n = len(self.run)
        if self._values is None or self._values[0] != n:
            self._values = (n, values_of(self.rows()))
        return self._values[1]


class Viewer:
    """JSON documents over the runs in ``root`` (a run directory or a folder of runs)."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        given = Path(root)
        if not given.is_dir():
            raise RunDirError(f"{given}: no such directory of runs")
        self.root = given.resolve()
        self._entries: dict[str, _Entry] = {}
        #: Job directories read, with their job.json's mtime when read.
        self._jobs: dict[Path, tuple[float, JobDir]] = {}

    # -- which runs ----------------------------------------------------------
    @property
    def single(self) -> bool:
        """The root is itself a run directory."""
        return (self.root / MANIFEST).is_file()

    @property
    def single_job(self) -> bool:
        """The root is itself a job directory."""
        return not self.single and is_job_dir(self.root)

    def _root_name(self, default: str) -> str:
        return self.root.name if is_safe_name(self.root.name) else default

    def _scan(self) -> tuple[dict[str, Path], dict[str, Path]]:
        """Runs (name -> directory) and jobs (name -> directory) under the root."""
        if self.single:
            return {self._root_name("run"): self.root}, {}
        if self.single_job:
            job = self._root_name("job")
            return self._cells(job, self.root, prefix=""), {job: self.root}
        runs: dict[str, Path] = {}
        jobs: dict[str, Path] = {}
        try:
            children = sorted(os.scandir(self.root), key=lambda e: e.name)
        except OSError:
            return {}, {}
        for child in children:
            if not is_safe_name(child.name):
                continue
            where = Path(child.path)
            is_run, is_job = (where / MANIFEST).is_file(), is_job_dir(where)
            if not is_run and not is_job:
                continue
            try:
                path = inside(self.root, child.name)
            except (Refused, NotFound):
                continue  # a symlink to a run or job elsewhere is not served
            if is_run:
                runs[child.name] = path
            else:
                jobs[child.name] = path
                runs.update(self._cells(child.name, path, prefix=child.name + JOINER))
        return runs, jobs

    def _cells(self, job: str, path: Path, *, prefix: str) -> dict[str, Path]:
        """The started cells' runs of the job at ``path``, named ``prefix + cell``."""
        try:
            found = self.job_dir(job, path)
        except RunDirError:
            return {}
        return {prefix + c.name: c.run_dir for c in found.cells if c.started}

    def job_dir(self, name: str, path: Path) -> JobDir:
        """The job at ``path`` (read again when its job.json changed)."""
        mtime = _mtime(path / JOB_FILE)
        cached = self._jobs.get(path)
        if cached is None or cached[0] != mtime:
            cached = self._jobs[path] = (mtime, open_job(path, self.root))
        return cached[1]

    def run_dirs(self) -> dict[str, Path]:
        """Run name -> directory: the root itself, or each child holding a manifest.json, and
        the started cells of the jobs there (``JOB~CELL``; just ``CELL`` when the root is a
        job)."""
        return self._scan()[0]

    def job_dirs(self) -> dict[str, Path]:
        """Job name -> directory: the root itself, or each child holding a job.json."""
        return self._scan()[1]

    def _cell_of(self, run: str) -> tuple[str | None, str | None]:
        """``(job, cell)`` of a cell's run; ``(None, None)`` for a run of no job."""
        if self.single_job:
            return self._root_name("job"), run
        job, sep, cell = run.partition(JOINER)
        return (job, cell) if sep else (None, None)

    def _job(self, name: str) -> tuple[JobDir, str]:
        """The job called ``name`` and the prefix of its cells' run names, or NotFound."""
        path = self.job_dirs().get(name) if is_safe_name(name) else None
        if path is None:
            raise NotFound(f"no job {name!r} in {self.root}")
        try:
            found = self.job_dir(name, path)
        except RunDirError as exc:
            raise NotFound(str(exc)) from None
        return found, "" if self.single_job else name + JOINER

    def entry(self, name: str, *, refresh: bool = True) -> _Entry:
        """The run called ``name`` (its new lines indexed unless ``refresh`` is false), or
        NotFound."""
        if not all(is_safe_name(part) for part in name.split(JOINER)) or name.count(JOINER) > 1:
            raise NotFound(f"no run {name!r}")
        path = self.run_dirs().get(name)
        if path is None:
            self._entries.pop(name, None)
            raise NotFound(f"no run {name!r} in {self.root}")
        cached = self._entries.get(name)
        if (
            cached is None
            or cached.path != path
            or cached.manifest_mtime != _mtime(path / MANIFEST)
        ):
            try:
                cached = self._entries[name] = _Entry(path)
            except RunDirError as exc:
                raise NotFound(str(exc)) from None
        if refresh:
            cached.refresh()
        return cached

    # -- the runs page ---------------------------------------------------------
    def runs(self) -> dict[str, Any]:
        """Every run (a job's cells with their ``job`` and ``cell``) and every job: what the
        runs page shows."""
        runs, jobs = self._scan()
        cell_of: dict[str, tuple[str, str]] = {}
        found: dict[str, JobDir] = {}
        broken: list[dict[str, str | None]] = []
        for job, path in jobs.items():
            try:
                found[job] = jd = self.job_dir(job, path)
            except RunDirError as exc:
                broken.append({"name": job, "kind": "job", "error": str(exc)})
                continue
            prefix = "" if self.single_job else job + JOINER
            for c in jd.cells:
                cell_of[prefix + c.name] = (job, c.name)
        out = []
        for name in runs:
            try:
                out.append(self._listing(name, self.entry(name)))
            except (NotFound, RunDirError) as exc:
                # one run that cannot be read (a corrupt line) is listed with its error;
                # the others are still listed
                of_job, cell = self._cell_of(name)
                broken.append(
                    {"name": name, "kind": "run", "job": of_job, "cell": cell, "error": str(exc)}
                )
        out.sort(key=lambda r: r["created_at"] or 0.0, reverse=True)
        listed = {r["name"]: r for r in out}
        job_list = []
        for job, jd in found.items():
            cells = {c: listed.get(run) for run, (j, c) in cell_of.items() if j == job}
            job_list.append(self._job_listing(job, jd, cells))
        job_list.sort(key=lambda r: r["created_at"] or 0.0, reverse=True)
        return {
            "root": str(self.root),
            "single": self.single,
            "single_job": self.single_job,
            "runs": out,
            "jobs": job_list,
            "broken": broken,
        }

    def _job_listing(
        self, name: str, jd: JobDir, cells: Mapping[str, dict[str, Any] | None]
    ) -> dict[str, Any]:
        """A job's row: its cells' progress, errors and cost summed, its best cell."""
        started = [x for x in cells.values() if x is not None]
        costs = [x["cost"] for x in started if x["cost"] is not None]
        scored = [x for x in started if x["mean_reward"] is not None]
        best = max(scored, key=lambda x: x["mean_reward"], default=None)
        return {
            "name": name,
            "job_name": jd.name,
            "created_at": jd.created_at,
            "state": _job_state(jd, started, len(jd.cells)),
            "cells": len(jd.cells),
            "started": len(started),
            "axes": jd.axes,
            "planned": sum(x["planned"] for x in started),
            "finished": sum(x["finished"] for x in started),
            "errors": sum(x["errors"] for x in started),
            "infra_errors": sum(x["infra_errors"] for x in started),
            "cost": math.fsum(costs) if costs else None,
            "running": sum(x["running"] for x in started),
            "best": None if best is None else _best(best),
        }

    def _listing(self, name: str, e: _Entry) -> dict[str, Any]:
        info = e.run.info
        state = e.run.state()
        summary = e.summary(running=state == "running")
        usage = summary.get("usage") or {}
        job, cell = self._cell_of(name)
        return {
            "name": name,
            "job": job,
            "cell": cell,
            "created_at": info.created_at,
            "taskset": info.taskset,
            "harness": info.harness,
            "model": info.model,
            "planned": int(summary.get("planned") or info.planned),
            "finished": len(e.run),
            "errors": int(summary.get("errors") or 0),
            "infra_errors": int(summary.get("infra_errors") or 0),
            "mean_reward": summary.get("mean_reward"),
            "pass_at_k": summary.get("pass_at_k") or {},
            "cost": usage.get("cost") if isinstance(usage.get("cost"), (int, float)) else None,
            "tokens": int((usage.get("input_tokens") or 0) + (usage.get("output_tokens") or 0)),
            "state": state,
            "running": len(e.run.live_rollouts()) if state == "running" else 0,
        }

    def _settled_listing(self, name: str, e: _Entry, stored: dict[str, Any]) -> dict[str, Any]:
        """:meth:`_listing` of a run no process writes, from its current summary alone: its
        state as :meth:`agentkit.runs.Run.state` gives it, where the finished rollouts are
        the summary's count (it counts every line)."""
        info = e.run.info
        job, cell = self._cell_of(name)
        usage = stored.get("usage") or {}
        finished = int(stored.get("finished") or 0)
        infra = int(stored.get("infra_errors") or 0)
        if finished >= info.planned:
            state = "incomplete" if infra else "complete"
        else:
            state = "stopped" if stored.get("stopped") else "interrupted"
        return {
            "name": name,
            "job": job,
            "cell": cell,
            "created_at": info.created_at,
            "taskset": info.taskset,
            "harness": info.harness,
            "model": info.model,
            "planned": int(stored.get("planned") or info.planned),
            "finished": finished,
            "errors": int(stored.get("errors") or 0),
            "infra_errors": infra,
            "mean_reward": stored.get("mean_reward"),
            "pass_at_k": stored.get("pass_at_k") or {},
            "cost": usage.get("cost") if isinstance(usage.get("cost"), (int, float)) else None,
            "tokens": int((usage.get("input_tokens") or 0) + (usage.get("output_tokens") or 0)),
            "state": state,
            "running": 0,
        }

    def runs_snapshot(self) -> list[Any]:
        """What changes on the runs page: names, line counts and states, and the jobs'
        job.json (for live updates)."""
        runs, jobs = self._scan()
        out: list[Any] = [[name, _mtime(path / JOB_FILE)] for name, path in jobs.items()]
        for name, path in runs.items():
            out.append([name, _size(path / ROLLOUTS), _mtime(path / MANIFEST)])
            try:
                out[-1].append(self.entry(name).run.state())
            except (NotFound, RunDirError):
                out[-1].append("broken")
        return out

    # -- a run -----------------------------------------------------------------
    def run(self, name: str) -> dict[str, Any]:
        """A run's header, options, rubric and metrics."""
        e = self.entry(name)
        info = e.run.info
        m = info.manifest
        state = e.run.state()
        summary = e.summary(running=state == "running")
        stored = e.run.stored_summary() or {}
        return {
            **self._listing(name, e),
            "path": str(e.path),
            "state": state,
            "resumed_at": info.resumed_at,
            "rollouts_per_task": info.rollouts_per_task,
            "tasks": len(info.task_ids),
            "summary": {k: v for k, v in summary.items() if k != "tasks"},
            "stopped": stored.get("stopped"),
            "interrupted": bool(stored.get("interrupted")) and state != "running",
            "torn_tail": e.run.torn_tail,
            "metrics": [
                {**x, "mean": (summary.get("metrics") or {}).get(x["name"])} for x in _metrics(m)
            ],
            "rubric": m.get("rubric"),
            "options": {
                "taskset": m.get("taskset"),
                "harness": m.get("harness"),
                "context": m.get("context"),
                "plan": {k: v for k, v in (m.get("plan") or {}).items() if k != "task_ids"},
                "sandbox": m.get("sandbox"),
                "sandbox_warning": m.get("sandbox_warning"),
                "options": m.get("options"),
                "pricing": m.get("pricing"),
                "resumes": m.get("resumes"),
                "agentkit_version": m.get("agentkit_version"),
                "python": m.get("python"),
                "platform": m.get("platform"),
                "plugins": m.get("plugins"),
            },
            "error_kinds": sorted((summary.get("error_kinds") or {}).keys()),
        }

    def rollouts(self, name: str, params: Mapping[str, str]) -> dict[str, Any]:
        """One page of the run's rollouts, filtered and sorted, and the rollouts running now."""
        e = self.entry(name)
        offset = max(0, _int(params.get("offset"), 0))
        limit = min(MAX_PAGE, max(1, _int(params.get("limit"), 50)))
        state = e.run.state()
        sort, desc = params.get("sort") or "task", bool(params.get("desc"))
        if sort == "task" and not any(params.get(k) for k in _FILTERS):
            # task order from the index alone: only the page's lines are parsed
            ids = e.run.rollout_ids(order="task")
            if desc:
                ids.reverse()
            total = len(ids)
            page = [e.run.rollout(r) for r in ids[offset : offset + limit]]
        else:
            rows = _sorted(self._filtered(e, params), sort, desc)
            total = len(rows)
            page = rows[offset : offset + limit]
        live = [
            {
                "rollout_id": x.rollout_id,
                "task_id": x.task_id,
                "rollout_index": x.rollout_index,
                "attempt": x.attempt,
                "started_at": x.started_at,
                "events": x.events,
                "status": "running" if state == "running" else "interrupted",
            }
            for x in e.run.live_rollouts()
            if _live_matches(x.task_id, params)
        ]
        return {
            "run": name,
            "state": state,
            "total": total,
            "finished": len(e.run),
            "planned": e.run.info.planned,
            "offset": offset,
            "limit": limit,
            "rows": [_row(r) for r in page],
            "live": live,
        }

    def _filtered(self, e: _Entry, params: Mapping[str, str]) -> list[Rollout]:
        status = params.get("status") or None
        task = (params.get("task") or "").strip()
        failed = params.get("failed") in ("1", "true")
        errored = params.get("errored") in ("1", "true")
        could_not_run = params.get("could_not_run") in ("1", "true")
        kind = params.get("error_kind") or None
        metric = params.get("metric") or None
        op = params.get("op") or "lt"
        value = _float(params.get("value"))
        if task and task in e.run.info.task_ids:
            rows = [e.run.rollout(r) for r in e.run.rollout_ids(task_id=task)]
        elif task:
            rows = [r for r in e.rows() if task in r.task_id]
        else:
            rows = e.rows()
        out = []
        for r in rows:
            if status is not None and r.status != status:
                continue
            # a rollout that could not run is no answer: neither passed nor failed
            if failed and (r.infrastructure or (r.ok and r.passed is not False)):
                continue
            if errored and (r.infrastructure or r.ok):
                continue
            if could_not_run and not r.infrastructure:
                continue
            if kind is not None and r.error_kind != kind:
                continue
            if metric is not None:
                v = r.rewards.get(metric)
                if not isinstance(v, (int, float)):
                    continue
                if value is not None and not _compare(float(v), op, value):
                    continue
            out.append(r)
        return out

    def tasks(self, name: str, params: Mapping[str, str]) -> dict[str, Any]:
        """One page of the tasks × rollouts grid: per task its statistics and rollouts."""
        e = self.entry(name)
        offset = max(0, _int(params.get("offset"), 0))
        limit = min(MAX_PAGE, max(1, _int(params.get("limit"), 50)))
        state = e.run.state()
        summary = e.summary(running=state == "running")
        stats = {t["task_id"]: t for t in summary.get("tasks") or []}
        task_ids = e.run.info.task_ids or sorted(e.by_task())
        query = (params.get("task") or "").strip()
        if query:
            task_ids = [t for t in task_ids if query in t]
        live: dict[str, list[Any]] = {}
        for x in e.run.live_rollouts():
            live.setdefault(x.task_id, []).append(x)
        page = []
        for task_id in task_ids[offset : offset + limit]:
            done = {r.rollout_index: r for r in _task_rollouts(e, task_id)}
            running = {x.rollout_index: x for x in live.get(task_id, [])}
            cells = []
            for index in range(e.run.info.rollouts_per_task):
                if index in done:
                    r = done[index]
                    cells.append(
                        {
                            "rollout_id": r.rollout_id,
                            "index": index,
                            "status": r.status,
                            "reward": r.reward,
                            "passed": r.passed,
                            "ok": r.ok,
                            "infrastructure": r.infrastructure,
                        }
                    )
                elif index in running:
                    x = running[index]
                    cells.append(
                        {
                            "rollout_id": x.rollout_id,
                            "index": index,
                            "status": "running" if state == "running" else "interrupted",
                        }
                    )
                else:
                    cells.append({"index": index, "status": "pending"})
            t = stats.get(task_id) or {}
            page.append(
                {
                    "task_id": task_id,
                    "rollouts": len(done),
                    "planned": e.run.info.rollouts_per_task,
                    "mean_reward": t.get("mean_reward"),
                    "pass_at_k": t.get("pass_at_k") or {},
                    "errors": t.get("errors", 0),
                    "infra_errors": t.get("infra_errors", 0),
                    "cells": cells,
                }
            )
        return {
            "run": name,
            "total": len(task_ids),
            "offset": offset,
            "limit": limit,
            "tasks": page,
        }

    def run_snapshot(self, name: str) -> dict[str, Any]:
        """What changes on a run page (for live updates): counts, state, running rollouts."""
        e = self.entry(name)
        return {
            "finished": len(e.run),
            "size": _size(e.path / ROLLOUTS),
            "planned": e.run.info.planned,
            "state": e.run.state(),
            "live": [[x.rollout_id, x.events, x.attempt] for x in e.run.live_rollouts()],
        }

    # -- a rollout ---------------------------------------------------------------
    def rollout(self, name: str, rollout_id: str) -> dict[str, Any]:
        """Everything about one rollout: record, task, transcript, events, verifier, files."""
        e = self.entry(name)
        if not is_safe_name(rollout_id):
            raise NotFound(f"no rollout {rollout_id!r}")
        state = e.run.state()
        task_of: str | None = None
        live = [x for x in e.run.live_rollouts() if x.rollout_id == rollout_id]
        if live:
            x = live[0]
            steps, offset = e.run.live_steps(rollout_id)
            task_of = x.task_id
            doc: dict[str, Any] = {
                "run": name,
                "rollout_id": rollout_id,
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
            }
            if rollout_id in e.run.rollout_ids():  # run again by --resume: the earlier result
                doc["previous"] = _row(e.run.rollout(rollout_id))
        else:
            try:
                r = e.run.rollout(rollout_id)
            except KeyError:
                raise NotFound(f"no rollout {rollout_id!r} in run {name!r}") from None
            if r.rollout_id != rollout_id:  # a prefix: the page asks for the full id
                raise NotFound(f"no rollout {rollout_id!r} in run {name!r}")
            task_of = r.task_id
            try:
                steps = e.run.steps(rollout_id)
            except RunDirError as exc:
                steps = []
                events_error: str | None = str(exc)
            else:
                events_error = None
            record = r.to_json()
            doc = {
                "run": name,
                "rollout_id": rollout_id,
                "running": False,
                "interrupted": False,
                "state": state,
                "record": record,
                "row": _row(r),
                "reason": r.reason,
                "ok": r.ok,
                "infrastructure": r.infrastructure,
                "events": [_step(s) for s in steps[:MAX_EVENTS]],
                "events_total": len(steps),
                "events_error": events_error,
                "verifier": _verifiers(record.get("raw") or {}),
                "steps": _harness_steps(record.get("raw") or {}),
            }
            doc.update(self._calls(e, r))
        task = e.tasks().get(task_of) if task_of else None
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
        doc["task_id"] = task_of
        doc["siblings"] = [
            {
                "rollout_id": s.rollout_id,
                "index": s.rollout_index,
                "reward": s.reward,
                "ok": s.ok,
                "infrastructure": s.infrastructure,
            }
            for s in (_task_rollouts(e, task_of) if task_of else [])
        ]
        doc["metrics"] = _metrics(e.run.info.manifest)
        doc["files"], doc["files_truncated"] = self._files(e, rollout_id)
        doc["branches"] = _branches(doc.get("record"))
        return doc

    def _calls(self, e: _Entry, r: Rollout) -> dict[str, Any]:
        """The rollout's model calls in brief (``calls``), and which lack token ids."""
        try:
            calls = e.run.calls(r.rollout_id)
        except RunDirError as exc:
            return {"calls": [], "calls_total": r.calls, "calls_error": str(exc)}
        return {
            "calls": [_call_row(c) for c in calls[:MAX_CALLS]],
            "calls_total": len(calls),
            "calls_error": None,
            "calls_without_tokens": r.calls_without_tokens,
        }

    def call(self, name: str, rollout_id: str, index: str) -> dict[str, Any]:
        """One model call of a finished rollout, whole (as ``calls/`` holds it)."""
        e = self.entry(name)
        if not is_safe_name(rollout_id) or not index.isdigit():
            raise NotFound(f"no call {index!r} of rollout {rollout_id!r}")
        try:
            calls = e.run.calls(rollout_id)
        except KeyError:
            raise NotFound(f"no rollout {rollout_id!r} in run {name!r}") from None
        found = [c for c in calls if c.index == int(index)]
        if not found:
            raise NotFound(f"no call {index} of rollout {rollout_id!r}")
        data: dict[str, Any] = unstructure(found[0])
        return data

    def live(self, name: str, rollout_id: str, offset: int) -> dict[str, Any]:
        """A running rollout's events after ``offset``; ``finished`` once its line is written."""
        e = self.entry(name)
        if not is_safe_name(rollout_id):
            raise NotFound(f"no rollout {rollout_id!r}")
        live = {x.rollout_id for x in e.run.live_rollouts()}
        steps, new_offset = e.run.live_steps(rollout_id, offset) if rollout_id in live else ([], 0)
        return {
            "events": [_step(s) for s in steps],
            "offset": new_offset if rollout_id in live else offset,
            "finished": rollout_id not in live and rollout_id in e.run.rollout_ids(),
            "state": e.run.state(),
        }

    def _files(self, e: _Entry, rollout_id: str) -> tuple[list[dict[str, Any]], bool]:
        """Files kept for a rollout: artifacts/<id>/ and rollouts/<id>/ (symlinks not followed)."""
        out: list[dict[str, Any]] = []
        for top, kind in (("artifacts", "artifact"), ("rollouts", "sandbox")):
            base = e.path / top / rollout_id
            if not base.is_dir() or base.is_symlink():
                continue
            for dirpath, dirnames, filenames in os.walk(base, followlinks=False):
                dirnames.sort()
                for fname in sorted(filenames):
                    full = Path(dirpath) / fname
                    rel = full.relative_to(e.path).as_posix()
                    try:
                        st = full.lstat()
                    except OSError:
                        continue
                    link = full.is_symlink()
                    out.append(
                        {
                            "path": rel,
                            "size": None if link else st.st_size,
                            "kind": kind,
                            "symlink": link,
                        }
                    )
                    if len(out) >= MAX_FILES:
                        return out, True
        return out, False

    def file(self, name: str, relative: str) -> Path:
        """A regular file inside the run (refused when the path leads outside the root)."""
        e = self.entry(name)
        path = inside(self.root, relative, base=e.path)
        if e.path != path and e.path not in path.parents:
            raise Refused(f"refused path {relative!r}: outside the run directory")
        if not path.is_file():
            raise NotFound(f"not a file: {relative}")
        return path

    # -- a job -------------------------------------------------------------------
    def job(self, name: str) -> dict[str, Any]:
        """A job: its cells (where each sits on the axes, its run and state), their
        leaderboard with intervals, and the tasks × cells heat map of mean rewards."""
        jd, prefix = self._job(name)
        cells = []
        scored = []
        listings: dict[str, dict[str, Any] | None] = {}
        for c in jd.cells:
            run = prefix + c.name if c.started else None
            listing = None
            error = None
            if run is not None:
                try:
                    e = self.entry(run, refresh=False)
                    stored = e.settled()
                    if stored is not None:  # a 100,000-rollout job opens without a scan
                        listing = self._settled_listing(run, e, stored)
                    else:
                        e.refresh()
                        listing = self._listing(run, e)
                    scored.append((run, e.scores(), e.row(c.name)))
                except NotFound:
                    run = None
                except RunDirError as exc:  # a corrupt line: the cell says so, the rest shows
                    run, listing, error = None, None, str(exc)
            listings[c.name] = listing
            cells.append(
                {
                    "name": c.name,
                    "run": run,
                    "axes": c.axes,
                    "state": listing["state"]
                    if listing
                    else "broken"
                    if error
                    else "outside"
                    if c.outside
                    else "not started",
                    "listing": listing,
                    "error": error,
                }
            )
        axes_of = {prefix + c.name: c.axes for c in jd.cells}
        board = leaderboard(scored)
        for record in board:
            record["axes"] = axes_of.get(record["run"], {})
        return {
            **self._job_listing(name, jd, listings),
            "path": str(jd.path),
            "concurrency": jd.concurrency,
            "cell_list": cells,
            "leaderboard": board,
            "heatmap": heatmap(scored),
            "labels": {run: cell for run, cell in ((prefix + c.name, c.name) for c in jd.cells)},
        }

    # -- statistics and charts ------------------------------------------------------
    def scored(self, name: str, label: str | None = None) -> Scored:
        """A run with its per-task scores and leaderboard row (labelled ``label``, else its
        name), for the statistics of the compare and job pages."""
        e = self.entry(name)
        return (name, e.scores(), e.row(label if label is not None else name))

    def charts(self, names: Sequence[str]) -> dict[str, Any]:
        """The distributions of reward, duration, tokens and cost of each run, binned alike
        (see :mod:`agentkit.view._charts`)."""
        names = _distinct(names)
        if not names:
            raise NotFound("no run to chart: give ?runs=NAME,...")
        return distributions([(name, self.entry(name).values()) for name in names])

    # -- compare -----------------------------------------------------------------
    def compare(self, names: Sequence[str], baseline: str | None = None) -> dict[str, Any]:
        """Two runs or more: their leaderboard with intervals, each against ``baseline``
        (the first run unless named) paired on the tasks both scored, the tasks × runs heat
        map; for two runs, also which tasks one passes and the other does not."""
        names = _distinct(names)
        if len(names) < 2:
            raise NotFound("a comparison needs two runs or more: /compare/RUN_A/RUN_B/...")
        base = baseline or names[0]
        if base not in names:
            raise NotFound(f"the baseline {base!r} is not one of the runs compared")
        labels = self._labels(names)
        scored = [self.scored(name, labels[name]) for name in names]
        entries = [self.entry(name) for name in names]
        doc: dict[str, Any] = {
            "runs": [self._listing(name, e) for name, e in zip(names, entries, strict=True)],
            "labels": labels,
            "same_taskset": len({e.run.info.taskset for e in entries}) == 1,
            "baseline": base,
            "leaderboard": leaderboard(scored),
            "against": against(scored[names.index(base)], [s for s in scored if s[0] != base]),
            "heatmap": heatmap(scored),
        }
        if len(names) == 2:
            doc.update(self._verdicts(names[0], entries[0], names[1], entries[1]))
        return doc

    def _labels(self, names: Sequence[str]) -> dict[str, str]:
        """What to call each run on a page: a cell by its name when every run is a cell of
        one job, else ``JOB › CELL``; any other run by its name."""
        cells = {name: self._cell_of(name) for name in names}
        jobs = {job for job, _ in cells.values()}
        out = {}
        for name, (job, cell) in cells.items():
            if job is None or cell is None:
                out[name] = name
            else:
                out[name] = cell if len(jobs) == 1 else f"{job} › {cell}"
        return out

    def _verdicts(self, a: str, ea: _Entry, b: str, eb: _Entry) -> dict[str, Any]:
        """Two runs per task: which tasks one passes and the other does not."""
        sa = ea.summary(running=ea.run.state() == "running")
        sb = eb.summary(running=eb.run.state() == "running")
        ta = {t["task_id"]: t for t in sa.get("tasks") or []}
        tb = {t["task_id"]: t for t in sb.get("tasks") or []}
        order = list(ea.run.info.task_ids) + [t for t in eb.run.info.task_ids if t not in ta]
        rows = []
        counts = {"both": 0, "a_only": 0, "b_only": 0, "neither": 0, "missing": 0}
        for task_id in order:
            x, y = _side(ta.get(task_id), ea, task_id), _side(tb.get(task_id), eb, task_id)
            if x is None or y is None or x["passed"] is None or y["passed"] is None:
                verdict = "missing"
            elif x["passed"] and y["passed"]:
                verdict = "both"
            elif x["passed"]:
                verdict = "a_only"
            elif y["passed"]:
                verdict = "b_only"
            else:
                verdict = "neither"
            counts[verdict] += 1
            rows.append({"task_id": task_id, "a": x, "b": y, "verdict": verdict})
        return {
            "a": self._listing(a, ea),
            "b": self._listing(b, eb),
            "counts": counts,
            "tasks": rows,
        }


# -- helpers ---------------------------------------------------------------------


#: Query parameters that filter the rollout table.
_FILTERS = ("status", "failed", "errored", "could_not_run", "error_kind", "task", "metric")


def _job_state(jd: JobDir, started: list[dict[str, Any]], cells: int) -> str:
    """``running`` (its process holds the job's lock, or a cell runs), ``not started``,
    ``complete`` (every cell complete) or ``incomplete``."""
    if jd.running() or any(x["state"] == "running" for x in started):
        return "running"
    if not started:
        return "not started"
    if len(started) == cells and all(x["state"] == "complete" for x in started):
        return "complete"
    return "incomplete"


def _best(listing: dict[str, Any]) -> dict[str, Any]:
    return {"run": listing["name"], "cell": listing["cell"], "mean_reward": listing["mean_reward"]}


def _distinct(names: Sequence[str]) -> list[str]:
    """Names in order, each once, blanks left out."""
    return list(dict.fromkeys(n for n in names if n))


def _task_rollouts(e: _Entry, task_id: str) -> list[Rollout]:
    """One task's rollouts in rollout-index order (only its lines are parsed)."""
    if task_id in e.run.info.task_ids:
        return [e.run.rollout(r) for r in e.run.rollout_ids(task_id=task_id)]
    return e.by_task().get(task_id, [])


def _sorted(rows: list[Rollout], sort: str | None, desc: bool) -> list[Rollout]:
    """Rows (in task order) sorted by a column, ties kept in task order, None last."""
    key = _SORT_KEYS.get(sort or "task", _SORT_KEYS["task"])
    if (sort or "task") == "task" and not desc:
        return rows
    valued = [(key(r), r) for r in rows]
    known = [x for x in valued if x[0] is not None]
    known.sort(key=lambda x: x[0], reverse=desc)
    return [r for _, r in known] + [r for v, r in valued if v is None]


def _side(stats: dict[str, Any] | None, e: _Entry, task_id: str) -> dict[str, Any] | None:
    if stats is None:
        return None
    rollouts = _task_rollouts(e, task_id)
    scored = [r for r in rollouts if r.reward is not None]
    return {
        "finished": stats.get("rollouts", 0),
        "mean_reward": stats.get("mean_reward"),
        "pass_at_1": (stats.get("pass_at_k") or {}).get("1"),
        "errors": stats.get("errors", 0),
        "infra_errors": stats.get("infra_errors", 0),
        # a task passes when its pass@1 is at least one half (most rollouts passed)
        "passed": None if not scored else sum(1 for r in scored if r.passed) * 2 >= len(scored),
        "rollouts": [
            {
                "rollout_id": r.rollout_id,
                "reward": r.reward,
                "passed": r.passed,
                "ok": r.ok,
                "infrastructure": r.infrastructure,
            }
            for r in rollouts
        ],
    }


def _row(r: Rollout) -> dict[str, Any]:
    u = r.usage
    return {
        "rollout_id": r.rollout_id,
        "task_id": r.task_id,
        "example_id": r.example_id,
        "rollout_index": r.rollout_index,
        "group": r.group,
        "status": r.status,
        "reward": r.reward,
        "passed": r.passed,
        "ok": r.ok,
        "error_kind": r.error_kind,
        "reason": r.reason,
        "infrastructure": r.infrastructure,
        "turns": u.requests,
        "input_tokens": u.input_tokens,
        "output_tokens": u.output_tokens,
        "tokens": u.input_tokens + u.output_tokens,
        "cost": r.cost,
        "duration_s": r.timings.duration_s,
        "finished_at": r.timings.finished_at,
        "attempts": r.attempts,
        "rewards": r.rewards,
    }


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


def _metrics(manifest: dict[str, Any]) -> list[dict[str, Any]]:
    """The compiled rubric's metrics: name, weight, origin, description."""
    return [
        {
            "name": str(m.get("name")),
            "weight": float(m.get("weight") or 0.0),
            "origin": str(m.get("origin", "")),
            "description": str(m.get("description", "")),
        }
        for m in (manifest.get("rubric") or {}).get("metrics") or []
        if isinstance(m, dict)
    ]


def _live_matches(task_id: str, params: Mapping[str, str]) -> bool:
    if params.get("status") not in (None, "", "running"):
        return False
    if any(params.get(k) in ("1", "true") for k in ("failed", "errored", "could_not_run")):
        return False
    if params.get("metric") or params.get("error_kind"):
        return False
    task = (params.get("task") or "").strip()
    return not task or task in task_id


def _compare(v: float, op: str, value: float) -> bool:
    if op == "ge":
        return v >= value
    if op == "gt":
        return v > value
    if op == "le":
        return v <= value
    if op == "eq":
        return math.isclose(v, value)
    return v < value


def _int(text: str | None, default: int) -> int:
    try:
        return int(text) if text not in (None, "") else default
    except ValueError:
        return default


def _float(text: str | None) -> float | None:
    try:
        return float(text) if text not in (None, "") else None
    except ValueError:
        return None


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


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
