"""docs/terminal.md shows what the policy is told and sees, verbatim."""

from __future__ import annotations

import json
import re

from agentkit_terminal.prompt import (
    NO_CALL_TEXT,
    NO_CALL_TOOLS,
    SUBMITTED_TEXT,
    TOOLS,
    system_prompt,
)
from terminal_helpers import ROOT

DOC = (ROOT / "docs" / "terminal.md").read_text()


def blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)\n```", DOC, re.DOTALL)


def test_both_system_prompts_are_shown_verbatim_with_the_defaults() -> None:
    settings = {
        "workdir": "/app",
        "max_turns": 50,
        "command_timeout": 60,
        "max_command_timeout": 600,
        "output_limit": 16384,
    }
    shown = blocks("text")
    assert system_prompt("text", **settings) in shown
    assert system_prompt("tools", **settings) in shown


def test_the_tools_and_the_fixed_texts_are_shown_as_they_are() -> None:
    [tools] = [json.loads(b) for b in blocks("json") if '"submit"' in b]
    assert tools == TOOLS
    for text in (NO_CALL_TEXT, NO_CALL_TOOLS, SUBMITTED_TEXT):
        assert text in DOC, text
