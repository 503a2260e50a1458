"""mini-swe-agent in the local sandbox on a task's image root (no Python in the image).

The runtime (interpreter, libraries, glibc loader) is bound read-only into the
image's root; the agent's commands use the image's shell, ENV and WORKDIR.
Needs a tool the local sandbox makes image roots with (``requires_image_tool``).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from agentkit_mini_swe_agent import MiniSweAgentInstall
from test_mini_docker import API_KEY, GREET, TASKS

from agentkit import AgentEnv, Event
from agentkit.testing.model_server import ScriptedModelServer
from agentkit.testing.programs import assert_key_only_reached_the_model, harbor_rollout
from agentkit.testing.sandbox_fixtures import requires_image_tool

pytestmark = [pytest.mark.anyio, requires_image_tool]


@pytest.mark.model_script(GREET)
async def test_mini_solves_a_task_on_an_image_root_without_python(
    model_server: ScriptedModelServer,
    mini_install: MiniSweAgentInstall,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    image_cache: Path,
) -> None:
    pytest.importorskip("agentkit_harbor", reason="the Harbor plugin is not installed")
    monkeypatch.setenv("AGENTKIT_TEST_MINI_KEY", API_KEY)
    model_server.set_api_key(API_KEY)  # any other key: a 401
    seen: list[Event] = []
    env = AgentEnv.from_names(
        f"harbor:{TASKS}", "mini-swe-agent", trace_callback=seen.append, retry_attempts=1
    )
    run_dir = tmp_path / "run"
    rollout = await harbor_rollout(
        env,
        "data:no-python",
        server=model_server,
        out=run_dir,
        api_key_env="AGENTKIT_TEST_MINI_KEY",
        sandbox_options={"image_cache": str(image_cache)},
    )
    assert rollout.rewards["core.reward"] == 1.0
    outputs = [e.data["output"] for e in seen if e.type == "tool.result"]
    assert outputs[0] == "bonjour\nnone\n/srv/work\n"
    assert_key_only_reached_the_model(API_KEY, server=model_server, run_dir=run_dir, events=seen)
