"""JSON from model servers: the depth bound, usage counts of the wrong type, /models."""

from __future__ import annotations

import asyncio
import json

import pytest

from agentkit import RunContext, Usage, ValidationError
from agentkit._limits import MAX_NESTING_DEPTH, NestingError, loads_bounded
from agentkit.env._preflight import check_endpoint


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


@pytest.mark.parametrize("as_bytes", [False, True])
def test_the_depth_bound_holds_at_every_depth(as_bytes: bool) -> None:
    def load(text: str) -> object:
        return loads_bounded(text.encode() if as_bytes else text)

    assert load(nested(MAX_NESTING_DEPTH)) is not None  # exactly the bound: kept
    for depth in (MAX_NESTING_DEPTH + 1, 900, 200_000):  # under and over Python's own limit
        with pytest.raises(NestingError) as info:
            load(nested(depth))
        assert isinstance(info.value, ValueError)  # a malformed body, like bad JSON
        assert str(info.value) == "it is nested more than 100 levels deep (MAX_NESTING_DEPTH)"
    objects = '{"a":' * 101 + "1" + "}" * 101
    with pytest.raises(NestingError):
        load(objects)


def test_wide_documents_and_brackets_in_strings_are_not_deep() -> None:
    wide = json.dumps({"choices": [{"logprobs": [[{"t": i}] for i in range(5000)]}]})
    assert len(loads_bounded(wide)["choices"][0]["logprobs"]) == 5000
    text = json.dumps({"content": nested(100_000)})  # brackets inside a string
    assert loads_bounded(text)["content"] == nested(100_000)
    with pytest.raises(json.JSONDecodeError):
        loads_bounded("{not json")


def test_usage_counts_of_the_wrong_type_name_the_field() -> None:
    usage = Usage.from_openai(
        {
            "prompt_tokens": 12,
            "completion_tokens": 3.0,  # a whole number written as a float
            "prompt_tokens_details": {"cached_tokens": None},
            "completion_tokens_details": {"reasoning_tokens": 2},
        }
    )
    assert (usage.input_tokens, usage.output_tokens, usage.reasoning_tokens) == (12, 3, 2)
    assert Usage.from_openai(None) == Usage(requests=1)
    bad = [
        ({"prompt_tokens": "12"}, "usage.prompt_tokens: expected a whole number", "a string"),
        ({"completion_tokens": True}, "usage.completion_tokens", "a boolean (True)"),
        ({"completion_tokens": 1.5}, "usage.completion_tokens", "a number (1.5)"),
        ({"prompt_tokens": -1}, "usage.prompt_tokens", "an integer (-1)"),
        ("lots", "usage: expected an object or null", "a string"),
        ({"prompt_tokens_details": [1]}, "usage.prompt_tokens_details: expected an object", ""),
        (
            {"completion_tokens_details": {"reasoning_tokens": {}}},
            "usage.completion_tokens_details.reasoning_tokens",
            "an object",
        ),
    ]
    for value, field, got in bad:
        with pytest.raises(ValidationError) as info:
            Usage.from_openai(value)
        assert str(info.value).startswith(field) and got in str(info.value), info.value


@pytest.mark.anyio
async def test_a_models_listing_nested_too_deep_lists_nothing() -> None:
    """The preflight reads GET /models; a listing it cannot read is no listing, not a crash."""
    body = nested(200_000).encode()

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
            b"connection: close\r\ncontent-length: %d\r\n\r\n" % len(body) + body
        )
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    async with server:
        context = RunContext(model="m", base_url=f"http://127.0.0.1:{port}/v1")
        assert await check_endpoint(context) == (None, None)
