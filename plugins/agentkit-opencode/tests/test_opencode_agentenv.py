"""OpenCode by name through AgentEnv and ``agentkit run`` on a Harbor example task,
graded by its own verifier (local sandbox): agentkit's suite for program harnesses."""

from __future__ import annotations

from pathlib import Path

from agentkit_opencode import OPENCODE_VERSION

from agentkit.testing.program_suite import hello_world_script, program_harness_suite
from agentkit.testing.programs import hello_world_token_script

EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "harbor"

HELLO_WORLD = hello_world_script(tool="bash", describe=True)

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
