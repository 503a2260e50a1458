"""One run of an agent's program in a sandbox: what every step of it shares."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

import attrs

from agentkit.programs._drive import time_left
from agentkit.programs._files import executable_in, remove_staged
from agentkit.programs._secrets import scrub_sandbox_dir

if TYPE_CHECKING:
    from agentkit._events import EventRecorder
    from agentkit._sandbox import Sandbox
    from agentkit.programs._binary import ProgramBinary

__all__ = ["ProgramRun"]


@attrs.define(eq=False)
class ProgramRun:
    """One run of an agent's program in ``sandbox``: the run's secrets and the
    redactor that keeps them out of what is recorded, the event recorder, the
    API key, the timeout, and, once :meth:`stage` has run, the executable and
    the clock its timeout counts from. :meth:`ProgramHarness.start_run
    <agentkit.programs.ProgramHarness.start_run>` makes one; a harness's
    ``run_in`` then reads::

        run = self.start_run(sandbox, task, context, on_event)
        ...                                   # configuration, harness.start
        executable = await run.stage(binary)  # the timeout counts from here
        ...                                   # files the program reads
        try:
            proc = await sandbox.start([executable, ...], env=env)
            outcome = await drive(proc, ..., timeout=run.time_left(), recorder=run.recorder)
        finally:
            await run.clean_up()

    - ``home``: the sandbox directory the program keeps its configuration and
      sessions in (the run's secrets are removed from its files afterwards);
    - ``staged_path``: where its executable is copied when the sandbox does
      not show it (removed afterwards); ``staged`` says whether it was.
    """

    sandbox: Sandbox
    recorder: EventRecorder
    #: The run's secrets (:func:`~agentkit.programs.run_secrets`).
    secrets: list[str]
    #: Replaces each of :attr:`secrets` in a text.
    redact: Callable[[str], str]
    #: The key the program sends (``RunContext.resolved_api_key``).
    api_key: str | None
    #: Seconds before the program's process tree is killed (None: no limit).
    timeout: float | None
    home: str
    staged_path: str
    #: The command that runs the program in the sandbox (set by :meth:`stage`).
    executable: str = ""
    #: Whether :meth:`stage` copied the executable to :attr:`staged_path`.
    staged: bool = False
    #: The :func:`time.monotonic` reading :meth:`stage` took.
    started: float | None = None

    async def stage(self, binary: ProgramBinary) -> str:
        """Start the clock of the timeout (the program's set-up counts) and return
        the command that runs ``binary`` in the sandbox: in place where the sandbox
        shows it, else a copy at :attr:`staged_path`
        (:func:`~agentkit.programs.executable_in`)."""
        self.started = time.monotonic()
        self.executable, self.staged = await executable_in(
            self.sandbox, binary, self.staged_path, self.recorder
        )
        return self.executable

    def time_left(self) -> float | None:
        """What is left of :attr:`timeout` since :meth:`stage` (None: no limit)."""
        if self.started is None:
            raise RuntimeError("ProgramRun.time_left before stage")
        return time_left(self.timeout, self.started)

    async def clean_up(self) -> None:
        """After the program, even while the run is being cancelled: delete the copy
        of its executable (when :meth:`stage` made one) and remove the run's secrets
        from the files under :attr:`home`
        (:func:`~agentkit.programs.scrub_sandbox_dir`)."""
        import anyio

        with anyio.CancelScope(shield=True):
            if self.staged:
                await remove_staged(self.sandbox, self.staged_path)
            await scrub_sandbox_dir(self.sandbox, self.home, self.secrets, self.recorder)
