"""The Fleet tool-call loop, one step at a time (for training stacks that own the model).

:class:`FleetToolCallEpisode` implements agentkit's generic step protocol
(:class:`agentkit.Episode`) with the observable behaviour of Fleet's SkyRL
environment (SkyRL's ``FleetTaskEnv`` over OpenEnv's ``FleetTaskEnv``): the
same prompt, observations, rewards and step metadata for the same responses
and tool results. The parity table in ``docs/fleet.md`` lists every
deliberate difference. Get one from the harness, which picks the
environment, ``max_turns`` and ``partial_reward`` for it:

>>> episode = harness.episode(task, context)   # doctest: +SKIP
>>> chat_history, metadata = await episode.init()
>>> while not episode.done:
...     action = my_policy(episode.chat_history)  # the caller's model call
...     out = await episode.step(action)  # StepOutput(observations, reward, done, metadata)
>>> await episode.close()

``FleetToolCallHarness.run`` drives exactly this episode with the run's model.
:class:`StepOutput` is :class:`agentkit.StepOutput`, re-exported here.

:meth:`FleetToolCallEpisode.fork` branches an episode on the bundled local
app: each child gets copies of the app's databases and its own app server
(``docs/branching.md``); other environments refuse.
"""

from __future__ import annotations

import asyncio
import copy
import datetime as dt
import itertools
import json
import time
from collections.abc import Sequence
from typing import Any, Literal

from agentkit import EpisodeForkError, EventRecorder, HarnessError, StepOutput, Task
from agentkit_fleet.environments import EnvironmentError_, ToolEnvironment
from agentkit_fleet.mcp_client import McpConnectionError, McpToolCallError
from agentkit_fleet.parsing import ToolCall, parse_action
from agentkit_fleet.prompt import FORMAT_REMINDER, initial_messages, to_openai_tools
from agentkit_fleet.records import FleetRecord, record_of
from agentkit_fleet.verification import VerifierOutcome, score_outcome

__all__ = ["DONE_TEXT", "DoneReason", "FleetToolCallEpisode", "StepOutput", "observation_text"]

DoneReason = Literal["agent_done", "max_turns", "verifier_error"]

#: The observation after ``<done>`` when nothing else is to be shown.
DONE_TEXT = "Task marked as complete."


def observation_text(
    error: str | None, tool_result: Any, agent_done: bool, tool_call: ToolCall | None
) -> str:
    """The user message answering one response, worded as Fleet's SkyRL environment words it.

    The first that applies: an error (``Error: ...``); a tool result that is
    not empty (``Tool result:`` and the value: an object as JSON indented by
    2, anything else as Python's ``str``); ``<done>`` (``Task marked as
    complete.``); no call (the format reminder); else ``Action executed.``.
    """
    if error:
        return f"Error: {error}"
    if tool_result:
        if isinstance(tool_result, dict):
            return f"Tool result:\n{json.dumps(tool_result, indent=2)}"
        return f"Tool result:\n{tool_result}"
    if agent_done:
        return DONE_TEXT
    if tool_call is None:
        return FORMAT_REMINDER
    return "Action executed."


