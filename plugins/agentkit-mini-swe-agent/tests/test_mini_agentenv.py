"""mini-swe-agent by name through AgentEnv and ``agentkit run`` on a Harbor example
task, graded by its own verifier, in the local sandbox (on the host userland, and
through ``agentkit run`` on the task's image root, the default): agentkit's suite for
program harnesses."""

from __future__ import annotations

from pathlib import Path

from agentkit_mini_swe_agent import MINI_SWE_AGENT_VERSION

from agentkit.testing.program_suite import hello_world_script, program_harness_suite
from agentkit.testing.programs import hello_world_token_script

EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "harbor"
SUBMIT = "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"

HELLO_WORLD = hello_world_script(submit=SUBMIT)

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
