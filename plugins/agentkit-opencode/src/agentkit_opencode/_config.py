"""The configuration and environment opencode runs with.

opencode reads its configuration from ``OPENCODE_CONFIG_CONTENT``; agentkit
generates one provider (``agentkit``, through ``@ai-sdk/openai-compatible``)
pointing at the run's OpenAI-compatible endpoint. The API key is not written
into that JSON: the config refers to it as ``{env:AGENTKIT_OPENCODE_API_KEY}``
and the key travels only in that one environment variable of the process.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from typing import Any

__all__ = [
    "API_KEY_ENV",
    "DEFAULT_AGENT",
    "PROVIDER_ID",
    "build_config",
    "build_env",
    "merge_config",
    "model_reference",
]

#: The provider id agentkit's generated configuration declares.
PROVIDER_ID = "agentkit"
#: The variable that carries the API key into opencode (referenced from the config).
API_KEY_ENV = "AGENTKIT_OPENCODE_API_KEY"
#: opencode's default primary agent, configured when no ``agent`` option is given.
DEFAULT_AGENT = "build"
#: Switches that keep opencode offline and quiet: no self-update, no models.dev
#: fetch, no LSP downloads, no reading of a user's Claude Code files.
STATIC_ENV: dict[str, str] = {
    "OPENCODE_DISABLE_AUTOUPDATE": "1",
    "OPENCODE_DISABLE_MODELS_FETCH": "1",
    "OPENCODE_DISABLE_LSP_DOWNLOAD": "1",
    "OPENCODE_DISABLE_CLAUDE_CODE": "1",
    "OPENCODE_DISABLE_SHARE": "1",
}
#: Sampling arguments opencode takes per agent.
_AGENT_SAMPLING = {"temperature": "temperature", "top_p": "top_p"}
#: Request fields opencode itself sets.
_OWNED = frozenset({"model", "messages", "stream", "tools", "max_tokens"})
#: The context window declared with ``limit.output`` (opencode needs both).
_CONTEXT_TOKENS = 128_000


def model_reference(model: str, *, generated_provider: bool) -> str:
    """What ``--model`` gets: ``agentkit/<model>`` for the generated provider, else ``model``."""
    return f"{PROVIDER_ID}/{model}" if generated_provider else model


def merge_config(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    """``override`` merged over ``base``: objects recursively, anything else replaced."""
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
    agent: str | None,
    max_turns: int | None = None,
    sampling_args: Mapping[str, Any] | None = None,
    extra: Mapping[str, Any] | None = None,
    headers: Mapping[str, str] | None = None,
    max_tokens: int | None = None,
) -> dict[str, Any]:
    """The opencode configuration for one run (``extra`` merged over the generated one).

    With ``base_url`` a provider ``agentkit`` serving ``model`` is declared and
    made the only enabled provider; without it, ``model`` is used as given
    (``provider/model``) and ``extra`` must configure that provider.

    ``temperature`` and ``top_p`` become the agent's settings; the other
    sampling arguments (``seed``, ``-M`` fields) become the model's options,
    which the OpenAI-compatible provider sends in every request body;
    ``headers`` go with every request and ``max_tokens`` caps each call's
    output (the model's ``limit.output``).
    """
    config: dict[str, Any] = {
        "$schema": "https://opencode.ai/config.json",
        "autoupdate": False,
        "share": "disabled",
        "permission": {"*": "allow"},
    }
    if base_url is not None:
        options: dict[str, Any] = {"baseURL": base_url}
        if has_api_key:
            options["apiKey"] = "{env:" + API_KEY_ENV + "}"
        if headers:
            options["headers"] = dict(headers)
        # temperature: True lets opencode send the agent's temperature
        entry: dict[str, Any] = {"name": model, "tool_call": True, "temperature": True}
        model_options = {
            k: v
            for k, v in (sampling_args or {}).items()
            if k not in _AGENT_SAMPLING and k not in _OWNED and not k.startswith("extra_")
        }
        if model_options:
            entry["options"] = model_options
        if max_tokens is not None:
            entry["limit"] = {"context": _CONTEXT_TOKENS, "output": max_tokens}
        config["provider"] = {
            PROVIDER_ID: {
                "npm": "@ai-sdk/openai-compatible",
                "name": "agentkit endpoint",
                "options": options,
                "models": {model: entry},
            }
        }
        config["enabled_providers"] = [PROVIDER_ID]
    ref = model_reference(model, generated_provider=base_url is not None)
    config["model"] = ref
    config["small_model"] = ref
    agent_settings: dict[str, Any] = {}
    if max_turns is not None:
        agent_settings["steps"] = max_turns
    for key, target in _AGENT_SAMPLING.items():
        value = (sampling_args or {}).get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            agent_settings[target] = value
    if agent_settings:
        config["agent"] = {agent or DEFAULT_AGENT: agent_settings}
    if extra:
        config = merge_config(config, extra)
    return config


def build_env(
    config: Mapping[str, Any],
    *,
    xdg_root: str,
    api_key: str | None,
) -> dict[str, str]:
    """The environment variables opencode needs on top of the sandbox's own."""
    env = dict(STATIC_ENV)
    env["OPENCODE_CONFIG_CONTENT"] = json.dumps(config, separators=(",", ":"))
    for name, sub in (
        ("XDG_DATA_HOME", "data"),
        ("XDG_STATE_HOME", "state"),
        ("XDG_CONFIG_HOME", "config"),
        ("XDG_CACHE_HOME", "cache"),
    ):
        env[name] = f"{xdg_root.rstrip('/')}/{sub}"
    if api_key:
        env[API_KEY_ENV] = api_key
    return env
