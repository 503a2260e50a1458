"""The ``settings.json`` and environment Claude Code runs with, in a per-rollout
``CLAUDE_CONFIG_DIR``.

The endpoint is given as ``ANTHROPIC_BASE_URL`` (Claude Code speaks the
Anthropic Messages API and adds ``/v1/messages`` itself) and the key as
``ANTHROPIC_API_KEY``, only in the process's environment: nothing secret is
written to a file.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from typing import Any

__all__ = [
    "BASH_ENV_FILE",
    "CONFIG_DIR",
    "HIDDEN_FROM_TOOLS",
    "NO_KEY",
    "anthropic_base_url",
    "bash_env_script",
    "build_env",
    "build_settings",
    "merge_settings",
    "render_settings",
]

#: Claude Code's configuration directory inside the sandbox: its settings,
#: session transcripts and state stay with the rollout.
CONFIG_DIR = "/logs/agent/claude-code"
#: The script Claude Code sources before each Bash command (``CLAUDE_ENV_FILE``),
#: in its configuration directory.
BASH_ENV_FILE = "bash-env.sh"
#: Variables carrying credentials, unset before each Bash command: a command the
#: model runs (``env``, say) cannot print them into the transcript or a kept file.
HIDDEN_FROM_TOOLS = ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_CUSTOM_HEADERS")
#: Sent as the key when the run has none: Claude Code refuses to start without
#: one, and an endpoint that checks keys answers 401 to it.
NO_KEY = "agentkit-no-api-key"
#: Environment switches that keep Claude Code offline and quiet, and let it
#: bypass permission prompts as root (the rollout's sandbox is the boundary).
STATIC_ENV: dict[str, str] = {
    "DISABLE_AUTOUPDATER": "1",
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    "DISABLE_TELEMETRY": "1",
    "DISABLE_ERROR_REPORTING": "1",
    "IS_SANDBOX": "1",
}
#: Claude Code's model roles: every one is pointed at the run's model, so
#: background work and subagents use what the endpoint serves.
_MODEL_ROLES = (
    "ANTHROPIC_DEFAULT_OPUS_MODEL",
    "ANTHROPIC_DEFAULT_SONNET_MODEL",
    "ANTHROPIC_DEFAULT_HAIKU_MODEL",
    "CLAUDE_CODE_SUBAGENT_MODEL",
)


def merge_settings(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    """``override`` merged over ``base``: objects recursively, anything else replaced."""
    out: dict[str, Any] = copy.deepcopy(dict(base))
    for key, value in override.items():
        current = out.get(key)
        if isinstance(current, dict) and isinstance(value, Mapping):
            out[key] = merge_settings(current, value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def build_settings(*, model: str, extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Claude Code's user settings for one run (``extra`` merged over them): the
    model, and every tool allowed without asking."""
    settings: dict[str, Any] = {
        "model": model,
        "permissions": {"defaultMode": "bypassPermissions"},
    }
    if extra:
        settings = merge_settings(settings, extra)
    return settings


def render_settings(settings: Mapping[str, Any]) -> str:
    """The settings as the JSON text ``settings.json`` holds."""
    return json.dumps(settings, indent=2, ensure_ascii=False) + "\n"


def bash_env_script() -> str:
    """What ``CLAUDE_ENV_FILE`` holds: the credentials unset for the Bash tool (no secret)."""
    return f"unset {' '.join(HIDDEN_FROM_TOOLS)}\n"


def anthropic_base_url(base_url: str) -> str:
    """``ANTHROPIC_BASE_URL`` for an endpoint: without a trailing ``/v1`` (Claude
    Code appends ``/v1/messages``)."""
    url = base_url.rstrip("/")
    return url[: -len("/v1")] if url.endswith("/v1") else url


def build_env(
    *,
    config_dir: str,
    model: str,
    base_url: str | None,
    api_key: str | None,
    max_retries: int | None = None,
    max_output_tokens: int | None = None,
    headers: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The environment variables Claude Code needs on top of the sandbox's own
    (``headers``, sent with every request, as ``ANTHROPIC_CUSTOM_HEADERS``; the
    credentials are unset for the Bash tool by :func:`bash_env_script`)."""
    env = dict(STATIC_ENV)
    env["CLAUDE_CONFIG_DIR"] = config_dir
    env["CLAUDE_ENV_FILE"] = f"{config_dir}/{BASH_ENV_FILE}"
    env["ANTHROPIC_API_KEY"] = api_key or NO_KEY
    if base_url is not None:
        env["ANTHROPIC_BASE_URL"] = anthropic_base_url(base_url)
        for role in _MODEL_ROLES:
            env[role] = model
    if max_retries is not None:
        env["CLAUDE_CODE_MAX_RETRIES"] = str(max_retries)
    if max_output_tokens is not None:
        env["CLAUDE_CODE_MAX_OUTPUT_TOKENS"] = str(max_output_tokens)
    if headers:
        env["ANTHROPIC_CUSTOM_HEADERS"] = "\n".join(f"{k}: {v}" for k, v in headers.items())
    return env
