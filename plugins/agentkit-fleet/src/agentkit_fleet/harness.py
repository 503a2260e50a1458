"""The ``fleet-tool-call`` harness: the Fleet tool-call loop with the run's model.

Each rollout gets its own environment (see :mod:`agentkit_fleet.environments`),
chosen by ``provider``:

- ``auto`` (default): ``mcp_url``/``mcp_command`` when given; else the Fleet
  platform when ``FLEET_API_KEY`` is set; else the bundled local environment
  when the task's env_key is ``bookings``;
- ``mcp``: the MCP server at ``mcp_url`` (streamable HTTP) or started by
  ``mcp_command`` (stdio; ``{seed_db}``/``{current_db}`` placeholders are
  replaced by fresh per-rollout copies of ``seed_db``);
- ``platform``: the Fleet platform through the ``fleet-python`` SDK;
- ``local``: the bundled bookings application over stdio.

The loop itself is :class:`~agentkit_fleet.episode.FleetToolCallEpisode`,
which :meth:`FleetToolCallHarness.episode` returns (agentkit's generic step
protocol, :class:`agentkit.StepCapableHarness`); ``run`` drives that same
episode and only adds the model calls.
"""

from __future__ import annotations

import asyncio
import os
import shlex
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any, Literal

from agentkit import (
    EventCallback,
    EventRecorder,
    ExecutionHints,
    HarnessError,
    HarnessResult,
    Rubric,
    RunContext,
    Sandbox,
    Task,
    Usage,
    registry,
    reward,
)
from agentkit.chat import ChatClient, ConnectionCache, ModelCallError, TokenTrace
from agentkit_fleet.environments import (
    EnvironmentError_,
    LocalBookingsEnvironment,
    McpEnvironment,
    PlatformEnvironment,
    ToolEnvironment,
)
from agentkit_fleet.episode import FleetToolCallEpisode
from agentkit_fleet.localenv.zygote import warm_socket
from agentkit_fleet.mcp_client import McpConnectionError
from agentkit_fleet.records import FleetRecord, record_of

__all__ = ["LOCAL_ENV_KEYS", "FleetToolCallHarness"]

#: env_keys the bundled local environment serves.
LOCAL_ENV_KEYS = frozenset({"bookings"})

Provider = Literal["auto", "mcp", "platform", "local"]


