"""The reader of a run directory, lazy: an index of line offsets, small fields first.

Opening a run reads ``manifest.json`` only. Listing rollouts scans
``rollouts.jsonl`` once for line offsets and rollout ids (a regular
expression on each line's first bytes, no JSON parsing), then parses only the
rollouts asked for, and of those only the small fields written before
``"output"``; transcripts are read when used. A run that is still being
written is followed with :meth:`RunReader.refresh`, which reads only the new
lines. Public as :class:`agentkit.runs.Run`, which adds the run's summary
recomputed by :mod:`agentkit.stats`.
"""

from __future__ import annotations

import json
import math
import mmap
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from agentkit._calls import ModelCall
from agentkit.rundir._confined import LeadsOutside, read_in_run
from agentkit.rundir._layout import (
    EVENTS_DIR,
    GROUPS,
    LOCK,
    ROLLOUTS,
    SUMMARY,
    TASKS,
    RunDirError,
)
from agentkit.rundir._lines import load_groups
from agentkit.rundir._live import live_file, lock_held, looks_running, read_live, scan_live
from agentkit.rundir._manifest import read_manifest, run_info
from agentkit.rundir._record_check import RecordFieldError, check_event
from agentkit.rundir._records import RolloutRecord
from agentkit.rundir._rollout_calls import read_rollout_calls
from agentkit.rundir._rollout_line import checked, full_line, rollout_of
from agentkit.rundir._types import (
    LiveRollout,
    Metric,
    Rollout,
    RunState,
    Step,
    TaskInfo,
)

__all__ = ["RunReader"]

_ID = re.compile(rb'"rollout_id":\s*"((?:[^"\\]|\\.)*)"')
_PLACE = re.compile(rb'"rollout_index":\s*(\d+),\s*"group":\s*(\d+)[,}]')
_SPLIT = b',"output":'
_LIGHT_KEYS = ("status", "reward", "rewards", "usage", "scoring_errors")


