"""``agentkit export`` loads no model client: reading a message's reasoning (the
verifiers and SFT formats do) lives on the ground floor (``agentkit._reasoning``), so an
export never imports ``agentkit.chat`` (its HTTP client, connection pools and the
packages they load) nor the proxy.

A real run (the arithmetic set, the chat harness, the scripted model server, token ids
on), exported by the real command line in a fresh process in every format that needs no
optional package.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from _view import ROOT, arithmetic_run_args, arithmetic_script, cli_env, run_agentkit

from agentkit.testing.model_server import ScriptedModelServer

#: ``python -c`` running ``agentkit ARGS``, then printing on stderr, as it exits, the
#: modules of agentkit's model clients it loaded.
LOADED = """
import atexit, runpy, sys
def loaded():
    names = sorted(m for m in sys.modules if m.split(".")[:2] in (["agentkit", "chat"],
                   ["agentkit", "proxy"]) or m in ("httpcore", "h11"))
    sys.stderr.write("LOADED " + " ".join(names) + "\\n")
atexit.register(loaded)
sys.argv[0] = "agentkit"
runpy.run_module("agentkit", run_name="__main__")
"""


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("imports") / "run"
    with ScriptedModelServer(arithmetic_script()) as server:
        done = run_agentkit(*arithmetic_run_args(out, server.base_url, "--token-ids"))
        assert done.returncode == 0, done.stderr
    return out


@pytest.mark.parametrize("fmt", ["jsonl", "skyrl", "tinker", "verifiers", "sft-chat", "sharegpt"])
def test_an_export_loads_no_model_client(fmt: str, run: Path) -> None:
    out = run.parent / f"train.{fmt}"
    done = subprocess.run(
        [sys.executable, "-c", LOADED, "export", str(run), "--format", fmt, "-o", str(out)],
        cwd=ROOT,
        env=cli_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert out.stat().st_size > 0
    (line,) = [x for x in done.stderr.splitlines() if x.startswith("LOADED")]
    assert line == "LOADED ", line
