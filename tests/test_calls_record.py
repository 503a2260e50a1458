"""The model-call record round-trips through the strict converter."""

from __future__ import annotations

import json

import pytest

from agentkit import ValidationError
from agentkit._calls import ModelCall
from agentkit._convert import structure, unstructure
from agentkit._usage import Usage


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


def test_an_unknown_protocol_is_refused_with_its_path() -> None:
    with pytest.raises(ValidationError, match="protocol"):
        structure({"rollout_id": "r", "index": 0, "protocol": "smoke"}, ModelCall)
