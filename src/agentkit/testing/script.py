"""The scripted model's JSON script: rules, replies and injected failures (see docs/testing.md).

Defined in :mod:`agentkit._scripted.script`.
"""

from __future__ import annotations

from agentkit._scripted.script import (
    FAILURES,
    Api,
    Match,
    Reply,
    RequestView,
    Rule,
    Script,
    ToolCallSpec,
    UsageSpec,
    load_script,
    message_text,
)

__all__ = [
    "FAILURES",
    "Api",
    "Match",
    "Reply",
    "RequestView",
    "Rule",
    "Script",
    "ToolCallSpec",
    "UsageSpec",
    "load_script",
    "message_text",
]
