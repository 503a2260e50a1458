"""agentkit-claude-code: the ``claude-code`` harness, which drives the real Claude Code CLI
(``@anthropic-ai/claude-code``).

>>> from agentkit_claude_code import ClaudeCode
>>> harness = ClaudeCode(model="my-model")
>>> result = await harness.run(task, RunContext(base_url=url))  # doctest: +SKIP
"""

from __future__ import annotations

from agentkit_claude_code._binary import BINARY_ENV, CLAUDE_CODE_VERSION, NPM_PACKAGE, find_claude
from agentkit_claude_code.harness import ClaudeCode

__all__ = ["BINARY_ENV", "CLAUDE_CODE_VERSION", "NPM_PACKAGE", "ClaudeCode", "find_claude"]
