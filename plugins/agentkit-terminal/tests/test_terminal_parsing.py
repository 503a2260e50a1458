"""Reading the policy's calls (text and native), and capping a command's output."""

from __future__ import annotations

import json

import pytest
from agentkit_terminal.output import CommandResult, cap_output, omitted_marker, result_text
from agentkit_terminal.parsing import ToolCall, parse_message, parse_text


def test_every_tool_call_block_is_read_in_order() -> None:
    text = (
        "Look, then write.\n"
        '<tool_call>{"name": "shell", "arguments": {"command": "ls", "timeout": 5}}</tool_call>\n'
        '<tool_call>\n```json\n{"name": "shell", "arguments": "{\\"command\\": \\"pwd\\"}"}\n```\n'
        "</tool_call>"
        '<tool_call>{"name": "submit"}'  # the last block may lack its closing tag
    )
    calls = [a.call for a in parse_text(text)]
    assert calls == [
        ToolCall("shell", command="ls", timeout=5.0),
        ToolCall("shell", command="pwd"),
        ToolCall("submit"),
    ]
    assert parse_text("no call here, only <tool_response> talk") == []


@pytest.mark.parametrize(
    ("block", "error"),
    [
        ("", "the <tool_call> block is empty"),
        ("{name: shell}", "the <tool_call> block is not valid JSON (Expecting property name"),
        ('"shell"', "the <tool_call> block holds a string, expected a JSON object"),
        ('{"arguments": {"command": "ls"}}', 'the tool call has no "name"'),
        ('{"name": "bash", "arguments": {"command": "ls"}}', "unknown tool 'bash'; the tools"),
        ('{"name": "shell", "arguments": {}}', 'shell needs "command", a non-empty string'),
        ('{"name": "shell", "arguments": {"command": "  "}}', 'shell needs "command"'),
        ('{"name": "shell", "arguments": ["ls"]}', "the arguments of shell: expected a JSON obj"),
        ('{"name": "shell", "arguments": "ls -la"}', "the arguments of shell: not valid JSON"),
        (
            '{"name": "shell", "arguments": {"command": "ls", "timeout": -1}}',
            'shell\'s "timeout" must be a positive number of seconds, got -1',
        ),
        (
            '{"name": "shell", "arguments": {"command": "ls", "timeout": true}}',
            'shell\'s "timeout" must be a positive number',
        ),
        ("[" * 101 + "]" * 101, "the <tool_call> block cannot be read: it is nested more than 100"),
    ],
)
def test_a_block_that_is_no_valid_call_says_why(block: str, error: str) -> None:
    [attempt] = parse_text(f"<tool_call>{block}</tool_call>")
    assert attempt.call is None
    assert attempt.error is not None and attempt.error.startswith(error), attempt.error


def test_native_tool_calls_are_read_with_their_ids() -> None:
    message = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "shell", "arguments": json.dumps({"command": "ls"})},
            },
            {"id": "call_2", "type": "function", "function": {"name": "submit", "arguments": ""}},
            {"id": "call_3", "type": "function", "function": {"name": "rm", "arguments": "{}"}},
            {"id": "call_4", "type": "function"},
        ],
    }
    attempts = parse_message(message)
    assert [a.id for a in attempts] == ["call_1", "call_2", "call_3", "call_4"]
    assert attempts[0].call == ToolCall("shell", command="ls", id="call_1")
    assert attempts[1].call == ToolCall("submit", id="call_2")
    assert attempts[2].error == "unknown tool 'rm'; the tools are shell and submit"
    assert attempts[3].error == "tool call 4 has no function"
    assert parse_message({"role": "assistant", "content": "just text"}) == []


def test_output_under_the_cap_is_kept_whole() -> None:
    assert cap_output("héllo\n", 7) == ("héllo\n", 0)  # 7 bytes in UTF-8


def test_output_over_the_cap_keeps_its_head_and_tail_bytes() -> None:
    text = "".join(f"line {i}\n" for i in range(1000))
    capped, omitted = cap_output(text, 100)
    data = text.encode()
    assert omitted == len(data) - 100
    assert capped == data[:50].decode() + omitted_marker(omitted) + data[-50:].decode()
    assert omitted_marker(7) == "\n[... 7 bytes of output omitted ...]\n"


def test_a_character_cut_at_the_edge_is_dropped_never_garbled() -> None:
    text = "é" * 100  # two bytes each
    capped, omitted = cap_output(text, 11)  # 5 bytes of head, 6 of tail
    head, _, tail = capped.partition(omitted_marker(omitted))
    assert head == "éé" and tail == "ééé" and omitted == 200 - 11


def test_the_result_text_of_a_command() -> None:
    done = CommandResult(exit_code=0, output="a\nb\n", timeout=60)
    assert result_text(done) == "Exit code: 0\nOutput:\na\nb"
    assert result_text(CommandResult(exit_code=3, output="")) == "Exit code: 3\nOutput: (none)"
    late = CommandResult(exit_code=None, output="half", timed_out=True, timeout=2.5)
    assert result_text(late) == "The command timed out after 2.5 s and was killed.\nOutput:\nhalf"
