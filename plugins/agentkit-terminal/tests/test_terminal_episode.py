"""The terminal harness's episode driven step by step by the test (the caller samples):
real sandboxes (bubblewrap on the host's userland and on an image root, Docker),
the Harbor example tasks, and Harbor's verifier as the reward."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from agentkit_terminal import TerminalEpisode, TerminalHarness
from agentkit_terminal.prompt import NO_CALL_TEXT, SUBMITTED_TEXT, TOOLS, system_prompt
from terminal_helpers import (
    HOST,
    SOLUTIONS,
    harbor_task,
    harbor_taskset,
    hints_of,
    needs_bwrap,
    text_call,
)

import agentkit
from agentkit import (
    Episode,
    Event,
    HarnessError,
    Limits,
    RunContext,
    StepCapableHarness,
    StepOutput,
    Task,
    TaskReferenceError,
)
from agentkit.testing.conformance import episode_conformance_test
from agentkit.testing.sandbox_fixtures import requires_docker, requires_image_tool

pytestmark = [pytest.mark.anyio, needs_bwrap]

# the step protocol's checks, with the example's solution: the verifier gives 1.0
test_episode_conformance = episode_conformance_test(
    "terminal",
    task=harbor_task,
    taskset=harbor_taskset,
    options={"sandbox_options": HOST},
    actions=SOLUTIONS["hello-world"],
    expect_reward=1.0,
)

WRITE = text_call("shell", {"command": "printf 'Hello, world!\\n' > /app/hello.txt"})
SUBMIT = text_call("submit", {})


def open_episode(
    task: str = "hello-world",
    *,
    context: RunContext | None = None,
    events: list[Event] | None = None,
    **options: Any,
) -> TerminalEpisode:
    harness = TerminalHarness(**{"sandbox_options": HOST, **options})
    on_event = events.append if events is not None else None
    episode = agentkit.open_episode(
        harness, harbor_task(task), context, on_event, taskset=harbor_taskset()
    )
    assert isinstance(episode, TerminalEpisode)
    return episode


async def play(episode: TerminalEpisode, actions: list[str]) -> list[StepOutput]:
    outputs = []
    for action in actions:
        outputs.append(await episode.step(action))
        if outputs[-1].done:
            break
    return outputs


async def test_a_caller_steps_an_episode_to_the_verifiers_reward() -> None:
    events: list[Event] = []
    episode = open_episode(context=RunContext(rollout_id="ep-1"), events=events)
    assert isinstance(episode, Episode)
    history, metadata = await episode.init()
    try:
        assert history == [
            {
                "role": "system",
                "content": system_prompt(
                    "text",
                    workdir="/app",
                    max_turns=50,
                    command_timeout=60,
                    max_command_timeout=600,
                    output_limit=16384,
                ),
            },
            {"role": "user", "content": str(harbor_task().input)},
        ]
        assert metadata["workdir"] == "/app" and metadata["sandbox"] == "local"
        assert metadata["tools"] == TOOLS and metadata["action_format"] == "text"
        look = await episode.step("Let me look first.\n" + look_call())
        assert (look.done, look.reward) == (False, 0.0)
        # stdout and stderr in the order the command wrote them
        assert look.observations == [
            {
                "role": "user",
                "content": "<tool_response>\nExit code: 2\nOutput:\n/app\nls: cannot access "
                "'hello.txt': No such file or directory\nlooked\n</tool_response>",
            }
        ]
        [call] = look.metadata["calls"]
        assert call["call"] == {"name": "shell", "arguments": {"command": LOOK}}
        assert call["result"]["exit_code"] == 2 and look.metadata["turn"] == 1
        done = await episode.step(WRITE + "\n" + SUBMIT)
        assert (done.done, done.reward) == (True, 1.0)
        assert done.metadata["done_reason"] == "submitted"
        assert done.metadata["grading"]["rewards"]["core.reward"] == 1.0
        assert done.observations[0]["content"].endswith(
            f"<tool_response>\n{SUBMITTED_TEXT}\n</tool_response>"
        )
        # the state between steps is explicit
        assert (episode.turns, episode.tool_calls, episode.commands) == (2, 3, 2)
        assert episode.chat_history[2:] == [
            {"role": "assistant", "content": "Let me look first.\n" + look_call()},
            look.observations[0],
            {"role": "assistant", "content": WRITE + "\n" + SUBMIT},
            done.observations[0],
        ]
        with pytest.raises(HarnessError, match="the episode is over"):
            await episode.step(SUBMIT)
    finally:
        await episode.close()
    root = episode.sandbox.root  # type: ignore[union-attr]
    assert not root.exists()  # the episode opened its sandbox, and closed and removed it
    await episode.close()
    kinds = [e.type for e in events]
    assert kinds[0] == "terminal.start" and kinds[-1] == "terminal.closed"
    assert kinds.index("terminal.end") < kinds.index("terminal.grade.end")
    assert {e.rollout_id for e in events} == {"ep-1"}
    assert [e.seq for e in events] == list(range(len(events)))


LOOK = "pwd; ls hello.txt; status=$?; echo looked; exit $status"


def look_call() -> str:
    return text_call("shell", {"command": LOOK})


async def test_a_wrong_solution_gets_the_verifiers_0() -> None:
    episode = open_episode()
    await episode.init()
    try:
        wrong = text_call("shell", {"command": "echo Hello > /app/hello.txt"})
        outputs = await play(episode, [wrong, SUBMIT])
    finally:
        await episode.close()
    assert [o.reward for o in outputs] == [0.0, 0.0] and outputs[-1].done
    assert outputs[-1].metadata["grading"]["rewards"]["core.reward"] == 0.0


async def test_replies_that_cannot_be_read_are_told_the_format_and_counted() -> None:
    episode = open_episode(max_parse_errors=4)
    await episode.init()
    try:
        outputs = await play(
            episode,
            [
                "I would write the file.",
                "<tool_call>{'name': 'shell'}</tool_call>",
                '<tool_call>["shell", "ls"]</tool_call>',
                '<tool_call>{"name": "shell", "arguments": {"command": "true"}}',  # unclosed: read
                "<tool_call>" + "[" * 200 + "]" * 200 + "</tool_call>",
                WRITE,
            ],
        )
    finally:
        await episode.close()
    texts = [o.observations[0]["content"] for o in outputs]
    assert texts[0] == NO_CALL_TEXT
    assert texts[1].startswith("<tool_response>\nError: the <tool_call> block is not valid JSON")
    assert "holds a list, expected a JSON object" in texts[2]
    assert texts[3] == "<tool_response>\nExit code: 0\nOutput: (none)\n</tool_response>"
    assert "nested more than 100 levels deep" in texts[4]
    # the fourth error ends the episode (max_parse_errors), graded as it stands
    assert len(outputs) == 5 and outputs[-1].done
    assert outputs[-1].metadata["done_reason"] == "parse_errors"
    assert episode.parse_errors == 4 and outputs[-1].reward == 0.0
    assert outputs[-1].metadata["grading"]["rewards"]["harness.parse_errors"] == 4.0


async def test_max_turns_ends_the_episode_after_running_the_last_reply() -> None:
    context = RunContext(limits=Limits(max_turns=2))
    episode = open_episode(context=context)
    _, metadata = await episode.init()
    try:
        assert metadata["max_turns"] == 2
        outputs = await play(episode, [text_call("shell", {"command": "ls"}), WRITE, SUBMIT])
    finally:
        await episode.close()
    # the last reply's command ran before the end: the file is there, and graded
    assert len(outputs) == 2 and outputs[-1].done
    assert outputs[-1].metadata["done_reason"] == "max_turns" and outputs[-1].reward == 1.0


async def test_the_time_limit_bounds_a_command_and_ends_the_episode() -> None:
    # 5 s: room for the first call under load; the second runs until the time is up
    episode = open_episode(timeout=5)
    _, metadata = await episode.init()
    try:
        assert metadata["time_limit"] == 5
        slow = text_call("shell", {"command": "echo started; sleep 300", "timeout": 600})
        [out] = await play(episode, [WRITE + slow + WRITE])
    finally:
        await episode.close()
    # the command got what was left of the 5 s, not its 600; the call after it did not run
    assert out.done and out.metadata["done_reason"] == "timeout" and episode.time_up
    first, second, third = out.metadata["calls"]
    assert first["result"]["exit_code"] == 0
    assert second["result"]["timed_out"] and second["result"]["timeout"] <= 5
    assert third["not_run"] == "timeout"
    assert "Not run: the episode's time limit is reached." in out.observations[0]["content"]
    assert out.reward == 1.0  # graded as it stands: the first call wrote the file


async def test_calls_after_submit_do_not_run_and_finish_ends_early() -> None:
    episode = open_episode()
    await episode.init()
    try:
        [out] = await play(episode, [SUBMIT + WRITE])
        assert out.done and out.reward == 0.0  # the file was never written
        assert out.observations[0]["content"].endswith(
            "<tool_response>\nNot run: the task was already submitted.\n</tool_response>"
        )
        assert out.metadata["calls"][1]["not_run"] == "submitted"
    finally:
        await episode.close()

    episode = open_episode()
    await episode.init()
    try:
        await episode.step(WRITE)
        assert await episode.finish() == 1.0  # a caller that stops early gets the grade
        assert episode.done_reason == "stopped"
    finally:
        await episode.close()


async def test_a_sandbox_in_the_context_is_borrowed_not_closed(sandbox_factory: Any) -> None:
    task = harbor_task()
    sandbox = await sandbox_factory("local", hints=hints_of(task), image="host")
    episode = open_episode(context=RunContext(sandbox=sandbox))
    await episode.init()
    try:
        outputs = await play(episode, [WRITE, SUBMIT])
    finally:
        await episode.close()
    assert outputs[-1].reward == 1.0 and not episode.owns_sandbox
    assert (await sandbox.exec("cat /app/hello.txt")).stdout == "Hello, world!\n"


async def test_what_an_episode_refuses() -> None:
    harness = TerminalHarness()
    assert isinstance(harness, StepCapableHarness)
    with pytest.raises(HarnessError, match=r"needs the task's taskset \(taskset=\.\.\.\)"):
        harness.episode(harbor_task())
    with pytest.raises(TaskReferenceError):
        harness.episode(Task(task_id="harbor:hello-world"), taskset=harbor_taskset())
    chat = Task(task_id="x:y", input=[{"role": "user", "content": "hi"}])
    with pytest.raises(HarnessError, match="input is not a text prompt"):
        harness.episode(chat, taskset=harbor_taskset())
    episode = open_episode()
    with pytest.raises(HarnessError, match="needs init"):
        await episode.step(SUBMIT)
    await episode.close()


@requires_image_tool
async def test_an_episode_on_the_tasks_image_root(image_cache: Path) -> None:
    # the task's own image (debian), exported once, under bubblewrap
    episode = open_episode(sandbox_options={"image_cache": str(image_cache)})
    _, metadata = await episode.init()
    try:
        assert metadata["sandbox"] == "local"
        probe = await episode.step(
            text_call("shell", {"command": ". /etc/os-release && echo $ID; pwd"})
        )
        assert probe.observations[0]["content"] == (
            "<tool_response>\nExit code: 0\nOutput:\ndebian\n/app\n</tool_response>"
        )
        outputs = await play(episode, [WRITE, SUBMIT])
    finally:
        await episode.close()
    assert outputs[-1].reward == 1.0


@requires_docker
async def test_an_episode_in_a_docker_container() -> None:
    episode = open_episode(sandbox="docker", sandbox_options={})
    _, metadata = await episode.init()
    try:
        assert metadata["sandbox"] == "docker"
        probe = await episode.step(text_call("shell", {"command": "test -f /.dockerenv && pwd"}))
        assert probe.observations[0]["content"] == (
            "<tool_response>\nExit code: 0\nOutput:\n/app\n</tool_response>"
        )
        outputs = await play(episode, [WRITE, SUBMIT])
    finally:
        await episode.close()
    assert outputs[-1].reward == 1.0
