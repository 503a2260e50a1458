"""What the verifiers taskset and harness share: loaded tasksets, compiled
rubrics, and each live rollout's agentkit state.

verifiers runs a rollout's harness (``launch``), then the task's rewards
(``score``), then the harness's ``cleanup``, all in one process and keyed by
one trace. The agentkit harness leaves its result and its sandbox here under
the trace id; the task's reward scores them with the compiled rubric (the
sandbox still open, as Harbor grading needs); ``cleanup`` closes the sandbox.
"""

from __future__ import annotations

import functools
import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

import attrs

from agentkit import ExecutionHints, HarnessResult, RunContext, Task, registry
from agentkit.env import compile_rubric

__all__ = [
    "LiveRollout",
    "close_sandbox",
    "compiled_rubric",
    "live",
    "load_taskset",
    "open_sandbox",
    "score",
]


@functools.lru_cache(maxsize=32)
def _load(spec: str, options_json: str) -> Any:
    return registry.resolve_taskset(spec, **json.loads(options_json))


def load_taskset(spec: str, options: dict[str, Any] | None = None) -> Any:
    """The agentkit taskset for ``spec`` (``harbor:examples/harbor``), loaded once per process."""
    return _load(spec, json.dumps(options or {}, sort_keys=True))


def compiled_rubric(taskset: Any, harness: Any) -> Any:
    """agentkit's compiled rubric for this taskset and harness (None: no agentkit harness)."""
    return compile_rubric(taskset, harness, contributors=registry.resolve_rubric_contributors())


@attrs.define(kw_only=True)
class LiveRollout:
    """One rollout's agentkit side, between the harness run and the cleanup."""

    task: Task
    result: HarnessResult
    context: RunContext
    rubric: Any
    sandbox: Any = None
    workdir: Path | None = None

    async def close(self) -> None:
        """Close the sandbox and remove its files (idempotent)."""
        sandbox, self.sandbox = self.sandbox, None
        workdir, self.workdir = self.workdir, None
        await close_sandbox(sandbox, workdir)


async def open_sandbox(
    name: str, options: dict[str, Any], hints: Any, rollout_id: str, endpoint: str
) -> tuple[Any, Path]:
    """Start one rollout's agentkit sandbox in a fresh temporary directory."""
    factory = registry.resolve_sandbox(name, **options)
    workdir = Path(tempfile.mkdtemp(prefix="agentkit-vf-"))
    try:
        sandbox = factory(
            root=workdir,
            hints=hints or ExecutionHints(),
            rollout_id=rollout_id,
            model_endpoint=endpoint,
        )
        await sandbox.__aenter__()
    except BaseException:
        shutil.rmtree(workdir, ignore_errors=True)
        raise
    return sandbox, workdir


async def close_sandbox(sandbox: Any, workdir: Path | None) -> None:
    """Close a sandbox from :func:`open_sandbox` and remove its directory."""
    try:
        if sandbox is not None:
            await sandbox.__aexit__(None, None, None)
    finally:
        if workdir is not None:
            shutil.rmtree(workdir, ignore_errors=True)


#: Live rollouts by verifiers trace id.
live: dict[str, LiveRollout] = {}


async def score(
    rubric: Any, task: Task, result: HarnessResult, sandbox: Any, context: RunContext
) -> Any:
    """Run the compiled rubric with the arguments agentkit reward functions may declare."""
    return await rubric.score_rollout(task, result, sandbox=sandbox, context=context)
