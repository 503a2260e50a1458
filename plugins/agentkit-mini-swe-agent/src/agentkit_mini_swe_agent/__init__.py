"""agentkit-mini-swe-agent: the ``mini-swe-agent`` harness, which drives the real mini CLI.

>>> from agentkit_mini_swe_agent import MiniSweAgent
>>> harness = MiniSweAgent(model="my-model")
>>> result = await harness.run(task, RunContext(base_url=url))  # doctest: +SKIP
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agentkit_mini_swe_agent._install import (
        BINARY_ENV,
        LOCAL_INSTALL,
        MINI_SWE_AGENT_VERSION,
        TESTED_WITH,
        MiniSweAgentInstall,
        find_mini_swe_agent,
        install_mini_swe_agent,
    )
    from agentkit_mini_swe_agent._runtime import (
        CACHE_ENV,
        MiniSweAgentRuntime,
        cache_root,
        portable_runtime,
    )
    from agentkit_mini_swe_agent.harness import MiniSweAgent, prompt_of

#: Public names and the private module each one lives in, imported on first use.
_LAZY: dict[str, str] = {
    "BINARY_ENV": "agentkit_mini_swe_agent._install",
    "LOCAL_INSTALL": "agentkit_mini_swe_agent._install",
    "MINI_SWE_AGENT_VERSION": "agentkit_mini_swe_agent._install",
    "TESTED_WITH": "agentkit_mini_swe_agent._install",
    "MiniSweAgentInstall": "agentkit_mini_swe_agent._install",
    "find_mini_swe_agent": "agentkit_mini_swe_agent._install",
    "install_mini_swe_agent": "agentkit_mini_swe_agent._install",
    "CACHE_ENV": "agentkit_mini_swe_agent._runtime",
    "MiniSweAgentRuntime": "agentkit_mini_swe_agent._runtime",
    "cache_root": "agentkit_mini_swe_agent._runtime",
    "portable_runtime": "agentkit_mini_swe_agent._runtime",
    "MiniSweAgent": "agentkit_mini_swe_agent.harness",
    "prompt_of": "agentkit_mini_swe_agent.harness",
}

__all__ = [
    "BINARY_ENV",
    "CACHE_ENV",
    "LOCAL_INSTALL",
    "MINI_SWE_AGENT_VERSION",
    "TESTED_WITH",
    "MiniSweAgent",
    "MiniSweAgentInstall",
    "MiniSweAgentRuntime",
    "cache_root",
    "find_mini_swe_agent",
    "install_mini_swe_agent",
    "portable_runtime",
    "prompt_of",
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
