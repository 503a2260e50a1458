"""Errors of the Harbor plugin, with Harbor's own distinctions for grading."""

from __future__ import annotations

from collections.abc import Mapping

from agentkit import AgentkitError, GradedAsFailure

__all__ = [
    "AGENT_BROKE_KINDS",
    "AddTestsDirError",
    "HarborGradingError",
    "HarborTaskError",
    "MainRewardError",
    "RegistryError",
    "RewardFileEmptyError",
    "RewardFileNotFoundError",
    "RewardFileNotRegularError",
    "RewardFileTooLargeError",
    "RewardOutOfRangeError",
    "SandboxDiedError",
    "StepSetupError",
    "VerifierDirReplacedError",
    "VerifierOutputParseError",
    "VerifierTimeoutError",
]


class HarborTaskError(AgentkitError):
    """A Harbor task or taskset could not be loaded or prepared."""


class RegistryError(HarborTaskError):
    """A registry.json could not be read, or a dataset could not be resolved or fetched."""


class HarborGradingError(AgentkitError):
    """Harbor grading failed.

    ``kind`` names the failure as Harbor distinguishes it; ``stdout`` keeps
    what ``tests/test.sh`` printed, when it ran. Failures of the verifier's
    output (``agent_broke`` true: no reward file, an unreadable, unparsable
    or out-of-range one, a verifier timeout, a destroyed verifier folder, a
    dead sandbox) come from the state the agent left, and the rubric scores
    them as a failure (reward 0, see :data:`AGENT_BROKE_KINDS`); the others
    (a task's unset ``${VAR}``, tests that could not be placed) are scoring
    errors, never a 0.
    """

    kind = "grading_error"
    #: True when the state the agent left made this failure: scored as a failure
    #: (the class is then also an :class:`agentkit.GradedAsFailure`).
    agent_broke = False
    #: The score of a failure the agent caused (a multi-step task's: its steps' metrics).
    value: float | Mapping[str, float] = 0.0

    def __init__(self, message: str, *, stdout: str = "", step: str | None = None) -> None:
        self.stdout = stdout
        self.step = step
        where = f"step {step!r}: " if step else ""
        AgentkitError.__init__(self, f"{where}{message}")


class RewardFileNotFoundError(HarborGradingError, GradedAsFailure):
    """Neither /logs/verifier/reward.json nor reward.txt exists after test.sh."""

    kind = "reward_file_not_found"
    agent_broke = True


class RewardFileEmptyError(HarborGradingError, GradedAsFailure):
    """The reward file exists but is empty."""

    kind = "reward_file_empty"
    agent_broke = True


class RewardFileTooLargeError(HarborGradingError, GradedAsFailure):
    """The reward file is over its size cap (``REWARD_FILE_MAX_BYTES``); it is not read further."""

    kind = "reward_file_too_large"
    agent_broke = True


class VerifierOutputParseError(HarborGradingError, GradedAsFailure):
    """The reward file is not a number / a flat JSON object of finite numbers."""

    kind = "reward_parse_error"
    agent_broke = True


class MainRewardError(HarborGradingError, GradedAsFailure):
    """The total reward cannot be derived: ``main_reward = "key:NAME"`` names a missing key."""

    kind = "no_main_reward"
    agent_broke = True


class VerifierTimeoutError(HarborGradingError, GradedAsFailure):
    """test.sh ran past the verifier timeout."""

    kind = "verifier_timeout"
    agent_broke = True


class RewardFileNotRegularError(HarborGradingError, GradedAsFailure):
    """The reward file is not a regular file: a FIFO, a symbolic link, a device."""

    kind = "reward_file_not_regular"
    agent_broke = True


class RewardOutOfRangeError(HarborGradingError, GradedAsFailure):
    """The total reward is outside the taskset's ``reward_range`` (``[0, 1]`` by default)."""

    kind = "reward_out_of_range"
    agent_broke = True


class VerifierDirReplacedError(HarborGradingError, GradedAsFailure):
    """``/logs/verifier`` is no longer a directory after test.sh ran (a link, a file):
    its files are not read through it."""

    kind = "verifier_dir_replaced"
    agent_broke = True


class SandboxDiedError(HarborGradingError, GradedAsFailure):
    """The agent's sandbox no longer runs at grading: every process in it was killed."""

    kind = "sandbox_died"
    agent_broke = True


class AddTestsDirError(HarborGradingError):
    """tests/ could not be placed at /tests in the sandbox."""

    kind = "tests_upload_failed"


class StepSetupError(HarborGradingError):
    """A step's workdir/setup.sh or healthcheck failed, so the step never ran."""

    kind = "step_setup_failed"


#: The kinds of grading failure the state the agent left causes: scored as a failure.
AGENT_BROKE_KINDS: frozenset[str] = frozenset(
    cls.kind for cls in HarborGradingError.__subclasses__() if cls.agent_broke
)
