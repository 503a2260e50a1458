"""What ``agentkit run`` runs: its flags, its config file and the resumed run, resolved.

The flags win over the config file (``--config run.toml`` or
``[tool.agentkit]``); on ``--resume DIR`` the run's stored settings are the
defaults of everything not given again. The result is a :class:`RunSettings`:
the taskset and harness to build the :class:`~agentkit.AgentEnv` from, and
the run's :class:`~agentkit.RunOptions`, the same class a Python caller
passes to ``AgentEnv.evaluate``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import attrs
import click

from agentkit import registry
from agentkit._errors import SpecError
from agentkit._limits import non_finite
from agentkit._pricing import Price
from agentkit._run_options import RunOptions
from agentkit.env import AgentEnv
from agentkit.executors import Executor, RayExecutor
from agentkit.rundir import dated_dir, read_manifest

__all__ = [
    "RunSettings",
    "build_env",
    "parse_options",
    "provider_of",
    "resolve_settings",
]


@attrs.frozen(kw_only=True)
class RunSettings:
    """A resolved ``agentkit run``: the environment's parts and the run's options."""

    taskset_spec: str
    harness: str
    harness_options: dict[str, Any]
    taskset_options: dict[str, Any]
    sandbox: str | None
    options: RunOptions

    def build_env(self) -> AgentEnv:
        """The :class:`~agentkit.AgentEnv` these settings run."""
        return build_env(
            self.taskset_spec,
            self.harness,
            self.harness_options,
            self.taskset_options,
            self.sandbox or "local",
        )


def parse_options(kind: str, name: str, pairs: tuple[str, ...], flag: str) -> dict[str, Any]:
    """``-H/-T/-S NAME=VALUE`` pairs, parsed by the plugin's option schema."""
    if not pairs:
        return {}
    return registry.option_schema(kind, name).parse_cli(pairs, flag=flag)  # type: ignore[arg-type]


def _check_options(kind: str, name: str, values: dict[str, Any], where: str) -> dict[str, Any]:
    """Options from a config file (already typed), checked by the plugin's option schema."""
    if not values:
        return {}
    try:
        return registry.option_schema(kind, name).validate(values)  # type: ignore[arg-type]
    except SpecError as exc:
        raise SpecError(f"{where}: {exc}") from None


def build_env(
    taskset_spec: str,
    harness: str,
    h_options: dict[str, Any],
    t_options: dict[str, Any],
    sandbox: str,
) -> AgentEnv:
    """The AgentEnv of a command line."""
    return AgentEnv.from_names(
        taskset_spec, harness, taskset_options=t_options, sandbox=sandbox, **h_options
    )


def provider_of(spec: str) -> str:
    """The taskset provider of ``provider:argument``."""
    return registry.parse_taskset_spec(spec)[0]


def _model_args(pairs: tuple[str, ...]) -> dict[str, Any]:
    """``-M key=value``: the value is JSON when it parses (numbers, true, objects), else text."""
    return _json_pairs(pairs, "-M", "a request field for the model")


def _ray_init_args(pairs: tuple[str, ...], table: dict[str, Any]) -> dict[str, Any]:
    """``ray_init`` of the config file, then ``--ray-init key=value`` (JSON, else text):
    ``ray.init``'s keyword arguments."""
    given = {**table, **_json_pairs(pairs, "--ray-init", "an argument of ray.init")}
    if "address" in given:
        raise SpecError("--ray-init address: give the Ray cluster to join with --ray-address")
    return given


def _json_pairs(pairs: tuple[str, ...], flag: str, what: str) -> dict[str, Any]:
    """``FLAG key=value`` pairs (``what``: what a key names): the value is JSON when it
    parses (numbers, true, objects), else text."""
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, text = pair.partition("=")
        key = key.strip()
        if not sep or not key:
            raise SpecError(f"{flag} {pair!r}: expected KEY=VALUE ({what})")
        if key in out:
            raise SpecError(f"{flag} {key} given twice; give it once")
        try:
            out[key] = json.loads(text)
        except ValueError:
            out[key] = text
        if non_finite(out[key]) is not None:  # json.loads takes NaN, Infinity and 1e999
            raise SpecError(
                f"{flag} {key}={text}: expected a finite number (JSON has no NaN or Infinity)"
            )
    return out


