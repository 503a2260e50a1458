"""RunOptions: every setting of one run of an :class:`~agentkit.AgentEnv`, typed and checked once.

``AgentEnv.run``, ``evaluate``, ``generate`` and ``plan`` take a
:class:`RunOptions` and/or its fields as keyword arguments
(:class:`RunOptionsKeywords`, so that mypy checks every caller); ``agentkit
run`` builds the same class from its flags and config file. The class is
frozen: vary one field with :func:`attrs.evolve`, which checks the result
again. :meth:`RunOptions.from_mapping` builds one from a TOML or JSON table
with the strict converter (:mod:`agentkit._convert`).
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypedDict

import attrs

from agentkit._context import RunContext, public_headers
from agentkit._convert import structure
from agentkit._errors import SpecError, ValidationError
from agentkit._events import Event
from agentkit._executor import Executor
from agentkit._limits import non_finite
from agentkit._pricing import Price
from agentkit._proxy_settings import DEFAULT_SESSION_HEADER, ProxySettings

__all__ = ["FILE_OPTIONS", "RunOptions", "RunOptionsKeywords", "build_run_options", "file_option"]


# -- the checks: each message names the setting, what it must be and what it got ---------
def _count(minimum: int) -> Callable[[Any, attrs.Attribute[Any], int | None], None]:
    """A count of at least ``minimum`` (None: no bound)."""

    def check(_instance: Any, attribute: attrs.Attribute[Any], value: int | None) -> None:
        if value is None or value >= minimum:
            return
        bound = "0 or more" if minimum == 0 else f"at least {minimum}"
        raise SpecError(f"{attribute.name} must be {bound}, got {value}")

    return check


def _timeout(_instance: Any, attribute: attrs.Attribute[Any], value: float | None) -> None:
    if value is not None and not (math.isfinite(value) and value > 0):
        raise SpecError(f"{attribute.name} must be a number of seconds above 0, got {value!r}")


def _delay(_instance: Any, attribute: attrs.Attribute[Any], value: float) -> None:
    if not (math.isfinite(value) and value >= 0):
        raise SpecError(f"{attribute.name} must be a number of seconds (0 or more), got {value!r}")


def _finite(_instance: Any, attribute: attrs.Attribute[Any], value: float) -> None:
    if not math.isfinite(value):
        raise SpecError(f"{attribute.name} must be a finite number, got {value!r}")


def _usd(_instance: Any, attribute: attrs.Attribute[Any], value: float | None) -> None:
    if value is not None and not (math.isfinite(value) and value > 0):
        raise SpecError(f"{attribute.name} must be more than 0 (USD), got {value:g}")


# -- the conversions: what callers may pass, as the type the run uses ---------------------
def _path(value: str | os.PathLike[str] | None) -> Path | None:
    return None if value is None else Path(value)


def _task_ids(value: Sequence[str] | None) -> tuple[str, ...] | None:
    if value is None:
        return None
    if isinstance(value, str):
        raise SpecError(f"task_ids must be a list of task ids, got the string {value!r}")
    return tuple(value)


def _finite_table(name: str, value: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """A table of settings as a dict, every number in it finite (a NaN temperature would
    be sent upstream and written into every file)."""
    if value is None:
        return None
    found = non_finite(value, name)
    if found is not None:
        raise SpecError(f"{found[0]} must be a finite number, got {found[1]!r}")
    return dict(value)


def _sampling_args(value: Mapping[str, Any] | None) -> dict[str, Any] | None:
    return _finite_table("sampling_args", value)


def _sandbox_options(value: Mapping[str, Any] | None) -> dict[str, Any] | None:
    return _finite_table("sandbox_options", value)


def _headers(value: Mapping[str, str] | None) -> dict[str, str] | None:
    return None if value is None else {str(k): str(v) for k, v in value.items()}


def _price(value: Price | Mapping[str, float] | None) -> Price | None:
    if value is None or isinstance(value, Price):
        return value
    return Price.parse(value)


def _hidden(value: dict[str, Any] | None) -> str:
    """The repr of options that may hold secrets: their names only."""
    return "None" if value is None else "{" + ", ".join(f"{k!r}: ..." for k in value) + "}"


def _public_headers(value: dict[str, str] | None) -> str:
    return "None" if value is None else repr(public_headers(value))


@attrs.frozen(kw_only=True)
class RunOptions:
    """Every setting of one run: how many rollouts, where, against which model, within
    which limits, recorded where.

    Built once and checked then: a value out of range is a
    :class:`~agentkit.SpecError` naming the setting (``concurrency must be at
    least 1, got 0``). Frozen; ``attrs.evolve(options, concurrency=4)`` makes a
    checked copy with one field changed. ``None`` means "not given": the
    context's, the environment's or the built-in default applies.

    ``rollouts_per_task``: rollouts of each task (one group). ``concurrency``:
    rollouts running at once (also the model connection pool's size).
    ``limit``: only the first K tasks. ``task_ids``: only these tasks.
    ``timeout``: seconds per rollout attempt. ``max_retries``,
    ``retry_base_delay``, ``retry_max_delay``: retries of retryable failures
    and their backoff. ``out``: the run directory to create (nothing is
    written without it or ``resume``); ``resume``: the run directory to
    continue; ``retry_errors``: on resume, also run again the rollouts that
    errored.

    ``model``, ``base_url``, ``api_key_env``, ``sampling_args``, ``headers``:
    the model endpoint and request fields (the :class:`~agentkit.RunContext`
    the harness receives, starting from ``context``). ``max_tokens``,
    ``max_turns``, ``token_limit``, ``cost_limit``, ``message_limit``: limits
    per model call and per rollout. ``run_token_limit``, ``run_cost_limit``:
    limits of the whole run. ``price``: the model's prices (else from
    genai-prices).

    ``sandbox``, ``sandbox_options``: the sandbox kind and its options (added
    to the environment's); ``allow_network``: tasks that ask for network get
    it; ``keep_sandboxes``: keep every rollout's sandbox files.
    ``pass_threshold``, ``normalize_advantages``: statistics. ``progress``: the
    progress bar on stderr. ``event_buffer``, ``callback_drain_timeout``,
    ``trace_callback``: live events (``trace_callback`` replaces the
    environment's for this run). ``preflight``: check the endpoint, key,
    harness and sandbox first. ``on_start``: called once with the plan.
    ``executor``, ``ray_address``: where rollouts run. ``model_proxy``: pass
    every model call through agentkit's model proxy and record it
    (``calls/`` in the run directory); ``token_ids``: the proxy asks the
    server for token ids and logprobs on the agent's behalf;
    ``session_header``: the header carrying each rollout's session id (None:
    none); ``cache_salt``: vLLM's ``cache_salt`` added to requests;
    ``translate_to_chat``: the proxy serves Anthropic Messages and OpenAI
    Responses calls from the server's chat completions (which return token
    ids) (docs/model-proxy.md). docs/agentenv.md describes each one.
    """

    rollouts_per_task: int = attrs.field(default=1, validator=_count(1))
    concurrency: int = attrs.field(default=8, validator=_count(1))
    max_retries: int = attrs.field(default=3, validator=_count(0))
    limit: int | None = attrs.field(default=None, validator=_count(0))
    task_ids: tuple[str, ...] | None = attrs.field(default=None, converter=_task_ids)
    timeout: float | None = attrs.field(default=None, validator=_timeout)
    pass_threshold: float = attrs.field(default=1.0, validator=_finite)
    retry_base_delay: float = attrs.field(default=0.5, validator=_delay)
    retry_max_delay: float = attrs.field(default=30.0, validator=_delay)
    callback_drain_timeout: float = attrs.field(default=5.0, validator=_delay)
    max_tokens: int | None = attrs.field(default=None, validator=_count(1))
    max_turns: int | None = attrs.field(default=None, validator=_count(1))
    token_limit: int | None = attrs.field(default=None, validator=_count(1))
    message_limit: int | None = attrs.field(default=None, validator=_count(1))
    run_token_limit: int | None = attrs.field(default=None, validator=_count(1))
    cost_limit: float | None = attrs.field(default=None, validator=_usd)
    run_cost_limit: float | None = attrs.field(default=None, validator=_usd)
    out: Path | None = attrs.field(default=None, converter=_path)
    resume: Path | None = attrs.field(default=None, converter=_path)
    retry_errors: bool = False
    model: str | None = None
    base_url: str | None = None
    api_key_env: str | None = None
    sampling_args: dict[str, Any] | None = attrs.field(default=None, converter=_sampling_args)
    headers: dict[str, str] | None = attrs.field(
        default=None, converter=_headers, repr=_public_headers
    )
    price: Price | None = attrs.field(default=None, converter=_price)
    context: RunContext | None = None
    sandbox: str | None = None
    sandbox_options: dict[str, Any] | None = attrs.field(
        default=None, converter=_sandbox_options, repr=_hidden
    )
    keep_sandboxes: bool = False
    allow_network: bool = False
    normalize_advantages: bool = False
    progress: bool = False
    event_buffer: int = attrs.field(default=1000, validator=_count(0))
    preflight: bool = True
    on_start: Callable[[dict[str, Any]], None] | None = None
    trace_callback: Callable[[Event], Any] | None = None
    executor: str | Executor = "local"
    ray_address: str | None = None
    model_proxy: bool = True
    token_ids: bool = False
    session_header: str | None = DEFAULT_SESSION_HEADER
    cache_salt: str | None = None
    translate_to_chat: bool = False

    def __attrs_post_init__(self) -> None:
        if self.resume is not None and self.out is not None and self.resume != self.out:
            raise SpecError("give either resume= (an existing run) or out= (a new run), not both")
        self.proxy_settings()  # a bad header name or salt is an error now

    def proxy_settings(self) -> ProxySettings | None:
        """What the model proxy does with the run's calls (None: ``model_proxy`` is off)."""
        if not self.model_proxy:
            return None
        return ProxySettings(
            token_ids=self.token_ids,
            session_header=self.session_header or None,
            cache_salt=self.cache_salt,
            translate_to_chat=self.translate_to_chat,
        )

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any], *, source: str | None = None) -> RunOptions:
        """Run options from a TOML or JSON table of field names (``base-url`` or
        ``base_url``), typed strictly: ``"10"`` is not 10, an unknown key is an
        error, and every error names ``source`` and the key.

        Paths are strings, ``price`` a table (``input``, ``output``,
        ``cached_input``: USD per million tokens), ``executor`` a name;
        ``context``, ``on_start`` and ``trace_callback`` are Python objects,
        which a file cannot hold.
        """
        if not isinstance(data, Mapping):
            raise ValidationError("", f"expected a table of run options, got {data!r}", source)
        values: dict[str, Any] = {}
        for raw_key, value in data.items():
            key = str(raw_key).replace("-", "_")
            values[key] = file_option(key, value, source=source, path=str(raw_key))
        try:
            return cls(**values)
        except SpecError as exc:
            raise SpecError(f"{source}: {exc}" if source else str(exc)) from None


