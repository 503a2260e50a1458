"""Pausing a sandbox's processes while its files are copied (a fork), then resuming them.

:func:`pause` stops every process of a sandbox with ``SIGSTOP`` and returns
once each of them (every thread) is stopped: a stopped process is outside
every system call, so no write is half done and the files are as they were
at that moment (which may be between two writes of a program that writes a
file in several: docs/sandboxes.md, "What a fork guarantees of a file being
written"). :meth:`Paused.resume` sends ``SIGCONT``.

The tree is walked from its roots (the orchestrator's own wrapper processes
of running commands, ``nsenter``, and the sandbox's pid namespace's init),
and stopped **parents first**: a process is stopped only once its parent is,
and its children are read only then (a stopped process cannot fork, so the
list is complete). Resuming goes the other way, **children first**. So no
parent ever sees a child stopped: ``nsenter`` (which stops itself when its
child stops) and a shell with job control (which would report the job as
stopped) notice nothing. A process that was already stopped before the pause
(``kill -STOP`` inside, a job suspended with ``^Z``) is left stopped.

The cgroup freezer would do the same without signals, but a sandbox has no
cgroup of its own (see ``docs/sandboxes.md``): this works as root and as an
ordinary user alike.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Iterable
from typing import IO

import attrs

__all__ = ["PauseTimeoutError", "Paused", "Resumer", "pause"]

#: Thread states that are no longer running user code: stopped (``T``), stopped
#: by a tracer (``t``), zombie (``Z``), dead (``X``).
_STILL = frozenset(b"TtZX")


class PauseTimeoutError(TimeoutError):
    """A process did not stop in time (stuck in an uninterruptible wait)."""


def _states(pid: int) -> list[int] | None:
    """The state letter of each of ``pid``'s threads; None once it is gone."""
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return None
    out = []
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/stat", "rb") as f:
                data = f.read()
        except OSError:
            continue  # that thread has exited
        # The command name may hold ')' and spaces: the state follows the last ')'.
        out.append(data[data.rfind(b")") + 2])
    return out


def _children(pid: int) -> list[int]:
    """Host pids of ``pid``'s children (those of every thread)."""
    out: list[int] = []
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tids:
        with contextlib.suppress(OSError), open(f"/proc/{pid}/task/{tid}/children") as f:
            out += [int(p) for p in f.read().split()]
    return out


#: The resumer's script: each line read is a pid about to be stopped; ``done`` ends it;
#: the end of its input without ``done`` resumes them all, the last told first.
_RESUMER = (
    'p=; while read -r l; do [ "$l" = done ] && exit 0; p="$l $p"; done; '
    '[ -z "$p" ] || kill -CONT $p 2>/dev/null; exit 0'
)


class Resumer:
    """The process that resumes stopped processes should this one die: each pid it is
    told (before that process is stopped) gets ``SIGCONT`` when its input ends without
    :meth:`done` (this process killed), the last told first. A pause's processes then
    run on and end as on any orchestrator's death (the holder's lifeline); so do those
    ``end_processes`` stops before it kills them."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            ["/bin/sh", "-c", _RESUMER],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,  # not ended with this process's group
        )
        assert self.proc.stdin is not None
        self.pipe: IO[bytes] = self.proc.stdin

    def tell(self, pid: int) -> None:
        """``pid`` is about to be stopped: resume it should this process die."""
        self.pipe.write(b"%d\n" % pid)
        self.pipe.flush()

    def done(self) -> None:
        """Nothing to resume: the resumer exits (and is waited for)."""
        with contextlib.suppress(OSError):
            self.pipe.write(b"done\n")
            self.pipe.flush()
        with contextlib.suppress(OSError):
            self.pipe.close()
        self.proc.wait()


@attrs.define
class Paused:
    """Processes :func:`pause` stopped, in the order it stopped them."""

    stopped: list[int] = attrs.field(factory=list)
    #: Processes found already stopped; left stopped by :meth:`resume`.
    kept: list[int] = attrs.field(factory=list)
    _resumer: Resumer | None = attrs.field(default=None, alias="resumer")

    def resume(self) -> None:
        """``SIGCONT`` every process this pause stopped, children before parents."""
        for pid in reversed(self.stopped):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGCONT)
        self.stopped.clear()
        if self._resumer is not None:
            self._resumer.done()
            self._resumer = None


def _wait_stopped(pids: Iterable[int], deadline: float) -> None:
    pending = list(pids)
    delay = 0.00005
    while pending:
        pending = [p for p in pending if not _is_still(p)]
        if not pending:
            return
        if time.monotonic() > deadline:
            raise PauseTimeoutError(f"process {pending[0]} did not stop (in state D?)")
        time.sleep(delay)  # signal delivery takes a scheduling round: microseconds
        delay = min(delay * 2, 0.002)


def _is_still(pid: int) -> bool:
    states = _states(pid)
    return states is None or all(s in _STILL for s in states)


def pause(roots: Iterable[int], *, timeout: float = 10.0) -> Paused:
    """Stop ``roots`` and every process descending from them, parents first.

    Returns once all of them are stopped; on failure (a process that does
    not stop within ``timeout`` seconds) everything stopped so far is
    resumed and :class:`PauseTimeoutError` raised. Pids that are gone are
    skipped. Blocking: call it in a thread.
    """
    paused = Paused(resumer=Resumer())
    deadline = time.monotonic() + timeout
    seen: set[int] = set()
    me = os.getpid()
    try:
        level = [p for p in dict.fromkeys(roots) if p != me]
        while True:
            while level:
                sent = []
                for pid in level:
                    if pid in seen:
                        continue
                    seen.add(pid)
                    states = _states(pid)
                    if states is None:
                        continue
                    if states and states[0] in b"Tt":
                        paused.kept.append(pid)  # someone else's stop: theirs to end
                        continue
                    assert paused._resumer is not None
                    paused._resumer.tell(pid)  # told first: it may die right after the stop
                    try:
                        os.kill(pid, signal.SIGSTOP)
                    except ProcessLookupError:
                        continue
                    paused.stopped.append(pid)
                    sent.append(pid)
                _wait_stopped(sent, deadline)
                # Every process of this level is stopped: its children are all there.
                level = [c for p in level for c in _children(p) if c not in seen]
            # A process that exited meanwhile had its children moved to the
            # namespace's init (or a subreaper): walk once more until nothing is new.
            level = [c for p in list(seen) for c in _children(p) if c not in seen]
            if not level:
                return paused
    except BaseException:
        paused.resume()
        raise
