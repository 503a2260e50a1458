"""agentkit-claude-code: the ``claude-code`` harness, which drives the real Claude Code CLI
(``@anthropic-ai/claude-code``).

>>> from agentkit_claude_code import ClaudeCode
>>> harness = ClaudeCode(model="my-model")
>>> result = await harness.run(task, RunContext(base_url=url))  # doctest: +SKIP
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agentkit_claude_code._binary import (
        BINARY_ENV,
        CLAUDE_CODE_VERSION,
        NPM_PACKAGE,
        find_claude,
    )
    from agentkit_claude_code.harness import ClaudeCode

#: Public names and the private module each one lives in, imported on first use.
_LAZY: dict[str, str] = {
    "BINARY_ENV": "agentkit_claude_code._binary",
    "CLAUDE_CODE_VERSION": "agentkit_claude_code._binary",
    "NPM_PACKAGE": "agentkit_claude_code._binary",
    "find_claude": "agentkit_claude_code._binary",
    "ClaudeCode": "agentkit_claude_code.harness",
}

__all__ = ["BINARY_ENV", "CLAUDE_CODE_VERSION", "NPM_PACKAGE", "ClaudeCode", "find_claude"]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
