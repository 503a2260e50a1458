"""TrainingRecord: one rollout as a trainer consumes it, and building records.

A rollout's messages are split into the *prompt* (every message before the
first assistant message) and the *completion* (the rest). Token ids are used
when the harness recorded them in ``raw`` (``prompt_token_ids``,
``completion_token_ids``, optionally a per-token ``completion_mask`` and the
sampled tokens' ``completion_logprobs``); otherwise the token fields are None
and masks apply per sequence only.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import attrs

from agentkit._calls import TokenSource
from agentkit._errors import ValidationError
from agentkit._tokens import int_list, numbers
from agentkit.rundir import PREFIX_STATUS, RolloutRecord, branch_point_id
from agentkit.training._left_out import LeftOut
from agentkit.training._sequences import RolloutTokens

if TYPE_CHECKING:
    from agentkit.env import RolloutGroup

__all__ = [
    "PrefixSequences",
    "TrainingRecord",
    "from_groups",
    "from_rollouts",
    "prefix_tokens_of",
    "raw_sequences",
    "records_of",
    "stop_reason_of",
    "with_sequences",
]


def _token_field(raw: Mapping[str, Any], name: str, where: str) -> list[int] | None:
    """``raw[name]`` as token ids (or mask values): None when absent, refused naming the
    field when it is not a list of integers (agentkit._tokens.int_list, the one check)."""
    value = raw.get(name)
    if value is None:
        return None
    ids = int_list(value)
    if ids is None:
        raise ValidationError(
            f"{where}.{name}", "expected a list of integers (token ids or mask values)"
        )
    return ids


def _logprobs_field(raw: Mapping[str, Any], name: str, where: str) -> list[float] | None:
    """``raw[name]`` as logprobs (floats): None when absent, refused naming the field
    when it is not a list of numbers."""
    value = raw.get(name)
    if value is None:
        return None
    logprobs = numbers(value)
    if logprobs is None:
        raise ValidationError(f"{where}.{name}", "expected a list of numbers (logprobs)")
    return logprobs


@attrs.frozen(kw_only=True)
class TrainingRecord:
    """One rollout ready for a policy-gradient trainer.

    ``loss_mask`` is the sequence-level weight (0.0 when the response was
    filtered out as overlong); ``completion_mask`` is the per-token mask when
    token ids exist (1 for the model's tokens, 0 for tokens it did not
    write, such as tool output), and ``completion_logprobs`` the sampling
    logprob of each completion token (0.0 where the model did not sample).
    ``advantage`` is None for a rollout that has no reward.

    A rollout whose model calls were recorded (``calls/<rollout_id>.jsonl``)
    gives one record per training sequence (see :mod:`agentkit.training`'s
    "Sequences"): ``sequence`` numbers them from 0, ``calls`` lists the
    merged calls' indices and ``sequence_start`` says why the sequence
    starts. ``token_source`` is ``server`` (ids the model server returned),
    ``tokenizer`` (a fallback the user asked for) or ``none``;
    ``token_issues`` lists the rollout's calls whose tokens are missing, each
    ``{"call": index, "reason": ...}`` (``call`` is None for a harness's
    per-rollout note), so a rollout never loses its tokens silently.
    """

    rollout_id: str
    task_id: str
    example_id: str
    rollout_index: int
    group: int
    status: str
    prompt: list[dict[str, Any]] = attrs.field(factory=list)
    completion: list[dict[str, Any]] = attrs.field(factory=list)
    reward: float | None = None
    rewards: dict[str, float] = attrs.field(factory=dict)
    advantage: float | None = None
    stop_reason: str | None = None
    overlong: bool = False
    loss_mask: float = 1.0
    truncated: bool = False
    prompt_token_ids: list[int] | None = None
    completion_token_ids: list[int] | None = None
    completion_mask: list[int] | None = None
    completion_logprobs: list[float] | None = None
    passed: bool | None = None
    sequence: int = 0
    calls: list[int] | None = None
    sequence_start: str | None = None
    token_source: TokenSource = "none"
    token_issues: list[dict[str, Any]] = attrs.field(factory=list)
    #: Branching runs (docs/branching.md): the rollout id of the shared prefix this
    #: rollout continues (its parent, not exported itself), the step it was forked at,
    #: how many of its leading messages (prompt then completion) are that prefix, and
    #: how many leading ``completion_token_ids`` are the prefix's (None without token ids).
    prefix_id: str | None = None
    branch_step: int | None = None
    prefix_messages: int | None = None
    prefix_tokens: int | None = None

    @property
    def branch_point(self) -> str | None:
        """``<prefix_id>@<branch_step>``: the GRPO group key of a branching run's leaf
        (``group_by="branch_point"``), None for a rollout that was not forked."""
        if self.prefix_id is None or self.branch_step is None:
            return None
        return branch_point_id(self.prefix_id, self.branch_step)

    @property
    def has_tokens(self) -> bool:
        """True when both prompt and completion token ids are known."""
        return self.prompt_token_ids is not None and self.completion_token_ids is not None

    @property
    def sequence_length(self) -> int | None:
        """Prompt plus completion tokens, or None without token ids."""
        if self.prompt_token_ids is None or self.completion_token_ids is None:
            return None
        return len(self.prompt_token_ids) + len(self.completion_token_ids)

    def evolve(self, **changes: Any) -> TrainingRecord:
        """A copy with some fields changed."""
        return attrs.evolve(self, **changes)

    def without_tokens(self, issues: list[dict[str, Any]]) -> TrainingRecord:
        """A copy with no token ids, mask, logprobs or calls (``token_source`` ``none``),
        ``issues`` saying why (its ``token_issues``)."""
        return attrs.evolve(
            self,
            prompt_token_ids=None,
            completion_token_ids=None,
            completion_mask=None,
            completion_logprobs=None,
            calls=[],
            token_source="none",
            token_issues=issues,
        )

    def to_json(self) -> dict[str, Any]:
        """The record as one JSON object (the JSONL export line)."""
        return attrs.asdict(self, recurse=False) | {
            "prompt": list(self.prompt),
            "completion": list(self.completion),
            "rewards": dict(self.rewards),
            "token_issues": [dict(i) for i in self.token_issues],
        }


def split_messages(
    messages: Sequence[Mapping[str, Any]],
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(prompt, completion): the messages before the first assistant message, and the rest."""
    for i, message in enumerate(messages):
        if message.get("role") == "assistant":
            return [dict(m) for m in messages[:i]], [dict(m) for m in messages[i:]]
    return [dict(m) for m in messages], []