def _headers(pairs: tuple[str, ...]) -> dict[str, str]:
    """``--header 'Name: value'`` (or ``Name=value``)."""
    out: dict[str, str] = {}
    for pair in pairs:
        colon, equals = pair.find(":"), pair.find("=")
        cut = colon if colon != -1 and (equals == -1 or colon < equals) else equals
        name = pair[:cut].strip() if cut > 0 else ""
        if not name or any(c.isspace() for c in name):
            raise SpecError(f"--header {pair.split(':')[0]!r}...: expected 'Name: value'")
        out[name] = pair[cut + 1 :].strip()
    return out


def resolve_settings(
    params: dict[str, Any],
    tables: dict[str, dict[str, Any]],
    source: str | None,
    resume: Path | None,
) -> RunSettings:
    """Every setting: flags, then the config file, then the resumed run's manifest."""
    stored: dict[str, Any] = {}
    if resume is not None:
        if params["out"] is not None:
            raise SpecError("give either --out (a new run) or --resume (an existing run)")
        stored = read_manifest(resume)
    elif params["retry_errors"]:
        raise SpecError("--retry-errors reruns rollouts of an existing run: give --resume DIR")
    taskset_spec, harness = _names(params, stored, resume)
    given = _given(params, tables, taskset_spec, harness, source or "config")
    if stored:
        # the stored settings are the defaults; those given again override them one
        # by one (and a change that alters results is then refused, naming it)
        _carry_context(given, stored, resume)
        _carry_options(given, stored, params)
    if params["sandbox_pairs"]:
        given.sb_options.update(
            parse_options("sandbox", given.sb_name or "local", params["sandbox_pairs"], "-S")
        )
    hidden = [
        k
        for k, v in {**given.h_options, **given.t_options, **given.sb_options}.items()
        if v == "***"
    ]
    hidden += [f"--header {k}" for k, v in given.headers.items() if v == "***"]
    hidden += [f"-M {k}" for k, v in given.sampling.items() if _holds_hidden(v)]
    if hidden:
        raise SpecError(
            f"{', '.join(hidden)} of {resume} held secrets, which are not stored; "
            "pass them again (-H/-T/-S NAME=VALUE, --header 'NAME: VALUE', -M KEY=VALUE)"
        )
    return RunSettings(
        taskset_spec=taskset_spec,
        harness=harness,
        harness_options=given.h_options,
        taskset_options=given.t_options,
        sandbox=given.sb_name,
        options=_run_options(given, params, resume),
    )


def _names(params: dict[str, Any], stored: dict[str, Any], resume: Path | None) -> tuple[str, str]:
    """The taskset spec and the harness: given, else the resumed run's."""
    taskset_spec: str | None = params["taskset_spec"]
    harness: str | None = params["harness"]
    if taskset_spec is None or harness is None:
        if not stored:
            raise click.UsageError(
                "TASKSET_SPEC and HARNESS are required (unless --resume DIR, or 'taskset' and "
                "'harness' in --config)"
            )
        taskset_spec = taskset_spec or stored["taskset"].get("spec")
        harness = harness or stored["harness"].get("name")
        if not taskset_spec or not harness:
            raise SpecError(f"{resume} was not started from names; pass TASKSET_SPEC and HARNESS")
    return taskset_spec, harness


@attrs.define(kw_only=True)
class _Given:
    """The settings the flags and the config file give (a resumed run's fill the rest)."""

    taskset_spec: str
    harness: str
    h_options: dict[str, Any]
    t_options: dict[str, Any]
    sampling: dict[str, Any]
    headers: dict[str, str]
    limits: dict[str, Any]
    run_limits: dict[str, Any]
    price: Any
    model: str | None
    base_url: str | None
    api_key_env: str | None
    rollouts: int | None
    limit: int | None
    task_ids: tuple[str, ...]
    pass_threshold: float | None
    normalize: bool
    sb_name: str | None
    allow_network: bool
    proxy: dict[str, Any]
    sb_options: dict[str, Any]
    ray_init: dict[str, Any]


