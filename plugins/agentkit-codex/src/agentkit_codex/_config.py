"""The ``config.toml`` and environment codex runs with, in a per-rollout ``CODEX_HOME``.

The generated configuration declares one model provider, ``agentkit``, at the
run's endpoint (codex speaks the OpenAI Responses API). The API key is not
written into it: the provider's ``env_key`` names ``AGENTKIT_CODEX_API_KEY``,
and the key travels only in that environment variable of the process.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import tomli_w

__all__ = [
    "API_KEY_ENV",
    "CODEX_HOME",
    "HEADER_ENV_PREFIX",
    "HIDDEN_ENV",
    "PROVIDER_ID",
    "SAMPLING_KEYS",
    "build_config",
    "build_env",
    "header_variables",
    "merge_config",
    "render_config",
]

#: The provider id of the generated configuration.
PROVIDER_ID = "agentkit"
#: The variable the provider's ``env_key`` names: the key is only there.
API_KEY_ENV = "AGENTKIT_CODEX_API_KEY"
#: codex's home inside the sandbox: its configuration, session files and logs
#: stay with the rollout.
CODEX_HOME = "/logs/agent/codex"
#: Variables carrying the run's extra request headers (``env_http_headers``): their
#: values, credentials among them, are never written to a file.
HEADER_ENV_PREFIX = "AGENTKIT_CODEX_HEADER_"
#: codex's shell tool never sees (and its shell snapshots never record) these.
HIDDEN_ENV = "AGENTKIT_CODEX_*"
#: Sampling arguments codex takes (as configuration keys); others are not applied.
SAMPLING_KEYS = {"reasoning_effort": "model_reasoning_effort"}


def header_variables(headers: Mapping[str, str] | None) -> dict[str, str]:
    """Header name -> the environment variable that carries its value."""
    return {name: f"{HEADER_ENV_PREFIX}{i}" for i, name in enumerate(sorted(headers or {}))}


def merge_config(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    """``override`` merged over ``base``: tables recursively, anything else replaced."""
    out: dict[str, Any] = copy.deepcopy(dict(base))
    for key, value in override.items():
        current = out.get(key)
        if isinstance(current, dict) and isinstance(value, Mapping):
            out[key] = merge_config(current, value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def build_config(
    *,
    model: str,
    base_url: str | None,
    has_api_key: bool,
    max_retries: int | None = None,
    sampling_args: Mapping[str, Any] | None = None,
    extra: Mapping[str, Any] | None = None,
    headers: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """codex's configuration for one run (``extra`` merged over the generated one).

    With ``base_url`` the provider ``agentkit`` (``wire_api = "responses"``) is
    declared and chosen; without it codex's own default provider is used.
    Approvals are off and codex's own sandbox is not used: the rollout's
    sandbox is the boundary. ``headers`` go with every request, their values
    read from the environment (``env_http_headers``).
    """
    config: dict[str, Any] = {
        "model": model,
        "approval_policy": "never",
        "sandbox_mode": "danger-full-access",
        "check_for_update_on_startup": False,
        "analytics": {"enabled": False},
        "feedback": {"enabled": False},
    }
    for key, target in SAMPLING_KEYS.items():
        value = (sampling_args or {}).get(key)
        if isinstance(value, str) and value:
            config[target] = value
    if base_url is not None:
        provider: dict[str, Any] = {
            "name": "agentkit endpoint",
            "base_url": base_url,
            "wire_api": "responses",
        }
        if has_api_key:
            provider["env_key"] = API_KEY_ENV
        if headers:
            provider["env_http_headers"] = header_variables(headers)
        if max_retries is not None:
            provider["request_max_retries"] = max_retries
            provider["stream_max_retries"] = max_retries
        config["model_provider"] = PROVIDER_ID
        config["model_providers"] = {PROVIDER_ID: provider}
    if extra:
        config = merge_config(config, extra)
    # codex hands its environment to the shell tool and records it in shell
    # snapshots under CODEX_HOME; the variables carrying header values stay out
    # of both (the API key's name already matches codex's default ``*KEY*``).
    policy = config.setdefault("shell_environment_policy", {})
    exclude = list(policy.get("exclude") or [])
    if HIDDEN_ENV not in exclude:
        policy["exclude"] = [*exclude, HIDDEN_ENV]
    return config


def render_config(config: Mapping[str, Any]) -> str:
    """The configuration as TOML text (what ``config.toml`` holds)."""
    return tomli_w.dumps(dict(config))


def build_env(
    *,
    codex_home: str,
    api_key: str | None,
    has_endpoint: bool,
    headers: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The environment variables codex needs on top of the sandbox's own.

    With the generated provider the key goes in ``AGENTKIT_CODEX_API_KEY``
    and each header's value in its ``AGENTKIT_CODEX_HEADER_<n>``; with
    codex's default provider the key goes in ``CODEX_API_KEY`` (what
    ``codex exec`` reads for API-key sign-in).
    """
    env = {"CODEX_HOME": codex_home}
    if api_key:
        env[API_KEY_ENV if has_endpoint else "CODEX_API_KEY"] = api_key
    if has_endpoint:
        for name, variable in header_variables(headers).items():
            env[variable] = (headers or {})[name]
    return env
