"""Parsing the policy's action text, as Fleet's SkyRL environment parses it
(SkyRL 55a822642 skyrl-train/integrations/fleet/env.py:73-97 and 273)."""

from __future__ import annotations

from agentkit_fleet.mcp_client import tool_result_value
from agentkit_fleet.parsing import parse_action
from agentkit_fleet.prompt import to_openai_tools


def test_first_tool_call_is_taken() -> None:
    # env.py:85: re.search finds the first block
    p = parse_action(
        'thinking <tool_call>{"name": "a", "arguments": {"x": 1}}</tool_call>'
        '<tool_call>{"name": "b", "arguments": {}}</tool_call>'
    )
    assert p.tool_call is not None and p.tool_call.name == "a" and p.tool_call.arguments == {"x": 1}


def test_function_call_tag_tool_and_params_keys() -> None:
    # env.py:84, 90-91
    p = parse_action('<function_call>{"tool": "t", "params": {"k": "v"}}</function_call>')
    assert p.tool_call is not None and (p.tool_call.name, p.tool_call.arguments) == (
        "t",
        {"k": "v"},
    )


def test_tool_call_wins_over_function_call_and_a_nameless_block_falls_through() -> None:
    both = '<function_call>{"name": "f"}</function_call><tool_call>{"name": "t"}</tool_call>'
    assert parse_action(both).tool_call.name == "t"  # type: ignore[union-attr]
    nameless = (
        '<tool_call>{"arguments": {}}</tool_call><function_call>{"name": "f"}</function_call>'
    )
    p = parse_action(nameless)
    assert p.tool_call is not None and p.tool_call.name == "f"


def test_missing_closing_tags_and_other_cases_give_no_call() -> None:
    # env.py:85: lower-case tags with their closing tag only
    for text in (
        '<tool_call>{"name": "t", "arguments": {"a": [1, 2]}}',
        '<tool_call>{"name": "t", "arguments": {}}<|im_end|>',
        '<TOOL_CALL>{"name": "t", "arguments": {"a": 1}}</TOOL_CALL>',
        '<Tool_Call>{"name": "t"}</Tool_Call>',
    ):
        p = parse_action(text)
        assert p.tool_call is None and p.error is None, text


def test_invalid_json_is_no_call_and_counts_as_malformed() -> None:
    # env.py:94-95: JSONDecodeError is swallowed
    p = parse_action('<tool_call>{"name": "t", "arguments": {oops}}</tool_call>')
    assert p.tool_call is None and p.error is None and p.malformed
    assert not p.agent_done


def test_arguments_are_kept_as_written() -> None:
    # env.py:91: "arguments" or "params" as given, whatever their type
    p = parse_action('<tool_call>{"name": "t", "arguments": "{\\"a\\": 1}"}</tool_call>')
    assert p.tool_call is not None and p.tool_call.arguments == '{"a": 1}'
    p = parse_action('<tool_call>{"name": "t", "arguments": {}, "params": [1]}</tool_call>')
    assert p.tool_call is not None and p.tool_call.arguments == [1]
    p = parse_action('<tool_call>{"name": "t"}</tool_call>')
    assert p.tool_call is not None and p.tool_call.arguments == {}


def test_a_block_that_is_not_an_object_is_a_clear_error() -> None:
    # upstream raises AttributeError here (env.py:90); agentkit reports it
    for body, kind in (("[1]", "array"), ('"t"', "string"), ("7", "number"), ("null", "null")):
        p = parse_action(f"<tool_call>{body}</tool_call>")
        assert p.tool_call is None and p.malformed
        assert p.error == f"a tool call must be a JSON object with a name, got a JSON {kind}"


def test_a_block_nested_too_deep_is_a_clear_error_of_ours() -> None:
    # upstream raises RecursionError at 200,000 levels and parses 150; both are refused
    for depth in (150, 200_000):
        args = '{"a":' * depth + "1" + "}" * depth
        p = parse_action(f'<tool_call>{{"name": "t", "arguments": {args}}}</tool_call>')
        assert p.tool_call is None and p.malformed
        assert p.error == (
            "the tool call's JSON cannot be read: it is nested more than 100 levels deep "
            "(MAX_NESTING_DEPTH)"
        )


def test_a_tool_result_nested_too_deep_is_kept_as_text() -> None:
    for depth in (150, 200_000):
        text = "[" * depth + "]" * depth
        assert tool_result_value({"content": [{"type": "text", "text": text}]}) == text
    assert tool_result_value({"content": [{"type": "text", "text": "[[1]]"}]}) == [[1]]


def test_done_signals_and_their_precedence() -> None:
    # env.py:273
    assert parse_action("All booked. <done>").agent_done
    assert parse_action("finished [DONE]").agent_done
    assert parse_action("<DONE>").agent_done
    call_and_done = parse_action('<tool_call>{"name": "t", "arguments": {}}</tool_call> <done>')
    assert call_and_done.tool_call is not None and call_and_done.agent_done
    nothing = parse_action("I think we should book it.")
    assert nothing.tool_call is None and nothing.error is None and not nothing.done_signal


def test_tool_use_tasks_drop_the_computer_tool() -> None:
    mcp_tools = [
        {"name": "computer", "description": "screen", "inputSchema": {"type": "object"}},
        {"name": "search", "description": "find", "inputSchema": {"type": "object"}},
    ]
    assert [t["function"]["name"] for t in to_openai_tools(mcp_tools, "tool_use")] == ["search"]
    assert len(to_openai_tools(mcp_tools, "computer_use")) == 2