def stop_reason_of(raw: Mapping[str, Any], messages: Sequence[Mapping[str, Any]]) -> str | None:
    """Why the last model response stopped (``stop``, ``length``, ``tool_calls``...).

    Read from ``raw["stop_reason"]``, else the last of ``raw["finish_reasons"]``
    (the chat harness), else ``raw["finish_reason"]``, else a ``finish_reason``
    on the last assistant message. None when nothing recorded it.
    """
    value = raw.get("stop_reason")
    if isinstance(value, str):
        return value
    reasons = raw.get("finish_reasons")
    if isinstance(reasons, list):
        for reason in reversed(reasons):
            if isinstance(reason, str):
                return reason
    value = raw.get("finish_reason")
    if isinstance(value, str):
        return value
    for message in reversed(messages):
        if message.get("role") == "assistant":
            found = message.get("finish_reason")
            return found if isinstance(found, str) else None
    return None


#: The token ids of a shared prefix's training sequences: (prompt ids, completion ids).
PrefixSequences = Sequence[tuple[Sequence[int], Sequence[int]]]


def prefix_tokens_of(record: TrainingRecord, prefix: PrefixSequences) -> int | None:
    """How many leading ``completion_token_ids`` of ``record`` are its shared prefix's.

    The record's sequence continues one of the prefix's sequences when it has
    the same prompt ids and its completion starts with that sequence's: the
    answer is that sequence's completion length. None without token ids, or
    when the record continues none of them (a sequence that starts after the
    branch point).
    """
    prompt, completion = record.prompt_token_ids, record.completion_token_ids
    if prompt is None or completion is None:
        return None
    for prefix_prompt, prefix_completion in prefix:
        n = len(prefix_completion)
        if prompt == list(prefix_prompt) and completion[:n] == list(prefix_completion):
            return n
    return None


def raw_sequences(rollout: RolloutRecord) -> list[tuple[list[int], list[int]]]:
    """The one sequence a rollout's ``raw`` token ids make (none when it has none)."""
    raw = rollout.raw or {}
    prompt, completion = raw.get("prompt_token_ids"), raw.get("completion_token_ids")
    if not isinstance(prompt, list) or not isinstance(completion, list):
        return []
    return [(prompt, completion)]


def _prefix_fields(
    rollout: RolloutRecord, parent: RolloutRecord | None, record: TrainingRecord
) -> dict[str, Any]:
    """The prefix fields of a leaf forked from ``parent`` (the prefix's record)."""
    if rollout.parent_rollout_id is None:
        return {}
    fields: dict[str, Any] = {
        "prefix_id": rollout.parent_rollout_id,
        "branch_step": rollout.branch_step,
    }
    if parent is None:  # the prefix's line is not among those read: no lengths
        return fields
    fields["prefix_messages"] = len(parent.messages)
    fields["prefix_tokens"] = prefix_tokens_of(record, raw_sequences(parent))
    return fields


