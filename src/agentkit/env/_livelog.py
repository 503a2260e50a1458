"""``live/<rollout_id>.jsonl``: a rollout's events on disk while it runs.

The durable record of a rollout (its line in ``rollouts.jsonl`` and its
``events/`` file) is written when it finishes. So that viewers can follow a
rollout that is still running, the runner also appends each event to
``live/<rollout_id>.jsonl`` the moment the harness emits it:

* the first line is ``{"type": "rollout.start", "rollout_id", "task_id",
  "rollout_index", "group", "attempt": 1, "started_at"}``;
* then one line per event, as in ``events/<rollout_id>.jsonl``;
* before a retry, ``{"type": "rollout.retry", "attempt", "timestamp",
  "error_kind", "error", "delay_s"}``, and the next attempt's events follow;
* the file is removed once the rollout's line is in ``rollouts.jsonl``.

Lines are written unbuffered (one ``write`` each, no fsync: this is a view,
not a record) and redacted like every other file of the run. A file left
behind by a killed run is removed when the run is resumed (the resuming
process holds the run's lock, so nothing else can be writing it).
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import Any

from agentkit.rundir import LIVE_DIR, to_utf8

__all__ = ["LiveLog"]

log = logging.getLogger("agentkit")


class LiveLog:
    """One rollout's live event file; every method swallows I/O errors after one warning."""

    def __init__(self, store: Any, rollout_id: str) -> None:
        self._store = store
        self.rollout_id = rollout_id
        self.path: Path = Path(store.run_dir) / LIVE_DIR / f"{rollout_id}.jsonl"
        self._fd: int | None = None
        self._failed = False

    def start(self, *, task_id: str, rollout_index: int, group: int) -> LiveLog:
        """Create the file with its ``rollout.start`` line."""
        try:
            self.path.parent.mkdir(exist_ok=True)
            flags = (
                os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND | getattr(os, "O_CLOEXEC", 0)
            )
            self._fd = os.open(self.path, flags, 0o644)
        except OSError as exc:
            self._fail(exc)
            return self
        self._write(
            {
                "type": "rollout.start",
                "rollout_id": self.rollout_id,
                "task_id": task_id,
                "rollout_index": rollout_index,
                "group": group,
                "attempt": 1,
                "started_at": time.time(),
            }
        )
        return self

    def event(self, event_json: dict[str, Any]) -> None:
        """Append one event (the same object as an ``events/`` line)."""
        self._write(event_json)

    def retry(
        self, *, attempt: int, error_kind: str | None, error: str | None, delay_s: float
    ) -> None:
        """Note that the rollout is tried again (``attempt`` is the next attempt's number)."""
        self._write(
            {
                "type": "rollout.retry",
                "attempt": attempt,
                "timestamp": time.time(),
                "error_kind": error_kind,
                "error": error,
                "delay_s": delay_s,
            }
        )

    def close(self, *, remove: bool) -> None:
        """Close the file; ``remove`` once the rollout's line is durable."""
        self._close_fd()
        if remove:
            try:
                self.path.unlink()
            except OSError:
                pass

    def _close_fd(self) -> None:
        if self._fd is not None:
            try:
                os.close(self._fd)
            except OSError:
                pass
            self._fd = None

    def _write(self, data: dict[str, Any]) -> None:
        if self._fd is None:
            return
        try:
            payload = to_utf8(self._store.dumps(data) + "\n", str(self.path), data)
            view = memoryview(payload)
            while view:
                view = view[os.write(self._fd, view) :]
        except (OSError, TypeError, ValueError) as exc:
            self._fail(exc)

    def _fail(self, exc: BaseException) -> None:
        if not self._failed:
            self._failed = True
            log.warning("agentkit: cannot write the live events of %s: %s", self.path.name, exc)
        self._close_fd()
