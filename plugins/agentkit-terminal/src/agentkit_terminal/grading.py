"""The reward at the end of an episode: the taskset's own grading, in the episode's sandbox.

An episode driven by a training loop has no runner to score it, so it scores
itself, the way ``agentkit run`` would score the same rollout: with the
rubric compiled from the task's taskset (its ``default_grading_spec``, for a
Harbor task the verifier running ``tests/test.sh`` in the sandbox and reading
``/logs/verifier/reward.*``), this harness's ``compile_rubric`` and the
installed rubric contributors (:func:`agentkit.env.compile_rubric`). The
reward is the compiled rubric's total; a reward function that fails leaves
no total, and the episode's reward is then 0 with the errors recorded.
"""

from __future__ import annotations

from typing import Any

from agentkit import HarnessResult, RunContext, Sandbox, Task, registry
from agentkit.env import CompiledRubric, compile_rubric
from agentkit.executors import ScoreResult

__all__ = ["RubricGrader"]


class RubricGrader:
    """Scores an episode's final state with the rubric of ``taskset`` and ``harness``."""

    def __init__(self, taskset: Any, harness: Any) -> None:
        self.taskset_id = str(getattr(taskset, "taskset_id", "?"))
        self.rubric: CompiledRubric = compile_rubric(
            taskset, harness, contributors=registry.resolve_rubric_contributors()
        )

    async def grade(
        self, task: Task, result: HarnessResult, sandbox: Sandbox, context: RunContext
    ) -> ScoreResult:
        """Run every reward function with what it declares (the sandbox still open)."""
        return await self.rubric.score_rollout(task, result, sandbox=sandbox, context=context)
