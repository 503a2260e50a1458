"""Claude Code by name through AgentEnv and ``agentkit run`` on a Harbor example task,
graded by its own verifier (local sandbox): agentkit's suite for program harnesses."""

from __future__ import annotations

from pathlib import Path

from agentkit_claude_code import CLAUDE_CODE_VERSION

from agentkit.testing.program_suite import hello_world_script, program_harness_suite

EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "harbor"

HELLO_WORLD = hello_world_script(tool="Bash", describe=True)
# its Messages answers report cache writes too: the counts stay the prompt and completion
HELLO_WORLD["rules"][0]["reply"]["usage"]["cache_creation_tokens"] = 50

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
