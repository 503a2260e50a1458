"""Harbor tasksets, the ``oracle`` and ``nop`` harnesses, and Harbor grading for agentkit.

Installed as its own distribution (``agentkit-harbor``) and found through the
``agentkit`` entry point; the core never imports it by name.
"""

from __future__ import annotations

from agentkit_harbor._config import TaskConfig, parse_task_config
from agentkit_harbor._envvars import resolve_env
from agentkit_harbor._errors import (
    AddTestsDirError,
    HarborGradingError,
    HarborTaskError,
    MainRewardError,
    RegistryError,
    RewardFileEmptyError,
    RewardFileNotFoundError,
    RewardFileTooLargeError,
    StepSetupError,
    VerifierOutputParseError,
    VerifierTimeoutError,
)
from agentkit_harbor._grading import harbor_reward, harbor_rubric
from agentkit_harbor._harnesses import NopHarness, OracleHarness, StepwiseHarness
from agentkit_harbor._registry import load_registry, resolve_dataset, resolve_version
from agentkit_harbor._sandbox_io import (
    ARTIFACT_FILE_MAX_BYTES,
    ARTIFACTS_TOTAL_MAX_BYTES,
    REWARD_FILE_MAX_BYTES,
    SPARSE_SLACK_BYTES,
    VERIFIER_FILE_MAX_BYTES,
    VERIFIER_TOTAL_MAX_BYTES,
)
from agentkit_harbor._spec import HarborStepSpec, HarborTaskSpec, load_task_dir
from agentkit_harbor._steps import AgentStepOutcome, StepRun, spec_for_task
from agentkit_harbor._taskset import HarborTaskset
from agentkit_harbor._trial import HarborTrial, run_harbor_task
from agentkit_harbor._verify import (
    MAIN_REWARD_AGGREGATES,
    STEP_VERIFIER_TIMEOUT_SEC,
    VerifierOutcome,
    aggregate_steps,
    main_reward,
    min_reward_failure,
    parse_reward_files,
    verify,
)

__version__ = "0.1.0"

__all__ = [
    "ARTIFACTS_TOTAL_MAX_BYTES",
    "ARTIFACT_FILE_MAX_BYTES",
    "MAIN_REWARD_AGGREGATES",
    "REWARD_FILE_MAX_BYTES",
    "SPARSE_SLACK_BYTES",
    "STEP_VERIFIER_TIMEOUT_SEC",
    "VERIFIER_FILE_MAX_BYTES",
    "VERIFIER_TOTAL_MAX_BYTES",
    "AddTestsDirError",
    "AgentStepOutcome",
    "HarborGradingError",
    "HarborStepSpec",
    "HarborTaskError",
    "HarborTaskSpec",
    "HarborTaskset",
    "HarborTrial",
    "MainRewardError",
    "NopHarness",
    "OracleHarness",
    "RegistryError",
    "RewardFileEmptyError",
    "RewardFileNotFoundError",
    "RewardFileTooLargeError",
    "StepRun",
    "StepSetupError",
    "StepwiseHarness",
    "TaskConfig",
    "VerifierOutcome",
    "VerifierOutputParseError",
    "VerifierTimeoutError",
    "__version__",
    "aggregate_steps",
    "harbor_reward",
    "harbor_rubric",
    "load_registry",
    "load_task_dir",
    "main_reward",
    "min_reward_failure",
    "parse_reward_files",
    "parse_task_config",
    "resolve_dataset",
    "resolve_env",
    "resolve_version",
    "run_harbor_task",
    "spec_for_task",
    "verify",
]