_FIELDS = frozenset(f.name for f in attrs.fields(RunOptions))

#: What a file gives for each run option it may set (see ``from_mapping``).
_FILE_TYPES: dict[str, Any] = {
    "rollouts_per_task": int,
    "concurrency": int,
    "max_retries": int,
    "limit": int | None,
    "task_ids": list[str] | None,
    "timeout": float | None,
    "pass_threshold": float,
    "retry_base_delay": float,
    "retry_max_delay": float,
    "callback_drain_timeout": float,
    "max_tokens": int | None,
    "max_turns": int | None,
    "token_limit": int | None,
    "message_limit": int | None,
    "run_token_limit": int | None,
    "cost_limit": float | None,
    "run_cost_limit": float | None,
    "out": str | None,
    "resume": str | None,
    "retry_errors": bool,
    "model": str | None,
    "base_url": str | None,
    "api_key_env": str | None,
    "sampling_args": dict[str, Any] | None,
    "headers": dict[str, str] | None,
    "price": dict[str, float] | None,
    "sandbox": str | None,
    "sandbox_options": dict[str, Any] | None,
    "keep_sandboxes": bool,
    "allow_network": bool,
    "normalize_advantages": bool,
    "progress": bool,
    "event_buffer": int,
    "preflight": bool,
    "executor": str,
    "ray_address": str | None,
    "model_proxy": bool,
    "token_ids": bool,
    "session_header": str | None,
    "cache_salt": str | None,
    "translate_to_chat": bool,
}


