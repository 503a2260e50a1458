"""The members every harness that runs an agent's own program shares."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any, ClassVar

from agentkit._context import RunContext
from agentkit._errors import HarnessError
from agentkit._events import EventRecorder
from agentkit._harness import run_model
from agentkit._result import HarnessResult
from agentkit._sandbox import ExecutionHints
from agentkit._task import Task
from agentkit.programs._run import ProgramRun
from agentkit.programs._secrets import redactor, run_secrets
from agentkit.programs._telemetry import telemetry_rubric
from agentkit.sandbox import open_sandbox

if TYPE_CHECKING:
    from agentkit._events import EventCallback
    from agentkit._rubric import Rubric
    from agentkit._sandbox import Sandbox
    from agentkit.programs._binary import ProgramBinary

__all__ = ["ProgramHarness"]


class ProgramHarness:
    """Base of a harness that runs an agent's own CLI in the rollout's sandbox.

    A subclass sets :attr:`name`, :attr:`home_dir` and :attr:`staged_binary`,
    keeps ``model``, ``timeout`` and ``binary`` as attributes (its options), and
    implements :meth:`find_program` and :meth:`run_in`; this class gives it the
    optional Harness members (``supports``, ``compile_rubric``,
    ``sandbox_ro_binds``, ``preflight``), the model check, the timeout rule, a
    local sandbox when the run gives none, and the start of ``run_in``
    (:meth:`start_run`: a :class:`~agentkit.programs.ProgramRun` with the run's
    secrets, recorder and timeout, which stages the program and cleans up after
    it).
    """

    name: ClassVar[str] = ""
    #: The runner gives this harness a sandbox even when the task asks for none.
    requires_sandbox: ClassVar[bool] = True
    #: It calls the run's model: the preflight checks the endpoint and the API key.
    uses_model: ClassVar[bool] = True
    #: The sandbox directory the program keeps its configuration and sessions in
    #: (the run's secrets are removed from its files after the program).
    home_dir: ClassVar[str] = ""
    #: Where the program's executable is copied when the sandbox does not show it.
    staged_binary: ClassVar[str] = ""

    model: str | None
    timeout: float | None
    binary: str | None

    @classmethod
    def check_options(
        cls, *, timeout: float | None, max_retries: int | None = None, **objects: object
    ) -> None:
        """One HarnessError naming the option: ``timeout`` > 0, ``max_retries`` an
        integer >= 0, and each of ``objects`` (configuration) a mapping or None."""
        for option, value in objects.items():
            if value is not None and not isinstance(value, dict):
                raise HarnessError(
                    f"{cls.name} option {option}: expected an object, got {type(value).__name__}"
                )
        if max_retries is not None and (isinstance(max_retries, bool) or max_retries < 0):
            raise HarnessError(
                f"{cls.name} option max_retries: expected an integer >= 0, got {max_retries!r}"
            )
        if timeout is not None and not timeout > 0:
            raise HarnessError(f"{cls.name} option timeout: expected seconds > 0, got {timeout!r}")

    def __repr__(self) -> str:
        return f"{type(self).__name__}(model={self.model!r})"

    def find_program(self) -> ProgramBinary:
        """The executable this harness runs (raises HarnessError, saying how to install
        it, when missing)."""
        raise NotImplementedError

    async def run_in(
        self,
        sandbox: Sandbox,
        task: Task,
        context: RunContext,
        model: str,
        binary: ProgramBinary,
        on_event: EventCallback | None,
    ) -> HarnessResult:
        """Run the program on ``task`` in ``sandbox`` (the subclass's work)."""
        raise NotImplementedError

    # -- optional Harness members -------------------------------------------

    def supports(self, task: Task) -> bool:
        """Tasks with a payload (its text is what the program is asked to do)."""
        return task.input is not None

    def compile_rubric(self, taskset: Any) -> Rubric:
        """Telemetry (weight 0): ``turns``, ``tool_calls``, ``tool_errors``, ``tokens``."""
        return telemetry_rubric(self.name)

    @property
    def sandbox_ro_binds(self) -> list[str]:
        """Host directories a sandbox must show read-only (at the same path) to run
        the program (none when it is missing: the preflight says so)."""
        try:
            return list(self.find_program().mount_dirs)
        except HarnessError:
            return []

    async def preflight(self, context: RunContext) -> None:
        """Before a run: the run gives what the program needs (:meth:`check_context`,
        once a model is known: the preflight reports a missing one itself) and the
        program is installed (a HarnessError says how to)."""
        model = self.model or context.model
        if model:
            self.check_context(model, context)
        await asyncio.to_thread(self.find_program)

    # -- running ------------------------------------------------------------

    def check_context(self, model: str, context: RunContext) -> None:
        """What else the run must give before the program starts (nothing here)."""

    async def run(
        self,
        task: Task,
        context: RunContext | None = None,
        on_event: EventCallback | None = None,
    ) -> HarnessResult:
        """Run the program on ``task``; events reach ``on_event`` while it runs."""
        task.require_payload()
        context = context or RunContext()
        model = run_model(self, context)
        self.check_context(model, context)
        binary = await asyncio.to_thread(self.find_program)
        if context.sandbox is not None:
            return await self.run_in(context.sandbox, task, context, model, binary, on_event)
        hints = ExecutionHints(ro_binds=list(binary.mount_dirs))
        async with open_sandbox(
            "local",
            hints=hints,
            model_endpoint=context.base_url,
            rollout_id=context.rollout_id or self.name,
        ) as sandbox:
            return await self.run_in(sandbox, task, context, model, binary, on_event)

    def timeout_for(self, context: RunContext) -> float | None:
        """Seconds before the program's process tree is killed: the smaller of the
        ``timeout`` option and ``RunContext.limits.timeout_sec`` (None: neither)."""
        limits = [t for t in (self.timeout, context.limits.timeout_sec) if t is not None]
        return min(limits) if limits else None

    def start_run(
        self,
        sandbox: Sandbox,
        task: Task,
        context: RunContext,
        on_event: EventCallback | None,
    ) -> ProgramRun:
        """The start of :meth:`run_in`: the run of the program on ``task`` in
        ``sandbox``, with the run's secrets (:func:`~agentkit.programs.run_secrets`)
        and their redactor, a recorder sending events to ``on_event``, the API
        key, the timeout (:meth:`timeout_for`), :attr:`home_dir` and
        :attr:`staged_binary`."""
        secrets = run_secrets(context)
        return ProgramRun(
            sandbox=sandbox,
            recorder=EventRecorder(task.task_id, context.rollout_id, on_event),
            secrets=secrets,
            redact=redactor(secrets),
            api_key=context.resolved_api_key,
            timeout=self.timeout_for(context),
            home=self.home_dir,
            staged_path=self.staged_binary,
        )
