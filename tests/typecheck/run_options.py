"""mypy checks every caller of AgentEnv's run methods (run by ``python3 -m nox -s types``).

Not a pytest module: the types session runs ``mypy --strict`` on this
directory. The first calls type-check. Each line ending in ``# type:
ignore[...]`` is a mistake mypy must refuse: a misspelled option, a value
of the wrong type. Were mypy to accept one (run options typed ``Any``
again), its ``ignore`` would be unused, which strict mode reports as an
error, and the session fails.
"""

from __future__ import annotations

from typing import Any

import attrs

from agentkit import AgentEnv, RunOptions


async def callers_mypy_accepts(env: AgentEnv, options: RunOptions, kw: dict[str, Any]) -> None:
    env.run(rollouts_per_task=2, model="m", out="runs/a", price={"input": 0.1})
    await env.evaluate(options, concurrency=4, task_ids=["jsonl:0"])
    await env.generate(RunOptions(task_ids=("a", "b")), progress=False)
    env.plan(options=options, run_dir="runs/b", check_model_server=False)
    await env.evaluate(**kw)  # a dict of Any is the caller's to check
    attrs.evolve(options, concurrency=2)


async def callers_mypy_refuses(env: AgentEnv, options: RunOptions) -> None:
    env.run(rolouts_per_task=2)  # type: ignore[call-arg]
    await env.evaluate(concurency=4)  # type: ignore[call-arg]
    await env.generate(options, tmeout=5)  # type: ignore[call-arg]
    env.plan(limt=1)  # type: ignore[call-arg]
    env.run(rollouts_per_task="2")  # type: ignore[arg-type]
    await env.evaluate(options, model=3)  # type: ignore[arg-type]
    env.run({"rollouts_per_task": 2})  # type: ignore[arg-type]
    RunOptions(concurency=4)  # type: ignore[call-arg]
    attrs.evolve(options, concurency=2)  # type: ignore[call-arg]
