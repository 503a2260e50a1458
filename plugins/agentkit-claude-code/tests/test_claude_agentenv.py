"""Claude Code by name through AgentEnv and ``agentkit run`` on a Harbor example task,
graded by its own verifier (local sandbox): agentkit's suite for program harnesses."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agentkit_claude_code import CLAUDE_CODE_VERSION

from agentkit.testing.program_suite import program_harness_suite

EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "harbor"

HELLO_WORLD: dict[str, Any] = {
    "rules": [
        {
            "match": {"after_tool": False, "last_user_contains": "hello.txt"},
            "reply": {
                "content": "I will create the file.",
                "tool_calls": [
                    {
                        "name": "Bash",
                        "arguments": {
                            "command": "printf 'Hello, world!\\n' > /app/hello.txt",
                            "description": "Write the greeting",
                        },
                    }
                ],
                "usage": {
                    "prompt_tokens": 900,
                    "completion_tokens": 25,
                    "cached_tokens": 100,
                    "cache_creation_tokens": 50,
                },
            },
        },
        {
            "match": {"after_tool": True},
            "reply": {
                "content": "Created /app/hello.txt.",
                "usage": {"prompt_tokens": 950, "completion_tokens": 8},
            },
        },
    ]
}

#: Its calls are Anthropic Messages, which carry no token ids (every call says so);
#: translated, served from chat completions with ids and logprobs.
TestClaudeCode = program_harness_suite(
    "claude-code",
    tasks=EXAMPLES,
    fixtures=("claude_bin",),
    script=HELLO_WORLD,
    raw={"claude_code_version": CLAUDE_CODE_VERSION},
    protocol="messages",
    stream=True,
    tokens="none",
    token_note="Messages protocol returns no token ids",
    translated=True,
)
