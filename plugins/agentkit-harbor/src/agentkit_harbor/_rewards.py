"""Reward files, as Harbor reads them: ``reward.json`` else ``reward.txt``, and the total.

What ``tests/test.sh`` wrote in ``/logs/verifier`` is parsed here with
Harbor 0.24's order and distinctions (no file, an empty one, not a number,
a non-finite one, not a regular file, over its cap: each its own
:class:`~agentkit_harbor.HarborGradingError`), from bytes already read
within the cap (by :mod:`agentkit_harbor._hostread` from the host, or by the
sandbox's own commands for a sandbox kind that cannot be read from outside).
:func:`main_reward` derives the rollout's total from several keys.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path

from agentkit import Sandbox
from agentkit_harbor._errors import (
    MainRewardError,
    RewardFileEmptyError,
    RewardFileNotFoundError,
    RewardFileNotRegularError,
    RewardFileTooLargeError,
    VerifierOutputParseError,
)
from agentkit_harbor._sandbox_io import (
    REWARD_FILE_MAX_BYTES,
    CappedRead,
    TreeCopy,
    read_small_files,
    tail,
)

__all__ = [
    "MAIN_REWARD_AGGREGATES",
    "REWARD_FILES",
    "VERIFIER_DIR",
    "RewardsFound",
    "check_main_reward",
    "main_reward",
    "parse_reward_files",
    "parse_reward_json",
    "parse_reward_txt",
    "read_reward_files",
    "rewards_from_copy",
    "rewards_from_reads",
]

#: Where test.sh writes its rewards (and anything else it keeps).
VERIFIER_DIR = "/logs/verifier"
#: The reward files, in the order Harbor reads them (reward.txt only without reward.json).
REWARD_FILES = ("reward.json", "reward.txt")
#: ``(rewards, which file, notes)``.
RewardsFound = tuple[dict[str, float], str, list[str]]

#: How the total reward is derived from several keys (the taskset's ``main_reward`` option).
MAIN_REWARD_AGGREGATES: tuple[str, ...] = ("mean", "min", "max", "sum")


def check_main_reward(choice: str) -> str:
    """``choice`` when it is a valid ``main_reward`` option, else a :class:`ValueError`.

    Valid: ``mean``, ``min``, ``max``, ``sum``, or ``key:NAME``.
    """
    if choice in MAIN_REWARD_AGGREGATES:
        return choice
    if choice.startswith("key:") and choice[4:].strip():
        return choice
    raise ValueError(
        f"main_reward must be one of {', '.join(MAIN_REWARD_AGGREGATES)} or 'key:NAME', "
        f"got {choice!r}"
    )


def main_reward(rewards: Mapping[str, float], strategy: str = "mean") -> float:
    """The rollout's total reward from a verifier's rewards.

    ``strategy`` ``key:NAME`` takes the key ``NAME`` (a :class:`MainRewardError`
    when it is missing). Otherwise: the ``reward`` key when there is one
    (Harbor's primary reward), else the only key, else the ``mean``
    (``min``, ``max``, ``sum``) of all keys; no key at all is 0, as
    Harbor's metrics count it.
    """
    if strategy.startswith("key:"):
        name = strategy[4:]
        if name not in rewards:
            raise MainRewardError(
                f"main_reward = {strategy!r}, but the rewards have no key {name!r} "
                f"(keys: {', '.join(sorted(rewards)) or 'none'})"
            )
        return rewards[name]
    if "reward" in rewards:
        return rewards["reward"]
    values = list(rewards.values())
    if not values:
        return 0.0
    if len(values) == 1 or strategy == "mean":
        return sum(values) / len(values)
    if strategy == "min":
        return min(values)
    if strategy == "max":
        return max(values)
    if strategy == "sum":
        return float(sum(values))
    raise ValueError(check_main_reward(strategy))  # unreachable for a checked strategy


def _read_bounded(path: Path, label: str) -> bytes:
    with open(path, "rb") as f:
        data = f.read(REWARD_FILE_MAX_BYTES + 1)
    if len(data) > REWARD_FILE_MAX_BYTES:
        raise RewardFileTooLargeError(
            f"{label} is larger than the {REWARD_FILE_MAX_BYTES} byte cap; it was not read further"
        )
    return data


def parse_reward_txt(data: bytes, label: str = f"{VERIFIER_DIR}/reward.txt") -> dict[str, float]:
    """``reward.txt``'s one number, as Harbor reads it: ``{"reward": value}``."""
    if not data:
        raise RewardFileEmptyError(f"reward file is empty: {label}")
    try:
        value = float(data.decode("utf-8"))
    except (ValueError, UnicodeDecodeError):
        shown = tail(data.decode("utf-8", errors="replace").strip(), 80)
        raise VerifierOutputParseError(f"{label} is not a number: {shown!r}") from None
    if not math.isfinite(value):
        raise VerifierOutputParseError(f"{label} holds a non-finite reward {value!r}")
    return {"reward": value}


def parse_reward_json(
    data: bytes, label: str = f"{VERIFIER_DIR}/reward.json"
) -> tuple[dict[str, float], list[str]]:
    """``reward.json`` as Harbor reads it: ``(rewards, notes)``.

    A JSON object whose every value is a finite number (``true``/``false``
    count 1/0, as in Harbor). Anything else (invalid JSON, not an object, a
    string, ``null`` or nested value, ``NaN``, an overflow) is a
    :class:`VerifierOutputParseError`.
    """
    if not data:
        raise RewardFileEmptyError(f"reward file is empty: {label}")
    try:
        parsed = json.loads(data.decode("utf-8"))
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise VerifierOutputParseError(f"{label} is not valid JSON: {exc}") from None
    if not isinstance(parsed, dict):
        raise VerifierOutputParseError(
            f"{label} must be a JSON object of name -> number, got {type(parsed).__name__}"
        )
    rewards: dict[str, float] = {}
    notes: list[str] = []
    for key, value in parsed.items():
        if not isinstance(value, (int, float)):
            shown = tail(json.dumps(value), 80)
            raise VerifierOutputParseError(f"{label}: {key!r} is not a number: {shown}")
        try:
            f = float(value)
        except OverflowError:
            f = math.inf
        if not math.isfinite(f):
            raise VerifierOutputParseError(f"{label}: {key!r} is a non-finite number {value!r}")
        rewards[str(key)] = f
    if not rewards:
        notes.append("reward.json is an empty object: the total reward is 0, as Harbor counts it")
    return rewards, notes


def parse_reward_files(
    json_path: Path | None, txt_path: Path | None
) -> tuple[dict[str, float], str, list[str]]:
    """Rewards from host copies of reward.json or else reward.txt, with Harbor's distinctions.

    Returns ``(rewards, which file, notes)``. When reward.json exists,
    reward.txt is not read (Harbor's order). Each file is read up to
    ``REWARD_FILE_MAX_BYTES``; a larger one is a :class:`RewardFileTooLargeError`.
    """
    if json_path is not None and json_path.exists():
        label = f"{VERIFIER_DIR}/reward.json"
        rewards, notes = parse_reward_json(_read_bounded(json_path, label), label)
        return rewards, "reward.json", notes
    if txt_path is not None and txt_path.exists():
        label = f"{VERIFIER_DIR}/reward.txt"
        return parse_reward_txt(_read_bounded(txt_path, label), label), "reward.txt", []
    raise RewardFileNotFoundError(
        f"no reward file: test.sh wrote neither {VERIFIER_DIR}/reward.json nor "
        f"{VERIFIER_DIR}/reward.txt"
    )


async def read_reward_files(sandbox: Sandbox) -> tuple[dict[str, float], str, list[str]]:
    """:func:`parse_reward_files` on the sandbox's own files, read within the cap.

    At most ``REWARD_FILE_MAX_BYTES + 1`` bytes of each file are read, so a
    sparse 2 GiB reward.json costs no more memory than that.
    """
    names = REWARD_FILES
    labels = [f"{VERIFIER_DIR}/{name}" for name in names]
    try:
        answers = await read_small_files(sandbox, labels, REWARD_FILE_MAX_BYTES)
    except OSError as exc:
        raise VerifierOutputParseError(f"the reward files could not be read: {exc}") from None
    # the sandbox's own commands say only "special" of a file that is not a regular one
    said = [("a special file" if a == "special" else a) for a in answers]
    return rewards_from_reads(dict(zip(names, said, strict=True)))


def rewards_from_reads(answers: Mapping[str, CappedRead | str | None]) -> RewardsFound:
    """The rewards from what was read of reward.json and reward.txt (Harbor's order and
    distinctions): ``(rewards, which file, notes)``. A string answer says what the file
    is instead of a regular one (:class:`RewardFileNotRegularError`)."""
    for name in REWARD_FILES:
        got = answers.get(name)
        if got is None:
            continue  # reward.txt is read only when reward.json does not exist
        label = f"{VERIFIER_DIR}/{name}"
        if isinstance(got, str):
            raise RewardFileNotRegularError(f"{label} is {got}, not a regular file; not read")
        if got.over_cap:
            raise RewardFileTooLargeError(
                f"{label} is larger than the {REWARD_FILE_MAX_BYTES} byte cap; "
                "it was not read further"
            )
        if name == "reward.json":
            rewards, notes = parse_reward_json(got.data, label)
            return rewards, name, notes
        return parse_reward_txt(got.data, label), name, []
    raise RewardFileNotFoundError(
        f"no reward file: test.sh wrote neither {VERIFIER_DIR}/reward.json nor "
        f"{VERIFIER_DIR}/reward.txt"
    )


def rewards_from_copy(
    logs_dir: Path, copied: TreeCopy | None
) -> tuple[dict[str, float], str, list[str]] | None:
    """The rewards from the copy of /logs/verifier just made, when it settles them.

    It does when reward.json (else reward.txt) was copied whole: the host copy
    is then read within the cap. Otherwise (none listed, or one cut, refused
    or not a regular file) None: :func:`read_reward_files` asks the sandbox.
    """
    if copied is None:
        return None
    for name in REWARD_FILES:
        status = copied.entries.get(name)
        if status is None:
            continue
        if status != "ok":
            return None
        path = logs_dir / name
        return parse_reward_files(path if name == "reward.json" else None, path)
    return None
