"""What the rollout service hands a trainer: a finished group, and the service's report."""

from __future__ import annotations

from typing import Any

import attrs

from agentkit.env import RolloutRecord
from agentkit.service._formats import TrainerFormat
from agentkit.training import TrainingRecord

__all__ = ["ServiceGroup", "ServiceReport"]


@attrs.frozen(kw_only=True)
class ServiceGroup:
    """One finished group (a task × N rollouts), as the trainer gets it.

    ``group_id``: the service's number for it (unique, never handed over twice).
    ``data``: the group's records in the trainer's ``format`` (SkyRL's
    ``GeneratorOutput``, Tinker ``Datum``s, verifiers trace records, JSONL export
    lines). ``records``: the same as :class:`~agentkit.training.TrainingRecord`
    (exact token ids, logprobs, masks, rewards, advantages); ``rollouts``: the
    rollouts' records, each with its model calls (``model_calls``, each naming
    its ``policy_version``). ``oldest_version``, ``newest_version``: the policy
    versions of its oldest and newest call (a rollout that made no call counts
    with the version current when it started); ``version``: the current policy
    version when it was handed over; ``rerun_of``: the group it runs again (it
    was too stale), or None.
    """

    group_id: int
    task_id: str
    format: TrainerFormat
    data: Any
    records: tuple[TrainingRecord, ...]
    rollouts: tuple[RolloutRecord, ...]
    oldest_version: int
    newest_version: int
    version: int
    rerun_of: int | None = None

    @property
    def staleness(self) -> int:
        """How many versions its oldest call is behind the policy it was handed over at."""
        return self.version - self.oldest_version

    @property
    def rewards(self) -> list[float | None]:
        """Its rollouts' rewards, in rollout order."""
        return [r.reward for r in self.rollouts]


@attrs.frozen(kw_only=True)
class ServiceReport:
    """What the service did so far (:meth:`RolloutService.report`).

    ``requested``: groups asked for. ``delivered``: groups handed to the trainer.
    ``dropped_stale``: groups past the staleness bound, dropped. ``rerun_stale``:
    groups past the bound, run again. ``restarted_rollouts``: rollouts restarted by a
    policy update (``restart_on_update``). ``doomed_groups``: groups the bound ruled out
    before they finished (a call or a finished rollout already too far behind a newer
    policy), stopped early; each is counted in ``dropped_stale`` or ``rerun_stale`` too.
    ``stopped_rollouts``: their rollouts stopped while running or before they started.
    ``rollouts_finished``: rollouts recorded.
    ``in_flight``: rollouts running now. ``waiting``: groups finished and not yet
    handed over (or checked). ``pending``: groups requested and not yet handed over
    or dropped. ``policy_version``: the current policy's. ``overhead_s``: the
    service's own time (bookkeeping, staleness checks, training records and
    formats), outside the rollouts. ``run_dir``: where the rollouts are written.
    ``error``: what stopped the service (:class:`~agentkit.service.ServiceFailed`'s
    message), or None.
    """

    requested: int
    delivered: int
    dropped_stale: int
    rerun_stale: int
    restarted_rollouts: int
    doomed_groups: int
    stopped_rollouts: int
    rollouts_finished: int
    in_flight: int
    waiting: int
    pending: int
    policy_version: int
    overhead_s: float
    run_dir: str | None
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        """The report as JSON."""
        return attrs.asdict(self)
