"""Helpers for the ``agentkit view`` tests: real runs, a real viewer process, raw HTTP."""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import subprocess
import sys
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
ARITHMETIC = ROOT / "examples" / "jsonl" / "arithmetic.jsonl"
ARITHMETIC_SCRIPT = ROOT / "examples" / "scripts" / "arithmetic.json"
HARBOR = ROOT / "examples" / "harbor"


def cli_env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("AGENTKIT_PLUGINS", None)
    env.pop("AGENTKIT_DISABLE_PLUGINS", None)
    env["NO_COLOR"] = "1"
    return env


def run_agentkit(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """``agentkit ARGS`` in a fresh process, in the repository (as a user types it)."""
    return subprocess.run(
        [sys.executable, "-m", "agentkit", *args],
        cwd=ROOT,
        env=cli_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def arithmetic_script(*, wrong: str | None = None, hang: str | None = None) -> dict[str, Any]:
    """The arithmetic example's script; ``wrong`` gets 41, ``hang`` never gets an answer."""
    script: dict[str, Any] = json.loads(ARITHMETIC_SCRIPT.read_text())
    extra = []
    if hang is not None:
        extra.append({"match": {"last_user_contains": hang}, "reply": {"fail": "hang"}})
    if wrong is not None:
        extra.append({"match": {"last_user_contains": wrong}, "reply": {"content": "41"}})
    script["rules"] = extra + list(script.get("rules") or [])
    return script


def arithmetic_run_args(out: Path, base_url: str, *extra: str) -> list[str]:
    """``agentkit run`` of the JSONL arithmetic set with the chat harness on ``base_url``."""
    return [
        "run",
        f"jsonl:{ARITHMETIC.relative_to(ROOT)}",  # run from ROOT
        "chat",
        "--model",
        "scripted",
        "--base-url",
        base_url,
        "--out",
        str(out),
        "--no-progress",
        *extra,
    ]


def planned_arithmetic() -> int:
    return sum(1 for line in ARITHMETIC.read_text().splitlines() if line.strip())


@contextlib.contextmanager
def view_server(directory: Path, *extra: str) -> Iterator[str]:
    """``agentkit view DIRECTORY --no-open`` in its own process; yields its URL."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "agentkit", "view", str(directory), "--no-open", *extra],
        env=cli_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        url = None
        for line in proc.stdout:
            if line.strip().startswith("http://"):
                url = line.strip()
                break
        if url is None:
            raise AssertionError(f"agentkit view did not start: {proc.communicate(timeout=30)}")
        yield url
    finally:
        proc.terminate()
        try:
            proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()


def raw_get(url: str, path: str, headers: dict[str, str] | None = None) -> tuple[int, bytes]:
    """GET ``path`` exactly as written (no ``..`` folding, as a crafted request sends it)."""
    parts = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port, timeout=60)
    try:
        conn.request("GET", path, headers=headers or {})
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def get_json(url: str, path: str) -> Any:
    status, body = raw_get(url, path)
    assert status == 200, (status, body[:500])
    return json.loads(body)


def tree_state(directory: Path) -> dict[str, tuple[int, int]]:
    """Every path under ``directory`` with its size and modification time (nothing followed)."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(directory, followlinks=False):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            st = p.lstat()
            out[str(p.relative_to(directory))] = (st.st_size, st.st_mtime_ns)
    return out
