"""The ``fleet`` taskset provider: Fleet task JSON as an agentkit taskset.

>>> ts = fleet_taskset("examples/fleet/tasks.json", split="train")  # doctest: +SKIP

Spec forms: ``fleet:PATH.json``, ``fleet:DIR``, ``fleet:s3://BUCKET/V/openenv/all_tool_use.json``
or ``fleet:s3://BUCKET`` with ``-T data_version=v0.2 -T modality=tool_use``.
"""

from __future__ import annotations

from typing import Literal

import attrs

from agentkit import ListTaskset, OptionError, TaskProblem
from agentkit_fleet.records import FleetRecord, group_counts, parse_records
from agentkit_fleet.sources import FleetSourceError, load_task_files
from agentkit_fleet.split import SplitConfig, split_records

__all__ = ["FleetTaskset", "LoadedRecords", "fleet_taskset", "load_records"]


class FleetTaskset(ListTaskset):
    """Fleet tasks in memory, with the records they came from."""

    #: Run summaries also aggregate per Fleet environment (``summary["by"]["env_key"]``).
    summary_keys = ("env_key",)

    def __init__(
        self,
        taskset_id: str,
        records: list[FleetRecord],
        *,
        problems: list[TaskProblem] | None = None,
        sources: list[str] | None = None,
    ) -> None:
        super().__init__(
            taskset_id, [r.to_task(taskset_id) for r in records], problems=problems or []
        )
        self.records = records
        self.sources = sources or []


@attrs.frozen
class LoadedRecords:
    """What a source holds: usable records, problems, file names, and raw group sizes."""

    records: list[FleetRecord]
    problems: list[TaskProblem]
    sources: list[str]
    counts: dict[tuple[str, str], int]

    def group_sizes(self, modality: str | None) -> dict[str, int]:
        """Records per environment group of ``modality`` (None: every modality), as the
        split sizes the groups (rejected records included)."""
        sizes: dict[str, int] = {}
        for (mod, env), n in self.counts.items():
            if modality is None or mod == modality:
                sizes[env] = sizes.get(env, 0) + n
        return sizes

    def split(
        self, config: SplitConfig, modality: str | None
    ) -> tuple[list[FleetRecord], list[FleetRecord]]:
        """``(train, eval)`` of the records of ``modality`` (None: all), as Fleet splits them."""
        records = [r for r in self.records if modality is None or r.task_modality == modality]
        return split_records(
            records, config, modality=modality, group_sizes=self.group_sizes(modality)
        )


def load_records(
    argument: str,
    *,
    data_version: str | None = None,
    modality: str | None = None,
) -> LoadedRecords:
    """All records from a source (every file), bad ones as problems, the file names, and
    the raw number of records per ``(modality, environment group)``."""
    files = load_task_files(argument, data_version=data_version, modality=modality)
    records: list[FleetRecord] = []
    problems: list[TaskProblem] = []
    counts: dict[tuple[str, str], int] = {}
    seen: set[str] = set()
    for f in files:
        if f.problem is not None:  # one bad file of several: the others still load
            problems.append(TaskProblem(f.source, f.problem))
            continue
        try:
            recs, probs = parse_records(f.data, f.source)
        except ValueError as exc:
            if len(files) == 1:
                raise FleetSourceError(str(exc)) from None
            problems.append(TaskProblem(f.source, str(exc).removeprefix(f"{f.source}: ")))
            continue
        for key, n in group_counts(f.data, f.source).items():
            counts[key] = counts.get(key, 0) + n
        problems.extend(probs)
        for r in recs:
            if r.task_key in seen:
                problems.append(TaskProblem(f.source, f"duplicate task_key {r.task_key!r}"))
                continue
            seen.add(r.task_key)
            records.append(r)
    return LoadedRecords(records, problems, [f.source for f in files], counts)


def fleet_taskset(
    argument: str,
    split: Literal["train", "eval", "all"] = "all",
    data_version: str | None = None,
    modality: Literal["tool_use", "computer_use", "browser_use"] | None = None,
    eval_ratio: float = 0.10,
    max_eval_per_env: int = 30,
    min_eval_per_env: int = 1,
    held_out_envs: dict[str, list[str]] | None = None,
    env_key: str | None = None,
    taskset_id: str = "fleet",
) -> FleetTaskset:
    """Load Fleet tasks; ``split`` keeps one side of the deterministic train/eval split.

    ``modality`` picks ``all_<modality>.json`` in an S3 or versioned directory
    source and keeps only records of that modality; the split is then made
    among them, as Fleet's dataset preparation makes it for one modality
    (without ``modality``: among all records, as its ``--modality all``).
    ``env_key`` keeps one environment. ``held_out_envs`` maps a modality
    (``all`` for all-modalities mode) to env keys that go wholly to eval
    (default ``{"computer_use": ["instacart"]}``).
    """
    if split not in ("train", "eval", "all"):
        raise OptionError(f"fleet taskset: split must be train, eval or all, got {split!r}")
    loaded = load_records(argument, data_version=data_version, modality=modality)
    records = [r for r in loaded.records if modality is None or r.task_modality == modality]
    if split != "all":
        config = SplitConfig(
            eval_ratio=eval_ratio,
            max_eval_per_env=max_eval_per_env,
            min_eval_per_env=min_eval_per_env,
            held_out_envs=held_out_envs
            if held_out_envs is not None
            else {"computer_use": ["instacart"]},
        )
        train, evals = loaded.split(config, modality)
        records = train if split == "train" else evals
    if env_key is not None:
        records = [r for r in records if r.env_key == env_key]
    return FleetTaskset(taskset_id, records, problems=loaded.problems, sources=loaded.sources)
