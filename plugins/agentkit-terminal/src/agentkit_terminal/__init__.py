"""The ``terminal`` harness: a step-capable tool-call loop with a shell, for sandboxed tasks.

Installed as its own distribution (``agentkit-terminal``) and found through the
``agentkit`` entry point; the core never imports it by name. The names below
are imported on first use, so loading the plugin costs nothing.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agentkit_terminal.episode import DoneReason, TerminalEpisode
    from agentkit_terminal.grading import RubricGrader
    from agentkit_terminal.harness import TerminalHarness
    from agentkit_terminal.limits import TerminalLimits
    from agentkit_terminal.output import cap_output
    from agentkit_terminal.parsing import CallAttempt, ToolCall, parse_message, parse_text
    from agentkit_terminal.prompt import TOOLS, system_prompt

#: Public names and the module each one lives in, imported on first use.
_LAZY: dict[str, str] = {
    "DoneReason": "agentkit_terminal.episode",
    "TerminalEpisode": "agentkit_terminal.episode",
    "RubricGrader": "agentkit_terminal.grading",
    "TerminalHarness": "agentkit_terminal.harness",
    "TerminalLimits": "agentkit_terminal.limits",
    "cap_output": "agentkit_terminal.output",
    "CallAttempt": "agentkit_terminal.parsing",
    "ToolCall": "agentkit_terminal.parsing",
    "parse_message": "agentkit_terminal.parsing",
    "parse_text": "agentkit_terminal.parsing",
    "TOOLS": "agentkit_terminal.prompt",
    "system_prompt": "agentkit_terminal.prompt",
}

__version__ = "0.1.0"

__all__ = [
    "TOOLS",
    "CallAttempt",
    "DoneReason",
    "RubricGrader",
    "TerminalEpisode",
    "TerminalHarness",
    "TerminalLimits",
    "ToolCall",
    "__version__",
    "cap_output",
    "parse_message",
    "parse_text",
    "system_prompt",
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
