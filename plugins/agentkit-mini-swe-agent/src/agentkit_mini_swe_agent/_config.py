"""The configuration and environment mini-swe-agent runs with.

mini reads YAML configuration files given with ``-c`` (later files merged over
earlier ones, objects key by key). agentkit passes mini's own ``mini.yaml``
(or the ``base_config`` option) and then one file it writes per rollout,
``/logs/agent/mini-swe-agent/config.yaml``, holding the task, the model and
endpoint, the limits and the ``config`` option merged over them. The file is
JSON (a subset of YAML): it never holds the API key or the request headers,
which travel only in the environment of mini's process (see
:data:`API_KEY_ENV` and :data:`HEADERS_ENV`).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from typing import Any

__all__ = [
    "API_KEY_ENV",
    "HEADERS_ENV",
    "NO_KEY",
    "STATIC_ENV",
    "build_config",
    "build_env",
    "litellm_model",
    "merge_config",
]

#: The variable carrying the API key into mini's process. The bootstrap that
#: starts mini removes it from the environment and hands it to litellm
#: (``litellm.api_key``) before mini runs, so the agent's commands, which
#: inherit mini's environment, do not get it.
API_KEY_ENV = "AGENTKIT_MINI_SWE_AGENT_API_KEY"
#: Sent when the run has no API key (litellm's OpenAI client insists on one).
NO_KEY = "agentkit-no-key"
#: Settings that keep mini non-interactive, quiet and offline: no first-run
#: setup, no startup banner, no fetch of litellm's cost map from the network,
#: no error when litellm cannot price a model (cost is then 0), and Python's
#: plain traceback when mini fails instead of Typer's rich one (which renders
#: every frame's local variables and takes seconds to draw).
STATIC_ENV: dict[str, str] = {
    "MSWEA_CONFIGURED": "true",
    "MSWEA_SILENT_STARTUP": "1",
    "MSWEA_COST_TRACKING": "ignore_errors",
    "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    "_TYPER_STANDARD_TRACEBACK": "1",
}
#: Sampling arguments litellm takes as keywords (the OpenAI API's); others are
#: sent in the request body through ``extra_body``.
_LITELLM_ARGS = frozenset(
    {
        "temperature",
        "top_p",
        "max_tokens",
        "max_completion_tokens",
        "stop",
        "seed",
        "n",
        "presence_penalty",
        "frequency_penalty",
        "logit_bias",
        "logprobs",
        "top_logprobs",
        "response_format",
        "reasoning_effort",
        "user",
        "metadata",
        "service_tier",
    }
)
#: Request fields mini itself sets (its one bash tool), or that carry headers.
_OWNED = frozenset(
    {"model", "messages", "stream", "stream_options", "timeout", "tools", "tool_choice"}
)
#: The variable carrying the run's extra request headers (JSON) into mini's process;
#: the bootstrap hands them to litellm (``litellm.headers``) like the key.
HEADERS_ENV = "AGENTKIT_MINI_SWE_AGENT_HEADERS"


def litellm_model(model: str, *, base_url: str | None) -> str:
    """What mini's ``model.model_name`` gets: ``openai/<model>`` for the run's
    OpenAI-compatible endpoint, else ``model`` as given (a litellm ``provider/model``)."""
    return f"openai/{model}" if base_url is not None else model


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
    task: str,
    model: str,
    base_url: str | None,
    max_turns: int | None = None,
    cost_limit: float | None = None,
    command_timeout: int | None = None,
    sampling_args: Mapping[str, Any] | None = None,
    max_tokens: int | None = None,
    extra: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """mini's configuration for one run (``extra`` merged over the generated one).

    ``max_turns`` becomes ``agent.step_limit`` (mini stops before model call
    ``max_turns + 1``); ``cost_limit`` ``agent.cost_limit``;
    ``command_timeout`` ``environment.timeout`` (seconds per bash command).
    Sampling arguments of the OpenAI API go to litellm as they are, others
    (``top_k``, ``min_p``...) in ``extra_body``; request headers never go
    here (see :func:`build_env`).
    """
    model_kwargs: dict[str, Any] = {"drop_params": True}
    if base_url is not None:
        model_kwargs["api_base"] = base_url
    extra_body: dict[str, Any] = {}
    for key, value in (sampling_args or {}).items():
        if key in _OWNED or key in ("extra_headers", "extra_query") or value is None:
            continue
        if key == "extra_body":
            extra_body = {**dict(value or {}), **extra_body}
        elif key in _LITELLM_ARGS:
            model_kwargs[key] = value
        else:
            extra_body[key] = value
    if extra_body:
        model_kwargs["extra_body"] = extra_body
    if max_tokens is not None:
        model_kwargs["max_tokens"] = max_tokens
    agent: dict[str, Any] = {"mode": "yolo", "confirm_exit": False}
    if max_turns is not None:
        agent["step_limit"] = max_turns
    if cost_limit is not None:
        agent["cost_limit"] = cost_limit
    environment: dict[str, Any] = {"environment_class": "local"}
    if command_timeout is not None:
        environment["timeout"] = command_timeout
    config: dict[str, Any] = {
        "run": {"task": task},
        "agent": agent,
        "model": {
            "model_name": litellm_model(model, base_url=base_url),
            "model_kwargs": model_kwargs,
            "cost_tracking": "ignore_errors",
        },
        "environment": environment,
    }
    if extra:
        config = merge_config(config, extra)
    return config


def build_env(
    *,
    config_dir: str,
    api_key: str | None,
    retry_attempts: int | None = None,
    headers: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The environment variables mini needs on top of the sandbox's own.

    The API key and the request ``headers`` (which may hold credentials)
    travel only here, never in the configuration file.
    """
    env = dict(STATIC_ENV)
    env["MSWEA_GLOBAL_CONFIG_DIR"] = config_dir
    if retry_attempts is not None:
        env["MSWEA_MODEL_RETRY_STOP_AFTER_ATTEMPT"] = str(retry_attempts)
    env[API_KEY_ENV] = api_key if api_key else NO_KEY
    if headers:
        env[HEADERS_ENV] = json.dumps(dict(headers))
    return env