class FleetToolCallEpisode:
    """One rollout of a Fleet task: ``init()``, ``step(action)`` until done, ``close()``.

    An :class:`agentkit.Episode`. ``StepOutput.metadata`` has ``task_key``,
    ``turn``, ``tool_call``, ``tool_result`` (the parsed value), ``error``,
    ``done_reason``, ``step_time`` and ``mcp_time`` (seconds), plus
    ``verifier`` when the step ends the episode; the step that reaches
    ``max_turns`` has only ``done_reason`` (``max_turns``), ``task_key`` and
    ``verifier``. ``reward`` is 0 until the episode ends, then the
    verifier's score.

    The verifier runs when the policy says ``<done>``, and at ``max_turns``
    only when every response carried a call or the done signal (Fleet's
    environment counts only those as its steps); otherwise the reward is 0
    and ``verifier`` is None.
    """

    #: The harness, as :func:`agentkit.fork_episode` names it in errors.
    harness_name = "fleet-tool-call"

    def __init__(
        self,
        task: Task | FleetRecord,
        environment: ToolEnvironment,
        *,
        max_turns: int = 50,
        partial_reward: bool = False,
        recorder: EventRecorder | None = None,
        now: dt.datetime | None = None,
    ) -> None:
        self.record = task if isinstance(task, FleetRecord) else record_of(task)
        task_id = task.task_id if isinstance(task, Task) else f"fleet:{self.record.task_key}"
        self.environment = environment
        self.max_turns = max_turns
        self.partial_reward = partial_reward
        self.recorder = recorder or EventRecorder(task_id)
        self.now = now
        self.chat_history: list[dict[str, Any]] = []
        self.tools: list[dict[str, Any]] = []
        self.turns = 0
        self.tool_calls = 0
        self.tool_errors = 0
        self.parse_errors = 0
        #: Responses that carried a call or the done signal: the step count of
        #: OpenEnv's Fleet environment, which verifies when it reaches max_turns.
        self.env_steps = 0
        self.done = False
        self.done_reason: DoneReason | None = None
        self.reward = 0.0
        self.verifier: VerifierOutcome | None = None
        self.failure: str | None = None
        self._tool_names: set[str] = set()
        self._started = False
        self._closed = False
        self._branches = itertools.count()

    # -- lifecycle ---------------------------------------------------------

    async def init(self) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        """Create the environment, list its tools, build ``[system, user]``.

        Returns ``(chat_history, metadata)`` with metadata ``task_key``,
        ``env_key``, ``tools`` and ``modality``. Raises
        :class:`~agentkit_fleet.mcp_client.McpConnectionError` (or the
        provider's error) when the environment cannot start, and
        :class:`~agentkit.HarnessError` when it offers no tools; the
        environment is closed then.
        """
        if self._started:
            raise HarnessError("FleetToolCallEpisode.init() was already called")
        self._started = True
        try:
            mcp_tools = await self.environment.start()
            self.tools = to_openai_tools(mcp_tools, self.record.task_modality)
            if not self.tools:
                raise HarnessError(
                    f"Task {self.record.task_key}: no tools found in observation. "
                    "Fleet env requires tools."
                )
        except BaseException:
            await self.close()
            raise
        self._tool_names = {str(t.get("name")) for t in mcp_tools}
        self.chat_history = initial_messages(self.record.prompt, self.tools, now=self.now)
        await self.recorder.emit(
            "fleet.env.ready",
            environment=self.environment.describe(),
            tools=[t["function"]["name"] for t in self.tools],
        )
        return list(self.chat_history), self.metadata()

    def metadata(self) -> dict[str, Any]:
        """``task_key``, ``env_key``, ``tools``, ``modality``."""
        return {
            "task_key": self.record.task_key,
            "env_key": self.record.env_key,
            "tools": list(self.tools),
            "modality": self.record.task_modality,
        }

    async def close(self) -> None:
        """Close the environment (idempotent; always call it, also after a failure)."""
        if self._closed:
            return
        self._closed = True
        await self.environment.close()
        await self.recorder.emit("fleet.env.closed", environment=self.environment.describe())

    # -- forking -------------------------------------------------------------

    async def fork(
        self, n: int, *, rollout_ids: Sequence[str] | None = None
    ) -> list[FleetToolCallEpisode]:
        """``n`` episodes continuing from this one now (:class:`agentkit.ForkableEpisode`).

        Each child has a copy of the chat history, the tools, the turn and
        step counts and the counters, and its own fork of the environment:
        on the bundled local app, copies of its seed and current databases
        (SQLite's backup API) served by a child app server of its own, which
        the child closes. Rollout ids: ``rollout_ids[i]``, else this one's
        with ``.b<i>``. An MCP server by URL or command and the Fleet
        platform cannot copy their state: :class:`~agentkit.EpisodeForkError`
        says so, as it does before ``init()`` and after the end or close;
        nothing is left behind then.
        """
        rid = self.recorder.rollout_id or "fleet-episode"
        if not self._started or self._closed:
            state = "closed" if self._closed else "not started (call init() first)"
            raise EpisodeForkError(f"fleet-tool-call episode ({rid}) cannot fork: it is {state}")
        if self.done:
            raise EpisodeForkError(
                f"fleet-tool-call episode ({rid}) cannot fork: it is over ({self.done_reason}); "
                "fork before the step that ends it"
            )
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise EpisodeForkError(f"fleet-tool-call episode ({rid}): n must be a positive integer")
        ids = (
            list(rollout_ids)
            if rollout_ids is not None
            else [f"{rid}.b{next(self._branches)}" for _ in range(n)]
        )
        if len(ids) != n:
            raise EpisodeForkError(f"fleet-tool-call episode ({rid}): {len(ids)} ids for {n}")
        fork_env = getattr(self.environment, "fork", None)
        if not callable(fork_env):
            raise EpisodeForkError(
                f"fleet-tool-call episode ({rid}) cannot fork: its {self.environment.kind!r} "
                "environment has no fork()"
            )
        made = await asyncio.gather(*(fork_env() for _ in range(n)), return_exceptions=True)
        envs: list[ToolEnvironment] = [e for e in made if not isinstance(e, BaseException)]
        failed = next((e for e in made if isinstance(e, BaseException)), None)
        if failed is not None:
            for env in envs:
                await env.close()
            if isinstance(failed, EnvironmentError_ | OSError):
                raise EpisodeForkError(
                    f"fleet-tool-call episode ({rid}) cannot fork: {failed}"
                ) from None
            raise failed
        children = [self._child(env, child_id) for env, child_id in zip(envs, ids, strict=True)]
        await self.recorder.emit("fleet.fork", turn=self.turns, children=ids)
        for child in children:
            await child.recorder.emit(
                "fleet.forked",
                parent=rid,
                turn=self.turns,
                environment=child.environment.describe(),
            )
        return children

    def _child(self, environment: ToolEnvironment, rollout_id: str) -> FleetToolCallEpisode:
        child = FleetToolCallEpisode(
            self.record,
            environment,
            max_turns=self.max_turns,
            partial_reward=self.partial_reward,
            recorder=EventRecorder(self.recorder.task_id, rollout_id, self.recorder.on_event),
            now=self.now,
        )
        child.chat_history = copy.deepcopy(self.chat_history)
        child.tools = copy.deepcopy(self.tools)
        child.turns = self.turns
        child.tool_calls = self.tool_calls
        child.tool_errors = self.tool_errors
        child.parse_errors = self.parse_errors
        child.env_steps = self.env_steps
        child._tool_names = set(self._tool_names)
        child._started = True
        return child

    # -- stepping ------------------------------------------------------------

    async def step(self, action: str) -> StepOutput:
        """Apply the policy's response ``action``: run its call, end the episode on done."""
        if not self._started or self._closed:
            raise HarnessError("step() needs init() first and must not follow close()")
        if self.done:
            raise HarnessError(f"the episode is over ({self.done_reason}); start a new one")
        step_start = time.monotonic()
        self.turns += 1
        self.chat_history.append({"role": "assistant", "content": action})
        max_turns_reached = self.turns >= self.max_turns
        parsed = parse_action(action)
        agent_done = parsed.agent_done
        tool_call = parsed.tool_call
        tool_result: Any = None
        error = parsed.error
        mcp_time = 0.0
        if parsed.malformed:
            self.parse_errors += 1
            await self.recorder.emit(
                "fleet.parse_error", turn=self.turns, error=error or "no call in the call block"
            )

        if tool_call is not None or agent_done:
            self.env_steps += 1
            mcp_start = time.monotonic()
            if tool_call is not None:
                self.tool_calls += 1
                tool_result, error = await self._call(tool_call)
            if agent_done or self.env_steps >= self.max_turns:
                await self._finish("agent_done" if agent_done else "max_turns", action)
            mcp_time = time.monotonic() - mcp_start

        if max_turns_reached:
            if not self.done:  # some response had no call: the environment never finished
                self.done = True
                self.reward = 0.0
            if self.done_reason != "verifier_error":
                self.done_reason = "max_turns"
            return StepOutput(
                observations=[],
                reward=self.reward,
                done=True,
                metadata={
                    "done_reason": "max_turns",
                    "task_key": self.record.task_key,
                    "verifier": self.verifier.to_json() if self.verifier else None,
                },
            )

        content = observation_text(error, tool_result, agent_done, tool_call)
        observation = {"role": "user", "content": content}
        self.chat_history.append(observation)
        metadata: dict[str, Any] = {
            "task_key": self.record.task_key,
            "turn": self.turns,
            "tool_call": tool_call.to_json() if tool_call is not None else None,
            "tool_result": tool_result,
            "error": error,
            "done_reason": "agent_done" if agent_done else None,
            "step_time": time.monotonic() - step_start,
            "mcp_time": mcp_time,
        }
        if agent_done:
            metadata["verifier"] = self.verifier.to_json() if self.verifier else None
        return StepOutput(
            observations=[observation],
            reward=self.reward if agent_done else 0.0,
            done=agent_done,
            metadata=metadata,
        )

    async def _call(self, call: ToolCall) -> tuple[Any, str | None]:
        """Run one call; ``(tool_result, error)`` as Fleet's environment reports them.

        A call that cannot run (an unknown tool, arguments that are not an
        object, a protocol error, an unreachable server) gives the error, and
        ``{"error": <it>}`` as the result. A tool's own ``isError`` result is a
        result (``{"error": <its text>}``), not an error.
        """
        await self.recorder.emit(
            "tool.call", turn=self.turns, name=call.name, arguments=call.arguments
        )
        error: str | None = None
        value: Any
        try:
            name = await self._known_tool(call.name)
            if not isinstance(call.arguments, dict):
                raise McpToolCallError(
                    f"the arguments of tool {name!r} must be a JSON object, "
                    f"got {type(call.arguments).__name__}"
                )
            outcome = await self.environment.call_tool(name, call.arguments)
        except (McpConnectionError, McpToolCallError) as exc:
            error = str(exc)
            value = {"error": error}
            self.tool_errors += 1
        else:
            value = outcome.value or {}
            if outcome.is_error:
                self.tool_errors += 1
        await self.recorder.emit(
            "tool.result",
            turn=self.turns,
            name=call.name,
            is_error=isinstance(value, dict) and "error" in value,
            content=_preview(value),
        )
        return value, error

    async def _known_tool(self, name: Any) -> str:
        """``name`` when the server has that tool (listing the tools again when unsure)."""
        if isinstance(name, str) and name in self._tool_names:
            return name
        try:
            self._tool_names = {str(t.get("name")) for t in await self.environment.list_tools()}
        except McpConnectionError:
            pass
        if isinstance(name, str) and name in self._tool_names:
            return name
        raise McpToolCallError(f"Tool '{name}' not found on any active MCP endpoint.")

    async def finish(self, reason: DoneReason = "max_turns") -> float:
        """End the episode now (for a caller that stops early) and verify; returns the reward."""
        if not self.done:
            last = next(
                (m["content"] for m in reversed(self.chat_history) if m["role"] == "assistant"),
                None,
            )
            await self._finish(reason, last)
        return self.reward

    async def _finish(self, reason: DoneReason, final_answer: str | None) -> None:
        self.done = True
        self.done_reason = reason
        code = self.record.verifier_code
        if not code:
            self.verifier = VerifierOutcome(success=False, error="the task has no verifier_code")
        else:
            await self.recorder.emit("fleet.verifier.start", reason=reason)
            try:
                self.verifier = await self.environment.verify(code, final_answer)
            except Exception as exc:
                self.verifier = VerifierOutcome(
                    success=False, error=f"running the verifier failed: {type(exc).__name__}: {exc}"
                )
                self.failure = self.verifier.error
                self.done_reason = "verifier_error"
        self.reward = score_outcome(self.verifier, partial_reward=self.partial_reward)
        await self.recorder.emit(
            "fleet.verifier.end", reward=self.reward, verifier=self.verifier.to_json()
        )


def _preview(value: Any, limit: int = 20000) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    return text[:limit]