class RunReader:
    """A run directory, read lazily. See the module doc and docs/run-directory.md."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._manifest = read_manifest(self.path)
        self.info = run_info(self.path, self._manifest)
        self._offsets: dict[str, tuple[int, int]] = {}
        self._order: list[str] = []
        #: (group, rollout_index) of every rollout, read with its id (no JSON parsing)
        self._place: dict[str, tuple[int, int]] = {}
        self._by_task: list[str] | None = None
        self._scanned = 0
        #: Whole lines of rollouts.jsonl indexed so far (to name a bad line by number).
        self._lines_scanned = 0
        self._cache: dict[str, Rollout] = {}
        #: Set when rollouts.jsonl ends in a half-written line (a killed run; resume drops it).
        self.torn_tail: str | None = None

    def __repr__(self) -> str:
        return f"{type(self).__name__}({str(self.path)!r}, {len(self)} rollouts)"

    # -- the index -----------------------------------------------------------
    def refresh(self) -> int:
        """Index the lines appended since the last look; returns how many were new."""
        path = self.path / ROLLOUTS
        try:
            size = path.stat().st_size
        except FileNotFoundError:
            return 0
        if size <= self._scanned:
            return 0
        new = 0
        with open(path, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            pos = self._scanned
            number = self._lines_scanned  # whole lines before pos
            while True:
                number += 1  # the number of the line at pos
                end = mm.find(b"\n", pos)
                if end == -1:
                    if len(mm) > pos:  # a half-written last line: not finished (yet)
                        self.torn_tail = (
                            f"{ROLLOUTS}: a half-written last line ({len(mm) - pos} bytes) "
                            "left by an interrupted run"
                        )
                    break
                if end > pos:
                    head = min(end, pos + 2048)
                    match = _ID.search(mm, pos, head)
                    place = _PLACE.search(mm, pos, head)
                    if match and place:
                        raw = match.group(1)
                        rid = json.loads(b'"' + raw + b'"') if b"\\" in raw else raw.decode("utf-8")
                        self._place[rid] = (int(place.group(2)), int(place.group(1)))
                    else:  # not as agentkit writes it: parse the line
                        line = full_line(mm[pos:end], path, number)
                        rid = line["rollout_id"]
                        self._place[rid] = (
                            int(line.get("group") or 0),
                            int(line.get("rollout_index") or 0),
                        )
                    if rid not in self._offsets:
                        self._order.append(rid)
                    self._offsets[rid] = (pos, end)
                    self._cache.pop(rid, None)
                    new += 1
                pos = end + 1
            self._lines_scanned = number - 1  # not the torn or missing line after the last
            if pos == len(mm):
                self.torn_tail = None
            self._scanned = pos
        if new:
            self._by_task = None
        return new

    def _index(self) -> dict[str, tuple[int, int]]:
        if not self._scanned:
            self.refresh()
        return self._offsets

    def __len__(self) -> int:
        return len(self._index())

    def rollout_ids(self, *, order: str = "finished", task_id: str | None = None) -> list[str]:
        """Every finished rollout's id, in the order they first finished.

        ``order="task"`` lists them in the plan's order instead (by task, then
        rollout index); ``task_id`` keeps one task's rollouts (in rollout-index
        order). Neither parses a line: a page of a large run in task order
        reads only that page.
        """
        self._index()
        if task_id is not None:
            try:
                group = self.info.task_ids.index(task_id)
            except ValueError:
                return [r for r in self._by_task_order() if self.rollout(r).task_id == task_id]
            return [r for r in self._by_task_order() if self._place[r][0] == group]
        if order == "task":
            return list(self._by_task_order())
        if order != "finished":
            raise ValueError(f"order must be 'finished' or 'task', not {order!r}")
        return list(self._order)

    def _by_task_order(self) -> list[str]:
        if self._by_task is None:
            self._by_task = sorted(self._order, key=self._place.__getitem__)
        return self._by_task

    # -- rollouts --------------------------------------------------------------
    def _read(self, rid: str, *, light: bool, fh: Any = None) -> dict[str, Any]:
        start, end = self._index()[rid]
        if fh is None:
            with open(self.path / ROLLOUTS, "rb") as own:
                own.seek(start)
                line = own.read(end - start)
        else:  # an mmap of the file
            line = fh[start:end]
        if light:
            cut = line.find(_SPLIT)
            if cut > 0:
                try:
                    data = json.loads(line[:cut] + b"}")
                except ValueError:
                    data = None
                if isinstance(data, dict) and all(k in data for k in _LIGHT_KEYS):
                    return checked(data, self.path / ROLLOUTS, lambda: self._line_number(start))
        return full_line(line, self.path / ROLLOUTS, lambda: self._line_number(start))

    def _line_number(self, start: int) -> int:
        """The number of the line of rollouts.jsonl that starts at byte ``start`` (read
        only to name a bad line in an error)."""
        count = 1
        with open(self.path / ROLLOUTS, "rb") as fh:
            while start > 0:
                block = fh.read(min(start, 1 << 22))
                if not block:
                    break
                count += block.count(b"\n")
                start -= len(block)
        return count

    def rollout(self, rollout_id: str) -> Rollout:
        """One rollout by id or unique id prefix (a KeyError names the candidates)."""
        index = self._index()
        if rollout_id not in index:
            matches = [r for r in self._order if r.startswith(rollout_id)]
            if len(matches) != 1:
                hint = (
                    f"it matches {len(matches)}: {', '.join(matches[:5])}"
                    if matches
                    else "no rollout id starts with it"
                )
                raise KeyError(f"no rollout {rollout_id!r} in {self.path} ({hint})")
            rollout_id = matches[0]
        cached = self._cache.get(rollout_id)
        if cached is None:
            cached = self._parse(rollout_id, None)
        return cached

    def _parse(self, rollout_id: str, fh: Any) -> Rollout:
        data = self._read(rollout_id, light=True, fh=fh)
        parsed = self._cache[rollout_id] = rollout_of(
            data, lambda: self._read(rollout_id, light=False)
        )
        return parsed

    def _warm(self, ids: list[str]) -> None:
        """Parse the small fields of every uncached rollout in ``ids`` through one open file."""
        missing = [rid for rid in ids if rid not in self._cache]
        if len(missing) < 2:
            return
        missing.sort(key=lambda rid: self._offsets[rid][0])
        with (
            open(self.path / ROLLOUTS, "rb") as fh,
            mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mm,
        ):
            for rid in missing:
                self._parse(rid, mm)

    def iter_rollouts(
        self,
        *,
        status: str | None = None,
        failed: bool | None = None,
        task_id: str | None = None,
    ) -> Iterator[Rollout]:
        """Rollouts in the order they first finished, optionally filtered.

        ``failed=True`` keeps rollouts that did not pass (errored, hit a
        limit, could not run, or scored below the pass threshold).
        """
        ids = self.rollout_ids()
        self._warm(ids)
        for rid in ids:
            r = self.rollout(rid)
            if status is not None and r.status != status:
                continue
            if task_id is not None and r.task_id != task_id:
                continue
            if failed is not None and failed != (not r.ok or r.passed is False):
                continue
            yield r

    def rollouts(
        self,
        offset: int = 0,
        limit: int | None = None,
        *,
        status: str | None = None,
        failed: bool | None = None,
        task_id: str | None = None,
    ) -> list[Rollout]:
        """One page of rollouts: ``limit`` of them after skipping ``offset`` (filtered)."""
        if status is None and failed is None and task_id is None:
            ids = self.rollout_ids()[offset : None if limit is None else offset + limit]
            self._warm(ids)
            return [self.rollout(rid) for rid in ids]
        out: list[Rollout] = []
        for i, r in enumerate(self.iter_rollouts(status=status, failed=failed, task_id=task_id)):
            if i < offset:
                continue
            if limit is not None and len(out) >= limit:
                break
            out.append(r)
        return out

    def steps(self, rollout_id: str) -> list[Step]:
        """The rollout's trace: its events, in order (empty when it has none)."""
        rollout = self.rollout(rollout_id)
        name = rollout.events_file or f"{EVENTS_DIR}/{rollout.rollout_id}.jsonl"
        path = self.path / name
        try:
            data = read_in_run(self.path, name)
        except LeadsOutside:
            raise RunDirError(
                f"{self.path / ROLLOUTS}: rollout {rollout.rollout_id}: events_file {name!r} "
                "is outside the run directory; expected events/<rollout_id>.jsonl"
            ) from None
        except OSError as exc:
            raise RunDirError(f"{path}: cannot read: {exc.strerror or exc}") from None
        if data is None:
            return []
        text = data.decode("utf-8", errors="replace")
        steps = []
        for number, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            try:
                e = json.loads(line)
            except ValueError:
                raise RunDirError(f"{path}: line {number} is not valid JSON") from None
            try:
                check_event(e)
            except RecordFieldError as exc:
                raise RunDirError(f"{path}: line {number}: {exc}") from None
            steps.append(
                Step(
                    seq=int(e.get("seq", number - 1)),
                    type=str(e.get("type", "")),
                    timestamp=float(e.get("timestamp") or 0.0),
                    data=dict(e.get("data") or {}),
                )
            )
        return steps

    def calls(self, rollout_id: str) -> list[ModelCall]:
        """The rollout's model calls as the proxy recorded them, in the order they
        started (empty when it has none: a run without the proxy, say).

        Each call's ``prompt_token_ids`` are the full list, also where the file
        stores them as a reference to an earlier call (see the calls file in
        ``docs/run-directory.md``). Keys this agentkit does not know (a newer
        writer's) are ignored; a line that is not a call is an error naming the
        file, the line and the field. So is a file that is not the rollout's own:
        a call of another rollout, or one another run recorded (its ``run_id`` is
        not the manifest's; a run made before runs had ids has none, nor have its
        calls).
        """
        rollout = self.rollout(rollout_id)
        run_id = self._manifest.get("run_id")
        calls = read_rollout_calls(
            self.path,
            rollout.rollout_id,
            run_id=run_id if isinstance(run_id, str) else None,
            calls_file=rollout.calls_file,
        )
        return calls or []

    # -- a run in progress --------------------------------------------------------
    def state(self) -> RunState:
        """``running``, ``complete``, ``incomplete``, ``stopped`` or ``interrupted``.

        See :data:`~agentkit.runs.RunState`.

        Running means a process holds the run's lock, read from /proc/locks
        without taking it (elsewhere: files changed in the last ten minutes
        and no summary since). Call :meth:`refresh` first to count new lines.
        """
        held = lock_held(self.path / LOCK)
        if held is None:
            held = looks_running(self.path, self.path / SUMMARY)
        if held:
            return "running"
        stored = self.stored_summary() or {}
        if len(self) >= self.info.planned:
            return "incomplete" if self.infra_errors(stored) else "complete"
        if stored.get("stopped") and stored.get("finished") == len(self):
            return "stopped"
        return "interrupted"

    def infra_errors(self, stored: dict[str, Any] | None = None) -> int:
        """How many finished rollouts could not run (infrastructure failures, no reward).

        Read from summary.json when it counts every line (``stored``: it, read
        already), else from the rollouts' small fields.
        """
        if stored is None:
            stored = self.stored_summary() or {}
        counted = stored.get("infra_errors")
        if isinstance(counted, int) and stored.get("finished") == len(self):
            return counted
        ids = self.rollout_ids()
        self._warm(ids)
        return sum(1 for rid in ids if self.rollout(rid).infrastructure)

    def live_rollouts(self) -> list[LiveRollout]:
        """Rollouts running now, oldest first: their ``live/`` files (see docs/run-directory.md).

        When the run is not running, these are the rollouts its last session
        left unfinished (resume runs them again).
        """
        out = []
        for live in scan_live(self.path):
            if live.rollout_id in self._index():
                done = self.rollout(live.rollout_id).timings.finished_at
                if done is not None and live.started_at is not None and done >= live.started_at:
                    continue  # finished as we looked: its line is written, the file not yet gone
            out.append(live)
        return out

    def live_steps(self, rollout_id: str, offset: int = 0) -> tuple[list[Step], int]:
        """A running rollout's events after byte ``offset`` of its live file, and the next offset.

        Follow a rollout by passing the returned offset back. Besides events,
        ``rollout.start`` and ``rollout.retry`` steps (``seq`` -1) mark each
        attempt. Empty once the rollout has finished (read :meth:`steps` then).
        """
        path = live_file(self.path, rollout_id)
        if path is None:
            return [], offset
        return read_live(path, offset)

    # -- tasks, groups, metrics, summary ----------------------------------------
    def tasks(self) -> dict[str, TaskInfo]:
        """The planned tasks as recorded (runs written before tasks.jsonl existed: empty)."""
        path = self.path / TASKS
        try:
            lines = path.read_text(encoding="utf-8").splitlines()
        except FileNotFoundError:
            return {}
        out: dict[str, TaskInfo] = {}
        for line in lines:
            if not line.strip():
                continue
            t = json.loads(line)
            out[t["task_id"]] = TaskInfo(
                task_id=t["task_id"],
                example_id=str(t.get("example_id", "")),
                group=int(t.get("group", 0)),
                input=t.get("input"),
                target=t.get("target"),
                metadata=dict(t.get("metadata") or {}),
            )
        return out

    def groups(self) -> dict[str, dict[str, Any]]:
        """The last groups.jsonl line of each task: rewards, advantages, pass@k."""
        if not (self.path / GROUPS).exists():
            return {}
        return load_groups(self.path, repair=False)

    def records(self) -> list[Any]:
        """Every rollout as an :class:`~agentkit.env.RolloutRecord` (small fields only)."""
        out = []
        ids = self.rollout_ids()
        self._warm(ids)
        for rid in ids:
            r = self.rollout(rid)
            out.append(RolloutRecord.from_json(r._data))
        return out

    def metrics(self) -> list[Metric]:
        """Every metric of the compiled rubric with its mean over the rollouts."""
        values: dict[str, list[float]] = {}
        ids = self.rollout_ids()
        self._warm(ids)
        for rid in ids:
            for name, value in self.rollout(rid).rewards.items():
                if isinstance(value, (int, float)):
                    values.setdefault(name, []).append(float(value))
        out = []
        for m in (self._manifest.get("rubric") or {}).get("metrics") or []:
            found = values.get(m["name"], [])
            out.append(
                Metric(
                    name=m["name"],
                    weight=float(m.get("weight", 0.0)),
                    origin=str(m.get("origin", "")),
                    description=str(m.get("description", "")),
                    mean=math.fsum(found) / len(found) if found else None,
                    count=len(found),
                )
            )
        return out

    def stored_summary(self) -> dict[str, Any] | None:
        """summary.json as the last session wrote it (None before the first one ended)."""
        try:
            data: dict[str, Any] = json.loads((self.path / SUMMARY).read_text(encoding="utf-8"))
        except (FileNotFoundError, ValueError):
            return None
        return data

    def current_summary(self) -> dict[str, Any] | None:
        """summary.json when it describes every finished rollout as it is now, else None.

        It is current when ``rollouts.jsonl`` has exactly as many lines as the
        summary counts rollouts (lines are only appended, so nothing was added
        or run again since it was written; counting newlines does not index
        the file), or when it was written after the last line and counts every
        rollout. A resume killed after running a rollout again, before writing
        its summary, leaves a summary that is not current.
        """
        stored = self.stored_summary()
        finished = stored.get("finished") if stored is not None else None
        if stored is None or not isinstance(finished, int):
            return None
        rollouts = self.path / ROLLOUTS
        try:
            if _count_lines(rollouts) == finished:
                return stored
            summary_ns = (self.path / SUMMARY).stat().st_mtime_ns
            written_after = summary_ns >= rollouts.stat().st_mtime_ns
        except FileNotFoundError:
            return stored if finished == 0 else None
        return stored if written_after and finished == len(self) else None


def _count_lines(path: Path) -> int:
    """Newlines in a file, read in large blocks (no parsing)."""
    count = 0
    with open(path, "rb") as fh:
        while block := fh.read(1 << 22):
            count += block.count(b"\n")
    return count
