"""The model-call record round-trips through the strict converter; the calls file keeps
any protocol's name."""

from __future__ import annotations

import json

import pytest

from agentkit import ValidationError
from agentkit._calls import ModelCall, parse_calls
from agentkit._convert import structure, unstructure
from agentkit._usage import Usage
from agentkit.rundir import RunDirError


def test_a_call_round_trips_through_json() -> None:
    call = ModelCall(
        rollout_id="t-1-r0",
        index=2,
        protocol="chat",
        path="/v1/chat/completions",
        stream=True,
        request={"messages": [{"role": "user", "content": "hi"}]},
        forwarded={"return_token_ids": True},
        status=200,
        response={"choices": [{"message": {"content": "ok"}}]},
        usage=Usage(input_tokens=3, output_tokens=1, requests=1),
        prompt_token_ids=[1, 2, 3],
        completion_token_ids=[4],
        completion_logprobs=[-0.5],
        token_source="server",
    )
    data = json.loads(json.dumps(unstructure(call)))
    assert structure(data, ModelCall) == call
    assert call.call_id == "t-1-r0:c2"
    assert call.has_tokens


@pytest.mark.parametrize(
    ("field", "value"),
    [("protocol", "Smoke Signals"), ("protocol", ""), ("upstream_protocol", "x" * 65)],
)
def test_a_protocol_no_name_is_refused_with_its_line_and_field(field: str, value: str) -> None:
    """A calls file keeps a plugin's own protocol (``smoke``: register_wire's); a value
    that is no protocol's name is refused, naming the line and the field."""
    line = {"rollout_id": "r", "index": 0, "protocol": "smoke", "upstream_protocol": "chat"}
    [call] = parse_calls(json.dumps(line).encode(), "calls.jsonl")
    assert (call.protocol, call.upstream_protocol) == ("smoke", "chat")
    with pytest.raises(RunDirError, match=rf"calls.jsonl: line 1.{field}: expected a protocol"):
        parse_calls(json.dumps({**line, field: value}).encode(), "calls.jsonl")
    with pytest.raises(ValidationError, match="protocol"):
        structure({"rollout_id": "r", "index": 0, "protocol": 7}, ModelCall)
