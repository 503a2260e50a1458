"""OpenCode by name through AgentEnv and ``agentkit run`` on a Harbor example task,
graded by its own verifier (local sandbox): agentkit's suite for program harnesses."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agentkit_opencode import OPENCODE_VERSION

from agentkit.testing.program_suite import program_harness_suite
from agentkit.testing.programs import hello_world_token_script

EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "harbor"

HELLO_WORLD: dict[str, Any] = {
    "rules": [
        {
            "match": {"after_tool": False, "last_user_contains": "hello.txt"},
            "reply": {
                "content": "I will create the file.",
                "tool_calls": [
                    {
                        "name": "bash",
                        "arguments": {
                            "command": "printf 'Hello, world!\\n' > /app/hello.txt",
                            "description": "Write the greeting",
                        },
                    }
                ],
                "usage": {"prompt_tokens": 900, "completion_tokens": 25, "cached_tokens": 100},
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

#: Its calls are chat completions, streamed, with the server's ids and logprobs in
#: vLLM's fields (which opencode itself never sees). opencode sends a tool call's
#: arguments back as compact JSON (whatever the server sent), so the token script's
#: are compact: a model that samples them otherwise gets a prefix break after every
#: tool call.
TestOpenCode = program_harness_suite(
    "opencode",
    tasks=EXAMPLES,
    fixtures=("opencode_bin",),
    script=HELLO_WORLD,
    raw={"opencode_version": OPENCODE_VERSION},
    protocol="chat",
    stream=True,
    tokens="logprobs",
    token_script=hello_world_token_script(describe=True, submit=None),
)