#: The run options a TOML or JSON file may set (see ``RunOptions.from_mapping``).
FILE_OPTIONS: frozenset[str] = frozenset(_FILE_TYPES)


def file_option(name: str, value: Any, *, source: str | None = None, path: str = "") -> Any:
    """The value of run option ``name`` (``base_url``) as a file gives it, typed strictly.

    Returns it as the file's type says (``price`` a table, paths strings);
    raises :class:`~agentkit.ValidationError` naming ``source`` and ``path``
    (default ``name``) for a name that is not a file setting or a value of
    another type. Ranges are checked when a :class:`RunOptions` is built.
    """
    where = path or name
    file_type = _FILE_TYPES.get(name)
    if file_type is None:
        known = ", ".join(sorted(_FILE_TYPES))
        why = "not a file setting" if name in _FIELDS else "unknown run option"
        raise ValidationError(where, f"{why}; known: {known}", source)
    return structure(value, file_type, source=source, path=where)


class RunOptionsKeywords(TypedDict, total=False):
    """The keyword arguments of ``AgentEnv.run``, ``evaluate``, ``generate`` and ``plan``.

    Every field of :class:`RunOptions`, as its constructor takes it, and two
    earlier names: ``run_dir`` (``out``) and ``check_model_server``
    (``preflight``). Given beside a ``RunOptions``, they override its fields.
    """

    rollouts_per_task: int
    concurrency: int
    max_retries: int
    limit: int | None
    task_ids: Sequence[str] | None
    timeout: float | None
    pass_threshold: float
    retry_base_delay: float
    retry_max_delay: float
    callback_drain_timeout: float
    max_tokens: int | None
    max_turns: int | None
    token_limit: int | None
    message_limit: int | None
    run_token_limit: int | None
    cost_limit: float | None
    run_cost_limit: float | None
    out: str | os.PathLike[str] | None
    resume: str | os.PathLike[str] | None
    retry_errors: bool
    model: str | None
    base_url: str | None
    api_key_env: str | None
    sampling_args: Mapping[str, Any] | None
    headers: Mapping[str, str] | None
    price: Price | Mapping[str, float] | None
    context: RunContext | None
    sandbox: str | None
    sandbox_options: Mapping[str, Any] | None
    keep_sandboxes: bool
    allow_network: bool
    normalize_advantages: bool
    progress: bool
    event_buffer: int
    preflight: bool
    on_start: Callable[[dict[str, Any]], None] | None
    trace_callback: Callable[[Event], Any] | None
    executor: str | Executor
    ray_address: str | None
    model_proxy: bool
    token_ids: bool
    session_header: str | None
    cache_salt: str | None
    translate_to_chat: bool
    run_dir: str | os.PathLike[str] | None
    check_model_server: bool | None


#: The earlier names :class:`RunOptionsKeywords` still accepts, and their fields.
ALIASES: dict[str, str] = {"run_dir": "out", "check_model_server": "preflight"}


def build_run_options(options: RunOptions | None, keywords: Mapping[str, Any]) -> RunOptions:
    """``options`` (or the defaults) with ``keywords`` (:class:`RunOptionsKeywords`) applied."""
    values = dict(keywords)
    run_dir = values.pop("run_dir", None)
    if run_dir is not None:
        out = values.get("out")
        if out is not None and Path(out) != Path(run_dir):
            raise SpecError("give either out= or run_dir=, not both")
        values["out"] = run_dir
    check_model_server = values.pop("check_model_server", None)
    if check_model_server is not None:  # the earlier name of ``preflight``
        values["preflight"] = check_model_server
    if options is None:
        return RunOptions(**values)
    return attrs.evolve(options, **values)
