"""mypy checks every caller of the rollout service (run by ``python3 -m nox -s types``).

Not a pytest module: the types session runs ``mypy --strict`` on this
directory. The first calls type-check; each line ending in ``# type:
ignore[...]`` is a mistake mypy must refuse (a misspelled setting, a format or
a stale policy that is no such thing): were the service's signatures loosened
to ``Any``, the ``ignore`` would be unused, an error in strict mode.
"""

from __future__ import annotations

from agentkit import AgentEnv, RunOptions
from agentkit.service import RecordOptions, RolloutService, ServiceGroup


async def callers_mypy_accepts(env: AgentEnv, options: RunOptions) -> None:
    service = RolloutService(
        env,
        options,
        group_size=4,
        max_staleness=2,
        on_stale="rerun",
        restart_on_update=True,
        format="tinker",
        records=RecordOptions(normalize=True, max_seq_len=4096),
    )
    async with service:
        ids: list[int] = service.request(8, task_id="jsonl:a")
        group: ServiceGroup = await service.next_group()
        await service.set_policy(group.version + 1, base_url="http://h:8000/v1", model="lora")
        async for later in service.groups():
            assert later.staleness <= 2 and ids


async def callers_mypy_refuses(env: AgentEnv, options: RunOptions) -> None:
    RolloutService(env, options, group_size=4, max_stalenes=2)  # type: ignore[call-arg]
    RolloutService(env, options, group_size=4, format="parquet")  # type: ignore[arg-type]
    RolloutService(env, options, group_size=4, on_stale="keep")  # type: ignore[arg-type]
    RolloutService(env, options)  # type: ignore[call-arg]
    service = RolloutService(env, options, group_size=4)
    await service.set_policy("v2")  # type: ignore[arg-type]
    await service.set_policy(2, lora="x")  # type: ignore[call-arg]
    service.request(task_ids=["a"])  # type: ignore[call-arg]
