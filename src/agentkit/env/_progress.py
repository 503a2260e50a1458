"""The live progress bar and status line of a run (rich, on stderr)."""

from __future__ import annotations

from typing import Any

from agentkit.rundir import RolloutRecord

__all__ = ["ProgressBar", "StatusLine"]


class StatusLine:
    """One line on stderr, redrawn in place (the sandbox's preparation: image builds)."""

    def __init__(self, console: Any = None) -> None:
        from rich.console import Console

        self.console = console or Console(stderr=True)
        self._live: Any = None

    def __enter__(self) -> StatusLine:
        return self

    def update(self, text: str) -> None:
        """Show ``text`` in place of the previous line."""
        from rich.live import Live
        from rich.text import Text

        if self._live is None:
            self._live = Live(Text(text), console=self.console, transient=False)
            self._live.start()
        else:
            self._live.update(Text(text))

    def __exit__(self, *exc: object) -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None
            if not self.console.is_terminal:
                self.console.line()  # a non-terminal render ends without one


class ProgressBar:
    """done/total, running, errors, mean reward so far and ETA, redrawn by rich."""

    def __init__(self, total: int, *, done: int = 0, console: Any = None) -> None:
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        self.console = console or Console(stderr=True)
        self.running = 0
        self.errors = 0
        self._sum = 0.0
        self._scored = 0
        self.progress = Progress(
            TextColumn("[bold]rollouts"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("running {task.fields[running]}"),
            TextColumn("errors {task.fields[errors]}"),
            TextColumn("reward {task.fields[reward]}"),
            TimeElapsedColumn(),
            TextColumn("ETA"),
            TimeRemainingColumn(),
            console=self.console,
            transient=False,
        )
        self.task_id = self.progress.add_task(
            "rollouts", total=total, completed=done, running=0, errors=0, reward="-"
        )

    def __enter__(self) -> ProgressBar:
        self.progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.stop()

    def started(self) -> None:
        """A rollout started."""
        self.running += 1
        self.progress.update(self.task_id, running=self.running)

    def finished(self, record: RolloutRecord) -> None:
        """A rollout finished (and was recorded)."""
        self.running -= 1
        if not record.ok:
            self.errors += 1
        if record.reward is not None:
            self._sum += record.reward
            self._scored += 1
        mean = f"{self._sum / self._scored:.3f}" if self._scored else "-"
        self.progress.update(
            self.task_id, advance=1, running=self.running, errors=self.errors, reward=mean
        )
