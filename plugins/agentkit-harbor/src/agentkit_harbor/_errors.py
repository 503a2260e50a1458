"""Errors of the Harbor plugin, with Harbor's own distinctions for grading."""

from __future__ import annotations

from agentkit import AgentkitError

__all__ = [
    "AddTestsDirError",
    "HarborGradingError",
    "HarborTaskError",
    "MainRewardError",
    "RegistryError",
    "RewardFileEmptyError",
    "RewardFileNotFoundError",
    "RewardFileTooLargeError",
    "StepSetupError",
    "VerifierOutputParseError",
    "VerifierTimeoutError",
]


class HarborTaskError(AgentkitError):
    """A Harbor task or taskset could not be loaded or prepared."""


class RegistryError(HarborTaskError):
    """A registry.json could not be read, or a dataset could not be resolved or fetched."""


class HarborGradingError(AgentkitError):
    """Harbor grading failed: the runner records it as a scoring error, never a 0.

    ``kind`` names the failure as Harbor distinguishes it; ``stdout`` keeps
    what ``tests/test.sh`` printed, when it ran.
    """

    kind = "grading_error"

    def __init__(self, message: str, *, stdout: str = "", step: str | None = None) -> None:
        self.stdout = stdout
        self.step = step
        where = f"step {step!r}: " if step else ""
        super().__init__(f"{where}{message}")


class RewardFileNotFoundError(HarborGradingError):
    """Neither /logs/verifier/reward.json nor reward.txt exists after test.sh."""

    kind = "reward_file_not_found"


class RewardFileEmptyError(HarborGradingError):
    """The reward file exists but is empty."""

    kind = "reward_file_empty"


class RewardFileTooLargeError(HarborGradingError):
    """The reward file is over its size cap (``REWARD_FILE_MAX_BYTES``); it is not read further."""

    kind = "reward_file_too_large"


class VerifierOutputParseError(HarborGradingError):
    """The reward file is not a number / a flat JSON object of finite numbers."""

    kind = "reward_parse_error"


class MainRewardError(HarborGradingError):
    """The total reward cannot be derived: ``main_reward = "key:NAME"`` names a missing key."""

    kind = "no_main_reward"


class VerifierTimeoutError(HarborGradingError):
    """test.sh ran past the verifier timeout."""

    kind = "verifier_timeout"


class AddTestsDirError(HarborGradingError):
    """tests/ could not be placed at /tests in the sandbox."""

    kind = "tests_upload_failed"


class StepSetupError(HarborGradingError):
    """A step's workdir/setup.sh or healthcheck failed, so the step never ran."""

    kind = "step_setup_failed"
