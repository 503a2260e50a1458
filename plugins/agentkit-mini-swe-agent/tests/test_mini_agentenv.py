"""mini-swe-agent by name through AgentEnv and ``agentkit run`` on a Harbor example
task, graded by its own verifier, in the local sandbox (on the host userland, and
through ``agentkit run`` on the task's image root, the default): agentkit's suite for
program harnesses."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agentkit_mini_swe_agent import MINI_SWE_AGENT_VERSION

from agentkit.testing.program_suite import program_harness_suite
from agentkit.testing.programs import hello_world_token_script

EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "harbor"
SUBMIT = "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"

HELLO_WORLD: dict[str, Any] = {
    "rules": [
        {
            "match": {"turn": 0, "last_user_contains": "hello.txt"},
            "reply": {
                "content": "I will create the file.",
                "tool_calls": [
                    {
                        "name": "bash",
                        "arguments": {"command": "printf 'Hello, world!\\n' > /app/hello.txt"},
                    }
                ],
                "usage": {"prompt_tokens": 900, "completion_tokens": 25, "cached_tokens": 100},
            },
        },
        {
            "match": {"turn": 1},
            "reply": {
                "content": "Created /app/hello.txt.",
                "tool_calls": [{"name": "bash", "arguments": {"command": SUBMIT}}],
                "usage": {"prompt_tokens": 950, "completion_tokens": 8},
            },
        },
    ]
}

#: Its calls are chat completions through litellm, not streamed, with the server's
#: ids and logprobs; it finishes by running the submit command (``exit_status``).
TestMiniSweAgent = program_harness_suite(
    "mini-swe-agent",
    tasks=EXAMPLES,
    fixtures=("mini_install",),
    script=HELLO_WORLD,
    raw={"mini_swe_agent_version": MINI_SWE_AGENT_VERSION, "exit_status": "Submitted"},
    protocol="chat",
    stream=False,
    tokens="logprobs",
    token_script=hello_world_token_script(describe=False, submit=SUBMIT),
    options={"retry_attempts": 1},
)