class FleetToolCallHarness:
    """Fleet tool-call harness: tools over MCP, ``<tool_call>`` format, verifier reward.

    Options (``-H name=value``):

    - ``provider``: ``auto``, ``mcp``, ``platform`` or ``local`` (see the module doc).
    - ``mcp_url`` / ``mcp_command``: an MCP server by URL, or a stdio command.
    - ``seed_db`` / ``current_db``: the server's SQLite databases, for verifiers
      (with ``mcp_command``, ``seed_db`` is copied per rollout instead).
    - ``max_turns``: policy responses per rollout (``RunContext.limits.max_turns`` wins).
    - ``partial_reward``: score from the verifier's success/error accumulators.
    - ``ttl_seconds``: lifetime of a Fleet platform environment.
    - ``fleet_api_key``: the Fleet API key (default: ``FLEET_API_KEY``); giving
      it selects the platform under ``provider=auto``. Never printed or stored.
    - ``verifier_sandbox``: the sandbox kind verifiers run in (``local``: bubblewrap).
    - ``tool_timeout`` / ``verifier_timeout``: seconds.
    - ``request_timeout``: seconds one model call may take, start to end.
    - ``model`` / ``base_url``: override the run context's model endpoint.
    - ``token_ids``: ask the server for token ids and logprobs (vLLM's
      ``return_token_ids`` and ``logprobs``). Token data a server returns is
      recorded either way (``raw["prompt_token_ids"]``,
      ``completion_token_ids``, ``completion_mask``, ``completion_logprobs``).
    """

    name = "fleet-tool-call"
    description = "Fleet tool-call loop over MCP (<tool_call> JSON, <done>); verifier reward."
    #: It calls the run's model: the preflight checks the endpoint and the API key.
    uses_model = True

    def __init__(
        self,
        provider: Provider = "auto",
        mcp_url: str | None = None,
        mcp_command: str | list[str] | None = None,
        seed_db: str | None = None,
        current_db: str | None = None,
        max_turns: int = 50,
        partial_reward: bool = False,
        ttl_seconds: int = 600,
        verifier_sandbox: str = "local",
        tool_timeout: float = 60.0,
        verifier_timeout: float = 60.0,
        model: str | None = None,
        base_url: str | None = None,
        request_timeout: float = 600.0,
        fleet_api_key: str | None = None,
        token_ids: bool = False,
    ) -> None:
        if provider not in ("auto", "mcp", "platform", "local"):
            raise HarnessError(f"fleet-tool-call: unknown provider {provider!r}")
        if mcp_url and mcp_command:
            raise HarnessError("fleet-tool-call: give mcp_url or mcp_command, not both")
        if max_turns < 1:
            raise HarnessError("fleet-tool-call: max_turns must be at least 1")
        self.provider = provider
        self.mcp_url = mcp_url
        self.mcp_command = shlex.split(mcp_command) if isinstance(mcp_command, str) else mcp_command
        self.seed_db = seed_db
        self.current_db = current_db
        self.max_turns = max_turns
        self.partial_reward = partial_reward
        self.ttl_seconds = ttl_seconds
        self.verifier_sandbox = verifier_sandbox
        self.tool_timeout = tool_timeout
        self.verifier_timeout = verifier_timeout
        self.model = model
        self.base_url = base_url
        self.request_timeout = request_timeout
        self._fleet_api_key = fleet_api_key
        self.token_ids = token_ids
        # the model endpoint's connections, per event loop, shared by every rollout
        self._connections = ConnectionCache()

    def _api_key(self) -> str | None:
        return self._fleet_api_key or os.environ.get("FLEET_API_KEY") or None

    async def preflight(self, context: RunContext) -> None:
        """Before a run: the MCP command is installed, the platform key is set."""
        if self.mcp_command and shutil.which(self.mcp_command[0]) is None:
            raise HarnessError(
                f"fleet-tool-call: the MCP command {self.mcp_command[0]!r} (-H mcp_command) "
                "is not installed or not on PATH"
            )
        if self.provider == "platform" and not self._api_key():
            raise HarnessError(
                "fleet-tool-call: provider 'platform' needs FLEET_API_KEY (or -H fleet_api_key=...)"
            )
        if self.provider in ("auto", "local") and not (self.mcp_url or self.mcp_command):
            # start the warm bookings process now, so no rollout waits for it
            await asyncio.to_thread(warm_socket)

    async def aclose(self) -> None:
        """Close the model endpoint's connections opened on the running event loop."""
        await self._connections.aclose()

    def __repr__(self) -> str:
        return f"FleetToolCallHarness(provider={self.provider!r}, max_turns={self.max_turns})"

    # -- environments --------------------------------------------------------

    def _sandbox_opener(self, context: RunContext) -> Any:
        def open_sandbox(root: Path, hints: ExecutionHints) -> Sandbox:
            factory = registry.resolve_sandbox(self.verifier_sandbox)
            rollout = context.rollout_id or "fleet-verifier"
            sandbox: Sandbox = factory(root=root, hints=hints, rollout_id=rollout)
            return sandbox

        return open_sandbox

    def _choose(self, record: FleetRecord) -> Provider:
        provider, problem = self._provider_for(record)
        if provider is None:
            raise HarnessError(f"fleet-tool-call: task {record.task_key!r}: {problem}")
        return provider

    def _provider_for(self, record: FleetRecord) -> tuple[Provider | None, str | None]:
        """The environment provider of ``record``, or None and why no environment serves it."""
        local = ", ".join(sorted(LOCAL_ENV_KEYS))
        provider = self.provider
        if provider == "auto":
            if self.mcp_url or self.mcp_command:
                provider = "mcp"
            elif self._api_key():
                provider = "platform"
            elif record.env_key in LOCAL_ENV_KEYS:
                provider = "local"
            else:
                named = f"env_key {record.env_key!r}" if record.env_key else "no env_key"
                return None, (
                    f"no Fleet environment serves the task (it has {named}): set FLEET_API_KEY "
                    "for the Fleet platform, give -H mcp_url=URL or -H mcp_command=CMD, or run "
                    f"tasks whose env_key the bundled local environment serves ({local})"
                )
        if provider == "mcp" and not (self.mcp_url or self.mcp_command):
            return None, (
                "provider 'mcp' needs mcp_url or mcp_command (-H mcp_url=URL or -H mcp_command=CMD)"
            )
        if provider == "platform" and not record.env_key:
            return None, (
                "the task has no env_key, which the Fleet platform needs to create its environment"
            )
        if provider == "local" and record.env_key not in LOCAL_ENV_KEYS:
            return None, (
                f"provider 'local' serves only the env_key {local}, and the task's env_key is "
                f"{record.env_key!r}"
            )
        return provider, None

    def make_environment(
        self, task: Task | FleetRecord, context: RunContext | None = None
    ) -> ToolEnvironment:
        """The environment one rollout of ``task`` uses (not started yet)."""
        context = context or RunContext()
        record = task if isinstance(task, FleetRecord) else record_of(task)
        provider = self._choose(record)
        common: dict[str, Any] = {
            "sandbox": context.sandbox,
            "open_sandbox": self._sandbox_opener(context),
            "tool_timeout": self.tool_timeout,
            "verifier_timeout": self.verifier_timeout,
        }
        if provider == "platform":
            api_key = self._api_key()
            if not api_key:
                raise HarnessError(
                    "fleet-tool-call: provider 'platform' needs FLEET_API_KEY "
                    "(or -H fleet_api_key=...)"
                )
            return PlatformEnvironment(
                record,
                api_key=api_key,
                base_url=os.environ.get("FLEET_BASE_URL") or None,
                ttl_seconds=self.ttl_seconds,
                tool_timeout=self.tool_timeout,
                verifier_timeout=int(self.verifier_timeout),
            )
        if provider == "local":
            return LocalBookingsEnvironment(**common)
        if self.mcp_url:
            return McpEnvironment(
                url=self.mcp_url, seed_db=self.seed_db, current_db=self.current_db, **common
            )
        if self.mcp_command:
            return _CommandEnvironment(self.mcp_command, self.seed_db, self.current_db, common)
        raise HarnessError("fleet-tool-call: provider 'mcp' needs mcp_url or mcp_command")

    # -- the run ---------------------------------------------------------------

    def supports(self, task: Task) -> bool:
        """Tool-use tasks with a prompt (computer and browser use need screenshots) that an
        environment serves (see :meth:`unsupported_reason`)."""
        return self.unsupported_reason(task) is None

    def unsupported_reason(self, task: Task) -> str | None:
        """Why this harness cannot run ``task`` (None: it can): not a text prompt, not a
        tool-use task, or no environment for it with these options (the task's env_key
        names none the chosen provider serves, and no MCP server is given)."""
        if not isinstance(task.input, str):
            return "the task's input is not a text prompt"
        modality = task.metadata.get("task_modality", "tool_use")
        if modality not in ("tool_use", None):
            return (
                f"the task is a {modality} task, and fleet-tool-call runs tool_use tasks "
                "(computer and browser use need screenshots)"
            )
        return self._provider_for(record_of(task))[1]

    def episode(
        self,
        task: Task,
        context: RunContext | None = None,
        on_event: EventCallback | None = None,
    ) -> FleetToolCallEpisode:
        """A fresh, not yet started episode of ``task`` (agentkit's step protocol).

        The environment comes from :meth:`make_environment`; ``max_turns`` is
        ``context.limits.max_turns`` or the harness option; events go to
        ``on_event``. ``run`` drives this same episode with the run's model;
        a training stack (the SkyRL bridge) drives it with its own policy.
        Raises :class:`~agentkit.HarnessError` when no environment fits the task.
        """
        task.require_payload()
        context = context or RunContext()
        environment = self.make_environment(task, context)
        return FleetToolCallEpisode(
            task,
            environment,
            max_turns=context.limits.max_turns or self.max_turns,
            partial_reward=self.partial_reward,
            recorder=EventRecorder(task.task_id, context.rollout_id, on_event),
        )

    async def run(
        self,
        task: Task,
        context: RunContext | None = None,
        on_event: EventCallback | None = None,
    ) -> HarnessResult:
        """Run one rollout: environment, loop with the model, verifier, close."""
        task.require_payload()
        context = context or RunContext()
        model = self.model or context.model
        base_url = self.base_url or context.base_url
        max_turns = context.limits.max_turns or self.max_turns
        usage = Usage()
        finish_reasons: list[str | None] = []
        tokens = TokenTrace()
        extra_raw: dict[str, Any] = {}
        started = time.monotonic()
        setup_error = "no model: set RunContext.model (--model) or -H model"
        episode: FleetToolCallEpisode | None = None
        if model:
            try:
                episode = self.episode(task, context, on_event)
            except HarnessError as exc:
                setup_error = str(exc)
        recorder = (
            episode.recorder
            if episode is not None
            else EventRecorder(task.task_id, context.rollout_id, on_event)
        )
        await recorder.emit("harness.start", harness=self.name, model=model, max_turns=max_turns)
        if episode is None or not model:
            return self._result(
                "failed", None, recorder, usage, error=setup_error, error_kind="harness_setup"
            )
        status: Any = "completed"
        error: str | None = None
        error_kind: str | None = None
        try:
            async with asyncio.timeout(context.limits.timeout_sec):
                try:
                    await episode.init()
                except (McpConnectionError, EnvironmentError_) as exc:
                    status, error, error_kind = "failed", str(exc), "environment_start"
                except Exception as exc:  # a provider's own error: still a failed start
                    status, error, error_kind = (
                        "failed",
                        f"starting the environment failed: {type(exc).__name__}: {exc}",
                        "environment_start",
                    )
                else:
                    usage, status, error, error_kind = await self._loop(
                        episode, context, model, base_url, usage, finish_reasons, tokens, extra_raw
                    )
        except TimeoutError:
            status, error, error_kind = (
                "timeout",
                f"the rollout took longer than {context.limits.timeout_sec:g}s",
                "timeout",
            )
        finally:
            await asyncio.shield(episode.close())
        if status == "completed" and episode.failure is not None:
            status, error, error_kind = "failed", episode.failure, "verifier"
        if error is not None:
            await recorder.emit("error", kind=error_kind, message=error)
        return self._result(
            status,
            episode,
            recorder,
            usage,
            error=error,
            error_kind=error_kind,
            elapsed=time.monotonic() - started,
            finish_reasons=finish_reasons,
            tokens=tokens,
            extra_raw=extra_raw,
        )

    async def _loop(
        self,
        episode: FleetToolCallEpisode,
        context: RunContext,
        model: str,
        base_url: str | None,
        usage: Usage,
        finish_reasons: list[str | None],
        tokens: TokenTrace,
        extra_raw: dict[str, Any],
    ) -> tuple[Usage, Any, str | None, str | None]:
        """Model call, ``episode.step``, until done; appends each call's finish reason
        and token data.

        Before each call the rollout's token, cost and message limits are
        checked; one that is reached ends the rollout (status ``timeout``).
        ``request_timeout`` bounds each model call from start to end; a server's
        ``Retry-After`` goes to ``extra_raw["retry_after"]`` for the runner's backoff.
        """
        recorder = episode.recorder
        try:
            # the policy sees its tools in the system prompt, never as the API's tools
            client = ChatClient.for_run(
                context,
                model=model,
                base_url=base_url,
                token_ids=self.token_ids,
                request_timeout=self.request_timeout,
                # the policy's text is parsed whole (a cut call would be misread)
                max_reply_chars=None,
                connections=self._connections,
            )
        except ModelCallError as exc:
            return usage, "failed", str(exc), exc.kind
        while not episode.done:
            hit = context.limit_hit(usage, len(episode.chat_history))
            if hit is not None:
                return usage, "timeout", hit[1], hit[0]
            turn = episode.turns
            await recorder.emit(
                "model.request", turn=turn, model=model, n_messages=len(episode.chat_history)
            )
            try:
                response = await client.complete(episode.chat_history)
            except ModelCallError as exc:  # its message never holds the API key
                if exc.retry_after is not None:
                    extra_raw["retry_after"] = exc.retry_after
                return usage, "failed", str(exc), exc.kind
            tokens.add(
                response.prompt_token_ids,
                response.token_ids,
                response.logprobs,
                gap=response.token_gap,
            )
            content = response.content
            text = content if isinstance(content, str) else ""
            usage = usage + response.usage
            finish_reasons.append(response.finish_reason)
            await recorder.emit(
                "model.response",
                turn=turn,
                message={"role": "assistant", "content": text},
                reasoning=response.reasoning,
                finish_reason=response.finish_reason,
                usage={
                    "input_tokens": response.usage.input_tokens,
                    "output_tokens": response.usage.output_tokens,
                    "cached_tokens": response.usage.cached_tokens,
                    "reasoning_tokens": response.usage.reasoning_tokens,
                },
                latency_sec=round(response.duration_s, 6),
            )
            await episode.step(text)
        return usage, "completed", None, None

    def _result(
        self,
        status: Any,
        episode: FleetToolCallEpisode | None,
        recorder: EventRecorder,
        usage: Usage,
        *,
        error: str | None = None,
        error_kind: str | None = None,
        elapsed: float | None = None,
        finish_reasons: list[str | None] | None = None,
        tokens: TokenTrace | None = None,
        extra_raw: dict[str, Any] | None = None,
    ) -> HarnessResult:
        """The result; ``raw`` carries the episode's numbers and, per model call,
        ``finish_reasons`` with ``stop_reason`` the last one (read by the DAPO
        overlong filter in :mod:`agentkit.training`)."""
        reasons = list(finish_reasons or [])
        raw: dict[str, Any] = {
            "harness": self.name,
            "finish_reasons": reasons,
            "stop_reason": reasons[-1] if reasons else None,
        }
        messages: list[dict[str, Any]] = []
        output = None
        if episode is not None:
            messages = list(episode.chat_history)
            output = next(
                (m["content"] for m in reversed(messages) if m["role"] == "assistant"), None
            )
            raw.update(
                {
                    "reward": episode.reward,
                    "done_reason": episode.done_reason,
                    "turns": episode.turns,
                    "tool_calls": episode.tool_calls,
                    "tool_errors": episode.tool_errors,
                    "parse_errors": episode.parse_errors,
                    "task_key": episode.record.task_key,
                    "env_key": episode.record.env_key,
                    "verifier": episode.verifier.to_json() if episode.verifier else None,
                    "environment": episode.environment.describe(),
                }
            )
        if elapsed is not None:
            raw["elapsed_sec"] = round(elapsed, 3)
        if tokens is not None:
            raw.update(tokens.to_raw())
        raw.update(extra_raw or {})
        return HarnessResult(
            status=status,
            output=output,
            messages=messages,
            error=error,
            error_kind=error_kind,
            usage=usage,
            events=list(recorder.events),
            raw=raw,
        )

    # -- scoring -----------------------------------------------------------------

    def compile_rubric(self, taskset: Any) -> Rubric:
        """``reward`` (the verifier's score) and 0-weight turns, tool_calls, tool_errors."""
        return Rubric(
            [
                reward(
                    _verifier_reward,
                    name="reward",
                    weight=1.0,
                    description="the task's verifier score (Fleet's definition)",
                ),
                reward(
                    _metric("turns"),
                    name="turns",
                    weight=0.0,
                    description="policy responses in the rollout",
                ),
                reward(
                    _metric("tool_calls"),
                    name="tool_calls",
                    weight=0.0,
                    description="tool calls made",
                ),
                reward(
                    _metric("tool_errors"),
                    name="tool_errors",
                    weight=0.0,
                    description="tool calls that returned an error",
                ),
            ]
        )


