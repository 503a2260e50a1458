"""agentkit-mini-swe-agent: the ``mini-swe-agent`` harness, which drives the real mini CLI.

>>> from agentkit_mini_swe_agent import MiniSweAgent
>>> harness = MiniSweAgent(model="my-model")
>>> result = await harness.run(task, RunContext(base_url=url))  # doctest: +SKIP
"""

from __future__ import annotations

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
