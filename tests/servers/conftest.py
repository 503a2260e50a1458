"""tests/servers: token data against a real inference server, vLLM on the CPU.

Collected only by the ``servers`` nox session (``AGENTKIT_SERVERS=1``), which
installs vLLM's CPU build in a virtual environment of its own
(``AGENTKIT_VLLM`` names its ``vllm`` executable) and the trainers' packages
beside agentkit. The session's one vLLM (:func:`vllm`) serves the tiny model of
:data:`MODEL` (the scripted model of tests/servers/scripted_model.py, a
tests/servers/tiny_models.py model whose weights are set by hand to follow a
script), kept under ``.cache/models`` by the digest of its recipe.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import typing
from collections.abc import Iterator
from pathlib import Path

import attrs
import pytest
import typing_extensions

# the helpers of tests/ and of this folder (tiny_models, the checks)
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

# skyrl 0.3.0 on Python 3.11: see tests/trainers/conftest.py
if sys.version_info < (3, 12):
    typing.TypedDict = typing_extensions.TypedDict  # type: ignore[misc]

import scripted_model
import tiny_models

ROOT = Path(__file__).resolve().parents[2]
#: Where built models are kept (by recipe digest), across sessions.
MODEL_CACHE = ROOT / ".cache" / "models"
#: The model the session's vLLM serves, and the name it is served under.
MODEL = scripted_model.RECIPE
SERVED_NAME = "tiny"
#: How long vLLM may take to start (a hang guard: the wait is on its own log line).
START_WITHIN = 600.0


@attrs.frozen
class Server:
    """A running inference server: its OpenAI-compatible ``base_url`` (``.../v1``),
    the name it serves its model under, the model's directory and its log file."""

    base_url: str
    model: str
    model_dir: Path
    log: Path


def need(variable: str, what: str) -> str:
    """The value of ``variable``; without it the test is skipped (under CI=true, failed)."""
    value = os.environ.get(variable)
    if not value:
        message = f"{what} is not installed (${variable}; python3 -m nox -s servers installs it)"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    return value


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@pytest.fixture(scope="session")
def model_dir() -> Path:
    """The session's tiny model (built, or taken from the cache by its recipe's digest)."""
    return tiny_models.build(MODEL, MODEL_CACHE)


@pytest.fixture(scope="session")
def vllm(model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """One vLLM for the session, serving :data:`MODEL` on loopback with Hermes tool calls
    and ``<think>`` reasoning (``--reasoning-parser qwen3``), in float32 and eager
    mode (a trainer's forward pass reproduces its logprobs). Ready when its log says its
    application started; stopped (its process group) at the session's end."""
    exe = need("AGENTKIT_VLLM", "vLLM")
    port = _free_port()
    log = tmp_path_factory.mktemp("vllm") / "vllm.log"
    command = [
        exe, "serve", str(model_dir), "--served-model-name", SERVED_NAME,
        "--host", "127.0.0.1", "--port", str(port), "--dtype", "float32",
        "--max-model-len", str(MODEL.max_positions), "--enforce-eager", "--seed", "0",
        "--enable-auto-tool-choice", "--tool-call-parser", "hermes",
        "--reasoning-parser", "qwen3",
    ]  # fmt: skip
    env = {
        **os.environ,
        "VLLM_TARGET_DEVICE": "cpu",
        "VLLM_CPU_KVCACHE_SPACE": "1",
        "HF_HUB_OFFLINE": "1",
        "VLLM_NO_USAGE_STATS": "1",
        "DO_NOT_TRACK": "1",
    }
    proc = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env,
        start_new_session=True, text=True, errors="replace",
    )  # fmt: skip
    ready = threading.Event()

    def copy() -> None:
        assert proc.stdout is not None
        with log.open("w") as out:
            for line in proc.stdout:
                out.write(line)
                out.flush()
                if "Application startup complete" in line:
                    ready.set()
        ready.set()  # ended: the wait below sees the exit

    threading.Thread(target=copy, daemon=True).start()
    try:
        ready.wait(START_WITHIN)
        if proc.poll() is not None or not ready.is_set():
            tail = "".join(log.read_text().splitlines(keepends=True)[-30:])
            pytest.fail(f"vLLM did not start (exit {proc.poll()}); its log ends:\n{tail}")
        yield Server(f"http://127.0.0.1:{port}/v1", SERVED_NAME, model_dir, log)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