def _given(
    params: dict[str, Any],
    tables: dict[str, dict[str, Any]],
    taskset_spec: str,
    harness: str,
    where: str,
) -> _Given:
    """The settings of the flags over those of the config file (``where``: its name)."""
    provider = provider_of(taskset_spec)
    h_options = {
        **_check_options("harness", harness, tables.get("harness_options", {}), where),
        **parse_options("harness", harness, params["harness_pairs"], "-H"),
    }
    t_options = {
        **_check_options("taskset", provider, tables.get("taskset_options", {}), where),
        **parse_options("taskset", provider, params["taskset_pairs"], "-T"),
    }
    sampling: dict[str, Any] = dict(tables.get("model_args", {}))
    sampling.update(_model_args(params["model_pairs"]))
    for name in ("temperature", "top_p", "seed"):
        if params[name] is not None:
            sampling[name] = params[name]
    headers = {str(k): str(v) for k, v in tables.get("headers", {}).items()}
    headers.update(_headers(params["header_pairs"]))
    price: Any = tables.get("price") or params["price"]
    sb_name = params["sandbox"]
    proxy = _proxy_flags(params)
    sb_options: dict[str, Any] = {}
    if tables.get("sandbox_options"):
        sb_options = _check_options("sandbox", sb_name or "local", tables["sandbox_options"], where)
    return _Given(
        taskset_spec=taskset_spec,
        harness=harness,
        h_options=h_options,
        t_options=t_options,
        sampling=sampling,
        headers=headers,
        limits={
            k: params[k]
            for k in ("max_tokens", "max_turns", "token_limit", "cost_limit", "message_limit")
        },
        run_limits={k: params[k] for k in ("run_token_limit", "run_cost_limit", "timeout")},
        price=price,
        model=params["model"],
        base_url=params["base_url"],
        api_key_env=params["api_key_env"],
        rollouts=params["rollouts"],
        limit=params["limit"],
        task_ids=params["task_ids"],
        pass_threshold=params["pass_threshold"],
        normalize=params["normalize_advantages"],
        sb_name=sb_name,
        allow_network=params["allow_network"],
        proxy=proxy,
        sb_options=sb_options,
        ray_init=_ray_init_args(params["ray_init_pairs"], tables.get("ray_init", {})),
    )


def _holds_hidden(value: Any) -> bool:
    """A stored request field (``-M``) the manifest hid (``***``, at any depth)."""
    if isinstance(value, dict):
        return any(_holds_hidden(v) for v in value.values())
    if isinstance(value, list):
        return any(_holds_hidden(v) for v in value)
    return isinstance(value, str) and value == "***"


def _carry_context(given: _Given, stored: dict[str, Any], resume: Path | None) -> None:
    """The resumed run's plugin options and context (model, endpoint, sampling, headers,
    limits) where none are given again."""
    if given.taskset_spec == stored["taskset"].get("spec"):
        given.t_options = {**(stored["taskset"].get("options") or {}), **given.t_options}
    if given.harness == stored["harness"].get("name"):
        given.h_options = {**(stored["harness"].get("options") or {}), **given.h_options}
    sctx = stored.get("context", {})
    given.model = given.model if given.model is not None else sctx.get("model")
    if given.base_url is None:
        given.base_url = sctx.get("base_url")
        if given.base_url and "***" in given.base_url:
            raise SpecError(
                f"the base URL of {resume} ({given.base_url}) held credentials, which are not "
                "stored; pass it again with --base-url"
            )
    if given.api_key_env is None and sctx.get("api_key_env") not in (None, "OPENAI_API_KEY"):
        given.api_key_env = sctx.get("api_key_env")
    given.sampling = {**(sctx.get("sampling_args") or {}), **given.sampling}
    given.headers = {**(sctx.get("headers") or {}), **given.headers}
    for key, value in (sctx.get("limits") or {}).items():
        if key in given.limits and given.limits[key] is None:
            given.limits[key] = value


