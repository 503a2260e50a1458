"""Codex by name through AgentEnv and ``agentkit run`` on a Harbor example task,
graded by its own verifier (local sandbox): agentkit's suite for program harnesses."""

from __future__ import annotations

from pathlib import Path

from agentkit_codex import CODEX_VERSION

from agentkit.testing.program_suite import hello_world_script, program_harness_suite

EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "harbor"

HELLO_WORLD = hello_world_script(tool="exec_command", command_key="cmd")

#: Its calls are the Responses API, streamed: the token ids the server's
#: ``enable_response_messages`` answer carried, no logprobs (a note says why);
#: translated, served from chat completions with ids and logprobs.
TestCodex = program_harness_suite(
    "codex",
    tasks=EXAMPLES,
    fixtures=("codex_bin",),
    script=HELLO_WORLD,
    raw={"codex_version": CODEX_VERSION},
    protocol="responses",
    stream=True,
    tokens="ids",
    token_note="logprobs",
    translated=True,
)
