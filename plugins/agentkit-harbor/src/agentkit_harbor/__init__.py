"""Harbor tasksets, the ``oracle`` and ``nop`` harnesses, and Harbor grading for agentkit.

Installed as its own distribution (``agentkit-harbor``) and found through the
``agentkit`` entry point; the core never imports it by name.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agentkit_harbor._config import TaskConfig, parse_task_config
    from agentkit_harbor._envvars import resolve_env
    from agentkit_harbor._errors import (
        AGENT_BROKE_KINDS,
        AddTestsDirError,
        HarborGradingError,
        HarborTaskError,
        MainRewardError,
        RegistryError,
        RewardFileEmptyError,
        RewardFileNotFoundError,
        RewardFileNotRegularError,
        RewardFileTooLargeError,
        RewardOutOfRangeError,
        SandboxDiedError,
        StepSetupError,
        VerifierDirReplacedError,
        VerifierOutputParseError,
        VerifierTimeoutError,
    )
    from agentkit_harbor._grading import (
        DEFAULT_REWARD_RANGE,
        check_reward_range,
        harbor_reward,
        harbor_rubric,
    )
    from agentkit_harbor._harnesses import NopHarness, OracleHarness, StepwiseHarness
    from agentkit_harbor._isolation import (
        DEFAULT_ISOLATION,
        ISOLATION_LEVELS,
        VerifierPlace,
        place_verifier,
    )
    from agentkit_harbor._registry import load_registry, resolve_dataset, resolve_version
    from agentkit_harbor._rewards import MAIN_REWARD_AGGREGATES, main_reward, parse_reward_files
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
        STEP_VERIFIER_TIMEOUT_SEC,
        VerifierOutcome,
        aggregate_steps,
        min_reward_failure,
        verify,
    )

#: Public names and the private module each one lives in, imported on first use.
_LAZY: dict[str, str] = {
    "TaskConfig": "agentkit_harbor._config",
    "parse_task_config": "agentkit_harbor._config",
    "resolve_env": "agentkit_harbor._envvars",
    "AGENT_BROKE_KINDS": "agentkit_harbor._errors",
    "AddTestsDirError": "agentkit_harbor._errors",
    "HarborGradingError": "agentkit_harbor._errors",
    "HarborTaskError": "agentkit_harbor._errors",
    "MainRewardError": "agentkit_harbor._errors",
    "RegistryError": "agentkit_harbor._errors",
    "RewardFileEmptyError": "agentkit_harbor._errors",
    "RewardFileNotFoundError": "agentkit_harbor._errors",
    "RewardFileNotRegularError": "agentkit_harbor._errors",
    "RewardFileTooLargeError": "agentkit_harbor._errors",
    "RewardOutOfRangeError": "agentkit_harbor._errors",
    "SandboxDiedError": "agentkit_harbor._errors",
    "VerifierDirReplacedError": "agentkit_harbor._errors",
    "StepSetupError": "agentkit_harbor._errors",
    "VerifierOutputParseError": "agentkit_harbor._errors",
    "VerifierTimeoutError": "agentkit_harbor._errors",
    "DEFAULT_REWARD_RANGE": "agentkit_harbor._grading",
    "check_reward_range": "agentkit_harbor._grading",
    "harbor_reward": "agentkit_harbor._grading",
    "DEFAULT_ISOLATION": "agentkit_harbor._isolation",
    "ISOLATION_LEVELS": "agentkit_harbor._isolation",
    "VerifierPlace": "agentkit_harbor._isolation",
    "place_verifier": "agentkit_harbor._isolation",
    "harbor_rubric": "agentkit_harbor._grading",
    "NopHarness": "agentkit_harbor._harnesses",
    "OracleHarness": "agentkit_harbor._harnesses",
    "StepwiseHarness": "agentkit_harbor._harnesses",
    "load_registry": "agentkit_harbor._registry",
    "resolve_dataset": "agentkit_harbor._registry",
    "resolve_version": "agentkit_harbor._registry",
    "ARTIFACT_FILE_MAX_BYTES": "agentkit_harbor._sandbox_io",
    "ARTIFACTS_TOTAL_MAX_BYTES": "agentkit_harbor._sandbox_io",
    "REWARD_FILE_MAX_BYTES": "agentkit_harbor._sandbox_io",
    "SPARSE_SLACK_BYTES": "agentkit_harbor._sandbox_io",
    "VERIFIER_FILE_MAX_BYTES": "agentkit_harbor._sandbox_io",
    "VERIFIER_TOTAL_MAX_BYTES": "agentkit_harbor._sandbox_io",
    "HarborStepSpec": "agentkit_harbor._spec",
    "HarborTaskSpec": "agentkit_harbor._spec",
    "load_task_dir": "agentkit_harbor._spec",
    "AgentStepOutcome": "agentkit_harbor._steps",
    "StepRun": "agentkit_harbor._steps",
    "spec_for_task": "agentkit_harbor._steps",
    "HarborTaskset": "agentkit_harbor._taskset",
    "HarborTrial": "agentkit_harbor._trial",
    "run_harbor_task": "agentkit_harbor._trial",
    "MAIN_REWARD_AGGREGATES": "agentkit_harbor._rewards",
    "STEP_VERIFIER_TIMEOUT_SEC": "agentkit_harbor._verify",
    "VerifierOutcome": "agentkit_harbor._verify",
    "aggregate_steps": "agentkit_harbor._verify",
    "main_reward": "agentkit_harbor._rewards",
    "min_reward_failure": "agentkit_harbor._verify",
    "parse_reward_files": "agentkit_harbor._rewards",
    "verify": "agentkit_harbor._verify",
}

__version__ = "0.1.0"

__all__ = [
    "AGENT_BROKE_KINDS",
    "ARTIFACTS_TOTAL_MAX_BYTES",
    "ARTIFACT_FILE_MAX_BYTES",
    "DEFAULT_ISOLATION",
    "DEFAULT_REWARD_RANGE",
    "ISOLATION_LEVELS",
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
    "RewardFileNotRegularError",
    "RewardFileTooLargeError",
    "RewardOutOfRangeError",
    "SandboxDiedError",
    "StepRun",
    "StepSetupError",
    "StepwiseHarness",
    "TaskConfig",
    "VerifierDirReplacedError",
    "VerifierOutcome",
    "VerifierOutputParseError",
    "VerifierPlace",
    "VerifierTimeoutError",
    "__version__",
    "aggregate_steps",
    "check_reward_range",
    "harbor_reward",
    "harbor_rubric",
    "load_registry",
    "load_task_dir",
    "main_reward",
    "min_reward_failure",
    "parse_reward_files",
    "parse_task_config",
    "place_verifier",
    "resolve_dataset",
    "resolve_env",
    "resolve_version",
    "run_harbor_task",
    "spec_for_task",
    "verify",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