def _carry_options(given: _Given, stored: dict[str, Any], params: dict[str, Any]) -> None:
    """The resumed run's options, price, plan and sandbox where none are given again."""
    run_limits = given.run_limits
    run_options = stored.get("options") or {}
    for key in run_limits:
        if run_limits[key] is None:
            run_limits[key] = run_options.get(key)
    if given.pass_threshold is None:
        given.pass_threshold = run_options.get("pass_threshold")
    given.normalize = given.normalize or bool(run_options.get("normalize_advantages"))
    for key in _PROXY_OPTIONS:  # the model proxy's settings, unless given again
        if key not in given.proxy and key in run_options:
            given.proxy[key] = run_options[key]
    pricing = stored.get("pricing") or {}
    if given.price is None and pricing.get("source") == "given":
        given.price = {k: pricing[k] for k in ("input", "output", "cached_input") if pricing.get(k)}
    plan = stored.get("plan", {})
    given.rollouts = given.rollouts if given.rollouts is not None else plan.get("rollouts_per_task")
    given.limit = given.limit if given.limit is not None else plan.get("limit")
    if not given.task_ids and plan.get("requested_task_ids"):
        given.task_ids = tuple(plan["requested_task_ids"])
    sb = stored.get("sandbox", {})
    if sb.get("used"):
        given.sb_name = given.sb_name or sb.get("name")
        if not params["sandbox_pairs"] and not given.sb_options:
            given.sb_options = {
                k: v for k, v in (sb.get("options") or {}).items() if k != "allow_network"
            }
            given.allow_network = given.allow_network or bool(
                (sb.get("options") or {}).get("allow_network")
            )


def _run_options(given: _Given, params: dict[str, Any], resume: Path | None) -> RunOptions:
    """The run's :class:`~agentkit.RunOptions`, from the settings resolved."""
    return RunOptions(
        rollouts_per_task=1 if given.rollouts is None else given.rollouts,
        concurrency=params["concurrency"],
        limit=given.limit,
        task_ids=list(given.task_ids) or None,
        timeout=given.run_limits["timeout"],
        max_retries=params["max_retries"],
        out=None if resume is not None else (params["out"] or dated_dir("runs", given.harness)),
        resume=resume,
        retry_errors=params["retry_errors"],
        model=given.model,
        base_url=given.base_url,
        api_key_env=given.api_key_env,
        sampling_args=given.sampling,
        headers=given.headers,
        **given.limits,
        run_token_limit=given.run_limits["run_token_limit"],
        run_cost_limit=given.run_limits["run_cost_limit"],
        price=None if given.price is None else Price.parse(given.price, where="--price"),
        sandbox=given.sb_name,
        sandbox_options=given.sb_options,
        keep_sandboxes=params["keep_sandboxes"],
        allow_network=given.allow_network,
        pass_threshold=1.0 if given.pass_threshold is None else given.pass_threshold,
        normalize_advantages=given.normalize,
        preflight=params["preflight"],
        executor=_executor(params, given.ray_init),
        **given.proxy,
    )


#: The model proxy's run options (stored in the manifest's ``options``).
_PROXY_OPTIONS = ("model_proxy", "token_ids", "session_header", "cache_salt", "translate_to_chat")


def _proxy_flags(params: dict[str, Any]) -> dict[str, Any]:
    """The model proxy's flags that were given (``--no-session-header``: no header)."""
    given = {k: params[k] for k in _PROXY_OPTIONS if params.get(k) is not None}
    if params.get("no_session_header"):
        if params.get("session_header") is not None:
            raise SpecError("give either --session-header NAME or --no-session-header")
        given["session_header"] = None
    return given


def _executor(params: dict[str, Any], ray_init: dict[str, Any]) -> str | Executor:
    """``--executor`` and its ``--ray-*`` options: a name, or a configured RayExecutor."""
    ray_flags = {
        "--ray-address": params["ray_address"],
        "--ray-cpus": params["ray_cpus"],
        "--ray-artifacts-dir": params["ray_artifacts_dir"],
        "--ray-init": ray_init or None,
    }
    if params["executor"] != "ray":
        given = [flag for flag, value in ray_flags.items() if value is not None]
        if given:
            raise SpecError(f"{', '.join(given)} needs --executor ray")
        executor: str = params["executor"]
        return executor
    cpus = params["ray_cpus"]
    return RayExecutor(
        address=params["ray_address"],
        cpus_per_rollout=1.0 if cpus is None else cpus,
        artifacts_dir=params["ray_artifacts_dir"],
        init_options=ray_init,
    )