def _verifier_reward(result: HarnessResult) -> float:
    """The verifier's score recorded by the harness (0 when the rollout failed)."""
    value = result.raw.get("reward", 0.0)
    return float(value) if isinstance(value, (int, float)) else 0.0


def _metric(key: str) -> Any:
    def metric(result: HarnessResult) -> float:
        value = result.raw.get(key, 0)
        return float(value) if isinstance(value, (int, float)) else 0.0

    metric.__name__ = key
    metric.__qualname__ = f"fleet_metric_{key}"
    return metric


def _expand(part: str, values: dict[str, str]) -> str:
    """``part`` with the ``{seed_db}``/``{current_db}``/``{workdir}`` placeholders
    replaced; any other braces (JSON, shell) stay as written."""
    for name, value in values.items():
        part = part.replace("{" + name + "}", value)
    return part


class _CommandEnvironment(McpEnvironment):
    """A stdio MCP server started by a command, on per-rollout copies of ``seed_db``."""

    def __init__(
        self,
        command: list[str],
        seed_db: str | None,
        current_db: str | None,
        common: dict[str, Any],
    ) -> None:
        self.workdir = Path(tempfile.mkdtemp(prefix="fleet-mcp-"))
        seed: Path | None = None
        current: Path | None = Path(current_db) if current_db else None
        if seed_db:
            seed = self.workdir / "seed.sqlite"
            shutil.copyfile(seed_db, seed)
            if current is None:
                current = self.workdir / "current.sqlite"
                shutil.copyfile(seed_db, current)
        values = {
            "seed_db": str(seed or ""),
            "current_db": str(current or ""),
            "workdir": str(self.workdir),
        }
        argv = [_expand(part, values) for part in command]
        super().__init__(command=argv, seed_db=seed, current_db=current, **common)

    async def close(self) -> None:
        try:
            await super().close()
        finally:
            shutil.rmtree(self.workdir, ignore_errors=True)
