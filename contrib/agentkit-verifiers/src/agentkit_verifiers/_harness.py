"""``AgentkitHarness``: any agentkit harness as a verifiers 0.4 harness.

It runs in verifiers' rollout process (verifiers allows an in-process loop
"as long as every model call goes through endpoint + secret"): the agentkit
harness gets a :class:`~agentkit.RunContext` whose base URL is the
interception endpoint verifiers hands over and whose API key is the
rollout's interception secret, so verifiers records every model call in its
trace. Tasks that need a sandbox get agentkit's own (bubblewrap by default).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import verifiers.v1 as vf
from pydantic import Field

from agentkit import RunContext, Task, registry
from agentkit_verifiers import _bridge

__all__ = ["AgentkitHarness", "AgentkitHarnessConfig"]


class AgentkitHarnessConfig(vf.HarnessConfig):
    """``--env.agent.harness.agentkit NAME`` picks the agentkit harness."""

    agentkit: str = "chat"
    """The registered agentkit harness name (``chat``, ``oracle``, ``opencode``...)."""
    options: dict[str, Any] = Field(default_factory=dict)
    """Options for the agentkit harness (as ``-H key=value`` on ``agentkit run``)."""
    sandbox: str = "local"
    """The agentkit sandbox for tasks that need one."""
    sandbox_options: dict[str, Any] = Field(default_factory=dict)
    """Options for that sandbox."""


def _foreign_task(data: vf.TaskData) -> Task:
    """An agentkit task for a verifiers task that did not come from an agentkit taskset."""
    item = data.id or data.name or str(data.idx)
    prompt = data.prompt
    if isinstance(prompt, list):
        prompt_in: Any = [m.model_dump(mode="json", exclude_none=True) for m in prompt]
    else:
        prompt_in = prompt or ""
    return Task(task_id=Task.format_task_id("verifiers", item.replace(" ", "_")), input=prompt_in)


class AgentkitHarness(vf.Harness[AgentkitHarnessConfig]):
    """Runs the configured agentkit harness on each task, in-process."""

    APPENDS_SYSTEM_PROMPT = True
    NEEDS_CONTAINER = False
    EXECUTES_CODE = False  # the agent executes in agentkit's sandbox, not verifiers' runtime

    def _harness(self) -> Any:
        return registry.resolve_harness(self.config.agentkit, **self.config.options)

    async def launch(
        self,
        ctx: vf.ModelContext,
        trace: vf.Trace,
        runtime: Any,
        endpoint: str,
        secret: str,
        mcp_urls: dict[str, str],
        data: vf.TaskData,
        **_: Any,
    ) -> vf.ProgramResult:
        harness = self._harness()
        spec = getattr(data, "agentkit_spec", None)
        if spec is not None:
            taskset = _bridge.load_taskset(spec, getattr(data, "agentkit_options", {}))
            task: Task = taskset.get_task(data.agentkit_task_id)
            hints = taskset.execution_hints(task)
        else:
            taskset, task, hints = None, _foreign_task(data), None
        rubric = _bridge.compiled_rubric(taskset, harness) if taskset is not None else None
        context = RunContext(
            model=ctx.model, base_url=endpoint, api_key=secret, rollout_id=trace.id
        )
        sandbox: Any = None
        workdir: Path | None = None
        if hints is not None or getattr(harness, "requires_sandbox", False):
            sandbox, workdir = await _bridge.open_sandbox(
                self.config.sandbox, self.config.sandbox_options, hints, trace.id, endpoint
            )
            context = context.evolve(sandbox=sandbox)
        try:
            result = await harness.run(task, context)
        except BaseException:
            await _bridge.close_sandbox(sandbox, workdir)
            raise
        rollout = _bridge.LiveRollout(
            task=task,
            result=result,
            context=context,
            rubric=rubric,
            sandbox=sandbox,
            workdir=workdir,
        )
        if rubric is not None:
            _bridge.live[trace.id] = rollout
        else:
            await rollout.close()
        trace.info["agentkit"] = {
            "harness": self.config.agentkit,
            "task_id": task.task_id,
            "status": result.status,
            "error": result.error,
            "error_kind": result.error_kind,
        }
        if result.ok:
            return vf.ProgramResult(exit_code=0, stdout=result.output or "", stderr="")
        return vf.ProgramResult(
            exit_code=1,
            stdout=result.output or "",
            stderr=f"agentkit harness {self.config.agentkit!r} {result.status}: {result.error}",
        )

    async def cleanup(self, trace: vf.Trace, runtime: Any) -> None:
        """Close this rollout's agentkit sandbox, after verifiers has scored it."""
        rollout = _bridge.live.pop(trace.id, None)
        if rollout is not None:
            await rollout.close()