def _record_of(rollout: RolloutRecord) -> TrainingRecord:
    prompt, completion = split_messages(rollout.messages)
    raw = rollout.raw or {}
    where = f"rollout {rollout.rollout_id!r} raw"
    prompt_ids = _token_field(raw, "prompt_token_ids", where)
    completion_ids = _token_field(raw, "completion_token_ids", where)
    mask = _token_field(raw, "completion_mask", where)
    logprobs = _logprobs_field(raw, "completion_logprobs", where)
    if completion_ids is not None:
        if mask is None:
            mask = [1] * len(completion_ids)
        for name, values in (("completion_mask", mask), ("completion_logprobs", logprobs)):
            if values is not None and len(values) != len(completion_ids):
                raise ValidationError(
                    f"{where}.{name}",
                    f"has {len(values)} values for {len(completion_ids)} completion tokens",
                )
    else:
        mask = logprobs = None
    note = raw.get("token_ids_note")
    issues = [{"call": None, "reason": note}] if isinstance(note, str) else []
    return TrainingRecord(
        rollout_id=rollout.rollout_id,
        task_id=rollout.task_id,
        example_id=rollout.example_id,
        rollout_index=rollout.rollout_index,
        group=rollout.group,
        status=rollout.status,
        prompt=prompt,
        completion=completion,
        reward=rollout.reward,
        rewards=dict(rollout.rewards),
        advantage=rollout.advantage,
        stop_reason=stop_reason_of(raw, rollout.messages),
        prompt_token_ids=prompt_ids,
        completion_token_ids=completion_ids,
        completion_mask=mask,
        completion_logprobs=logprobs,
        passed=rollout.passed,
        token_source="server" if completion_ids is not None else "none",
        token_issues=issues,
    )


def with_sequences(record: TrainingRecord, tokens: RolloutTokens) -> list[TrainingRecord]:
    """``record`` (one rollout) as one record per training sequence of its calls.

    Token fields come from the sequences; every record lists the rollout's
    calls without token ids in ``token_issues``. A rollout whose calls have no
    ids at all stays one record without token ids (its issues say why); one
    that made no model calls is returned as it is.
    """
    if tokens.calls == 0:
        return [record]
    issues = [g.to_json() for g in tokens.gaps]
    if not tokens.sequences:
        return [record.without_tokens(issues)]
    return [
        record.evolve(
            sequence=i,
            calls=list(seq.calls),
            sequence_start=seq.start,
            prompt_token_ids=seq.prompt_token_ids,
            completion_token_ids=seq.completion_token_ids,
            completion_mask=seq.completion_mask,
            completion_logprobs=seq.completion_logprobs,
            stop_reason=seq.stop_reason or record.stop_reason,
            token_source=seq.token_source,
            token_issues=issues,
        )
        for i, seq in enumerate(tokens.sequences)
    ]


def from_rollouts(rollouts: Iterable[RolloutRecord]) -> list[TrainingRecord]:
    """Training records for finished rollouts (advantages as stored; see
    :func:`~agentkit.training.prepare`).

    Rollouts that could not run (``infra_error``: the model server was down, the
    sandbox did not start) are left out: they say nothing about the policy. So
    are a branching run's shared prefixes (status ``"branched"``): each leaf's
    record holds its prefix and its continuation, with ``prefix_id``,
    ``prefix_messages`` and ``prefix_tokens`` saying where the shared part
    ends (docs/branching.md).
    """
    return records_of(rollouts)


def records_of(
    rollouts: Iterable[RolloutRecord],
    *,
    left_out: list[LeftOut] | None = None,
    source: str = "rollouts.jsonl",
) -> list[TrainingRecord]:
    """:func:`from_rollouts`; with ``left_out``, a rollout whose token fields in ``raw``
    are malformed is left out and said there (``source`` names the file its line is in)
    instead of raising."""
    stored = list(rollouts)
    by_id = {r.rollout_id: r for r in stored}
    out = []
    for rollout in stored:
        if rollout.infra_error or rollout.status == PREFIX_STATUS:
            continue
        try:
            record = _record_of(rollout)
        except ValidationError as exc:
            if left_out is None:
                raise
            left_out.append(LeftOut(rollout.rollout_id, f"{source}: {exc}"))
            continue
        parent = by_id.get(rollout.parent_rollout_id or "")
        fields = _prefix_fields(rollout, parent, record)
        out.append(record.evolve(**fields) if fields else record)
    return out


def from_groups(groups: Iterable[RolloutGroup]) -> list[TrainingRecord]:
    """Training records for the groups ``await env.generate(...)`` returns.

    Rollouts that could not run are left out, as in :func:`from_rollouts`.
    """
    return from_rollouts(r for g in groups for r in g.rollouts)
