"""The deterministic, stratified train/eval split of Fleet tasks.

The algorithm is that of Fleet's dataset preparation for SkyRL
(``prepare_dataset.py``), written down so that it gives the same train and
eval sets on every machine:

1. Only the tasks of the chosen modality take part (all of them in
   all-modalities mode); the caller filters them first.
2. The tasks are grouped by environment: ``env_key`` (or ``env_id``), or
   ``unknown`` without one. Groups are visited in sorted order.
3. A group held out for the chosen modality (``held_out_envs[modality]``; by
   default ``instacart`` for ``computer_use``; the key ``all`` applies in
   all-modalities mode, where nothing is held out by default) goes wholly to
   eval.
4. For a group of ``n`` tasks the target is ``min(int(n * eval_ratio),
   max_eval_per_env)``. ``n`` counts every record of the group in the
   source, also those that are then left out (no prompt, a duplicate key):
   pass their numbers as ``group_sizes``.
5. When the target is below ``min_eval_per_env`` (or 0) the group goes to
   train.
6. Otherwise a task goes to eval when the first 8 bytes of ``md5(task_key)``,
   read as a big-endian unsigned integer and divided by ``2**64``, are below
   ``target / n``; else to train.

The hash depends on the task key only, so a task's side does not depend on
the order of the input or on the machine.
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Literal

import attrs

from agentkit import OptionError
from agentkit_fleet.records import FleetRecord

__all__ = [
    "ALL_MODALITIES",
    "SplitConfig",
    "assign_splits",
    "env_group",
    "split_records",
    "task_hash_fraction",
]

SplitName = Literal["train", "eval"]

#: The ``held_out_envs`` key that applies when every modality takes part.
ALL_MODALITIES = "all"


def _default_held_out() -> dict[str, list[str]]:
    return {"computer_use": ["instacart"]}


@attrs.frozen(kw_only=True)
class SplitConfig:
    """The split's parameters (the defaults are Fleet's).

    ``held_out_envs`` maps the modality the split is made for (``all`` in
    all-modalities mode) to environments that go wholly to eval.
    Out-of-range values raise :class:`agentkit.OptionError` (a ``ValueError``
    would reach users as a traceback).
    """

    eval_ratio: float = 0.10
    max_eval_per_env: int = 30
    min_eval_per_env: int = 1
    held_out_envs: Mapping[str, list[str]] = attrs.field(factory=_default_held_out)

    def __attrs_post_init__(self) -> None:
        if not 0.0 <= self.eval_ratio <= 1.0:
            raise OptionError(f"eval_ratio must be between 0 and 1, got {self.eval_ratio!r}")
        if self.max_eval_per_env < 0 or self.min_eval_per_env < 0:
            raise OptionError("max_eval_per_env and min_eval_per_env must not be negative")


def task_hash_fraction(task_key: str) -> float:
    """The first 8 bytes of ``md5(task_key)`` (big-endian) divided by ``2**64``: in [0, 1)."""
    digest = hashlib.md5(task_key.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def env_group(env_key: str | None) -> str:
    """The environment group of a task: its ``env_key``, or ``unknown``."""
    return env_key or "unknown"


def _groups(records: Iterable[FleetRecord]) -> dict[str, list[FleetRecord]]:
    groups: dict[str, list[FleetRecord]] = defaultdict(list)
    for record in records:
        groups[env_group(record.env_key)].append(record)
    return {env: groups[env] for env in sorted(groups)}


def assign_splits(
    records: Iterable[FleetRecord],
    config: SplitConfig | None = None,
    *,
    modality: str | None = None,
    group_sizes: Mapping[str, int] | None = None,
) -> dict[str, SplitName]:
    """Map every task key to ``"train"`` or ``"eval"``.

    ``records`` are the tasks of ``modality`` (None: every modality), already
    filtered. ``group_sizes`` gives the number of records per environment
    group in the source when it is larger than the number of usable records
    (see the module docstring, step 4).
    """
    cfg = config or SplitConfig()
    held = set(cfg.held_out_envs.get(modality or ALL_MODALITIES, ()))
    out: dict[str, SplitName] = {}
    for env, group in _groups(records).items():
        if env in held:
            for record in group:
                out[record.task_key] = "eval"
            continue
        n = max(len(group), (group_sizes or {}).get(env, 0))
        target = min(int(n * cfg.eval_ratio), cfg.max_eval_per_env)
        if target < cfg.min_eval_per_env or target <= 0:
            for record in group:
                out[record.task_key] = "train"
            continue
        threshold = target / n
        for record in group:
            side: SplitName = "eval" if task_hash_fraction(record.task_key) < threshold else "train"
            out[record.task_key] = side
    return out


def split_records(
    records: Iterable[FleetRecord],
    config: SplitConfig | None = None,
    *,
    modality: str | None = None,
    group_sizes: Mapping[str, int] | None = None,
) -> tuple[list[FleetRecord], list[FleetRecord]]:
    """``(train, eval)``, ordered as Fleet's dataset preparation writes them:
    environment groups in sorted order, input order within a group."""
    items = list(records)
    sides = assign_splits(items, config, modality=modality, group_sizes=group_sizes)
    ordered = [r for group in _groups(items).values() for r in group]
    train = [r for r in ordered if sides[r.task_key] == "train"]
    evals = [r for r in ordered if sides[r.task_key] == "eval"]
    return train, evals
