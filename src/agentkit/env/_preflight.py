"""Preflight: before the first rollout, check what would make every rollout fail.

- a harness that calls a model (``uses_model``) has one: the run's
  ``--model`` or the harness's own ``model`` option;
- the model endpoint answers (``GET /models``) and accepts the API key;
- without a base URL (a hosted API), the API key variable is set;
- the harness's own check passes (its program is installed...): an optional
  ``async def preflight(context)`` on the harness, raising ``HarnessError``;
- the sandbox starts (one sandbox, one ``true`` command, closed again).

A failed check stops the run before anything is created (``PreflightError``,
exit status 2 on the command line). A model name the endpoint does not list
is only a warning: gateways route names they do not list.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import anyio
import attrs

from agentkit._context import RunContext
from agentkit._errors import AgentkitError
from agentkit._limits import loads_bounded
from agentkit._redact import public_url
from agentkit._sandbox import ExecutionHints
from agentkit.chat._endpoint import EndpointError, ModelEndpoint

__all__ = [
    "PreflightError",
    "check_before_run",
    "check_endpoint",
    "run_preflight",
    "sandbox_kind_preflight",
]

#: Seconds the endpoint check and the sandbox check may take.
CHECK_TIMEOUT = 15.0


class PreflightError(AgentkitError):
    """A preflight check failed: the run would fail, so it does not start."""


async def check_endpoint(ctx: RunContext) -> tuple[str | None, str | None]:
    """``GET {base_url}/models``: returns ``(problem, warning)``, either may be None."""
    assert ctx.base_url is not None
    where = public_url(ctx.base_url)
    key = ctx.resolved_api_key
    try:
        endpoint = ModelEndpoint(
            ctx.base_url, api_key=key, headers=ctx.headers, max_connections=1, timeout=10.0
        )
    except EndpointError:
        return f"the base URL {where!r} is not an http(s) URL", None
    try:
        with anyio.fail_after(CHECK_TIMEOUT):
            status, body = await endpoint.request("GET", "/models")
    except (EndpointError, TimeoutError) as exc:
        reason = str(exc) if isinstance(exc, EndpointError) else "no answer in time"
        return (
            f"cannot reach the model server at {where} ({reason}); "
            "is it running, and is --base-url right?"
        ), None
    finally:
        await endpoint.aclose()
    if status in (401, 403):
        if key is None:
            return (
                f"the model endpoint at {where} wants an API key (HTTP {status}): set "
                f"{ctx.api_key_env} or name the variable holding it with --api-key-env"
            ), None
        return (
            f"the model endpoint at {where} refused the API key from {ctx.api_key_env} "
            f"(HTTP {status})"
        ), None
    if status >= 300 or not ctx.model:
        return None, None  # it answers; not every server lists its models
    try:  # a listing that cannot be read (not JSON, too deep, another shape) lists nothing
        data = loads_bounded(body).get("data") or []
        listed = [m.get("id") for m in data if isinstance(m, dict)]
    except (ValueError, AttributeError, TypeError):
        return None, None
    names = [str(m) for m in listed if m]
    if names and ctx.model not in names:
        shown = ", ".join(names[:8]) + (", ..." if len(names) > 8 else "")
        return None, f"model {ctx.model!r} is not among the models {where} lists ({shown})"
    return None, None


async def _check_sandbox(factory: Callable[..., Any], hints: Any, base_url: str | None) -> None:
    with tempfile.TemporaryDirectory(prefix="agentkit-preflight-") as tmp:
        sandbox = factory(
            root=Path(tmp) / "sandbox",
            hints=hints,
            rollout_id="preflight",
            model_endpoint=base_url,
        )
        await sandbox.__aenter__()
        try:
            result = await sandbox.exec(["true"], timeout=CHECK_TIMEOUT)
            if not result.ok:
                detail = (result.stderr or result.stdout or "").strip()[-300:]
                raise AgentkitError(f"a command exited with {result.exit_code}: {detail}")
        finally:
            with anyio.CancelScope(shield=True):
                await sandbox.__aexit__(None, None, None)


async def run_preflight(
    *,
    harness: Any,
    ctx: RunContext,
    sandbox_name: str,
    factory: Callable[..., Any] | None,
    hints: Any,
) -> list[str]:
    """Run every check; raises :class:`PreflightError` listing what failed. Returns warnings."""
    problems: list[str] = []
    warnings: list[str] = []
    uses_model = getattr(harness, "uses_model", False) is True
    if uses_model and not ctx.model and not getattr(harness, "model", None):
        name = getattr(harness, "name", None) or type(harness).__name__
        own = " or -H model=NAME" if hasattr(harness, "model") else ""
        problems.append(
            f"the {name!r} harness calls a model, and none is given: pass --model NAME{own}"
        )
    if ctx.base_url:
        problem, warning = await check_endpoint(ctx)
        if problem:
            problems.append(problem)
        if warning:
            warnings.append(warning)
    elif (
        ctx.model
        and not ctx.model.startswith("scripted:")
        and uses_model
        and not getattr(harness, "base_url", None)  # the harness's own endpoint option
        and ctx.resolved_api_key is None
    ):
        problems.append(
            f"no --base-url, so the model {ctx.model!r} is called on the hosted API, which "
            f"needs an API key: set {ctx.api_key_env} or pass --api-key-env VAR"
        )
    check = getattr(harness, "preflight", None)
    if callable(check):
        try:
            await check(ctx)
        except AgentkitError as exc:
            problems.append(str(exc))
    if factory is not None:
        try:
            await _check_sandbox(factory, hints, ctx.base_url)
        except Exception as exc:
            problems.append(f"the {sandbox_name!r} sandbox cannot start: {_reason(exc)}")
    if problems:
        raise PreflightError(_render(problems))
    return warnings


def _reason(exc: BaseException) -> str:
    text = str(exc).strip()
    return text if isinstance(exc, AgentkitError) and text else f"{text or type(exc).__name__}"


def _render(problems: Sequence[str]) -> str:
    if len(problems) == 1:
        return problems[0]
    return "the run cannot start:\n" + "\n".join(f"  - {p}" for p in problems)


async def sandbox_kind_preflight(factory: Callable[..., Any] | None) -> str | None:
    """The sandbox kind's own check, once per run before anything is created (not on a
    dry run): it may refuse the run, or return a warning (kept in the manifest)."""
    if factory is None:
        return None
    target = getattr(factory, "func", factory)
    preflight = getattr(target, "preflight", None)
    if not callable(preflight):
        return None
    extra = await preflight(**dict(getattr(factory, "keywords", None) or {}))
    return extra if isinstance(extra, str) and extra else None


async def check_before_run(
    *,
    harness: Any,
    ctx: RunContext,
    sandbox_name: str,
    factory: Callable[..., Any] | None,
    first: Any,
    preflight: bool,
) -> tuple[str | None, list[str]]:
    """Everything checked before a run, where its rollouts run (the executor's ``check``).

    The sandbox kind's own check (always), then, when ``preflight``, the
    checks of :func:`run_preflight` with ``first`` (the first planned task
    that has execution hints, else the first). Returns the kind's warning
    and the preflight's warnings.
    """
    kind_warning = await sandbox_kind_preflight(factory)
    if not preflight:
        return kind_warning, []
    hints = None
    if factory is not None:
        # the sandbox is checked here; the task's image is prepare's, which fails
        # only the tasks whose image cannot be made
        hints = attrs.evolve(first.hints or ExecutionHints(), image=None)
        extra = [
            str(b)
            for b in getattr(harness, "sandbox_ro_binds", None) or ()
            if str(b) not in hints.ro_binds
        ]
        if extra:
            hints = attrs.evolve(hints, ro_binds=[*hints.ro_binds, *extra])
    # a sandbox kind with its own preflight (docker: the engine) and image builds
    # (prepare) is checked by those, not by starting one here
    kind = getattr(factory, "func", factory)
    own_check = callable(getattr(kind, "preflight", None))
    warnings = await run_preflight(
        harness=harness,
        ctx=ctx,
        sandbox_name=sandbox_name,
        factory=None if own_check else factory,
        hints=hints,
    )
    return kind_warning, warnings
