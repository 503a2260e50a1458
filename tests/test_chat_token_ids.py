"""Token ids and logprobs in the chat harness's results (vLLM's fields), and the
rules that turn a rollout's responses into one token-level record."""

from __future__ import annotations

import asyncio

import pytest

from agentkit import RunContext, Task
from agentkit.chat import TokenTrace, completion_ids_gap
from agentkit.harnesses.chat import ChatHarness
from agentkit.testing import tokens
from agentkit.testing.model_server import ScriptedModelServer

SCRIPT = {
    "rules": [
        {"match": {"turn": 0}, "reply": {"content": "four"}},
        {
            "match": {"turn": 1},
            "reply": {"content": "nine, and I could go on", "finish_reason": "length"},
        },
    ]
}
TASK = Task(
    task_id="qa:two",
    input=[
        {"role": "user", "content": "2+2?"},
        {"role": "user", "content": "3*3?"},
    ],
)


def run(harness: ChatHarness, server: ScriptedModelServer) -> dict[str, object]:
    result = asyncio.run(harness.run(TASK, RunContext(model="m", base_url=server.base_url)))
    assert result.status == "completed", result.error
    return result.raw


def test_the_chat_harness_records_token_ids_when_asked() -> None:
    with ScriptedModelServer(SCRIPT) as server:
        raw = run(ChatHarness(token_ids=True), server)
        body = server.chat_requests[0].body
        assert body["return_token_ids"] is True and body["logprobs"] is True
        ids, mask = raw["completion_token_ids"], raw["completion_mask"]
        assert isinstance(ids, list) and isinstance(mask, list)
        assert tokens.decode(raw["prompt_token_ids"]) == "<|user|>2+2?\n<|assistant|>"  # type: ignore[arg-type]
        # both replies (mask 1) and, between them, what the second prompt added (mask 0);
        # the first ended its turn (its last token the end-of-turn marker), the second
        # was cut at its length limit
        first = tokens.encode("four") + tokens.encode(tokens.END_OF_TURN)
        second = tokens.encode("nine, and I could go on")
        assert ids[: len(first)] == first and ids[-len(second) :] == second
        assert mask == [1] * len(first) + [0] * (len(ids) - len(first) - len(second)) + [1] * len(
            second
        )
        assert tokens.decode(ids[len(first) : -len(second)]) == "\n<|user|>3*3?\n<|assistant|>"
        logprobs = raw["completion_logprobs"]
        assert isinstance(logprobs, list) and len(logprobs) == len(ids)
        assert [lp < 0 for lp in logprobs] == [m == 1 for m in mask]
        # streamed: the same record from the chunks' token fields
        streamed = run(ChatHarness(token_ids=True, stream=True), server)
        for key in ("prompt_token_ids", "completion_token_ids", "completion_mask"):
            assert streamed[key] == raw[key], key
        # not asked, and the server returns nothing: no token fields, no note
        server.clear_requests()
        raw = run(ChatHarness(), server)
        assert "return_token_ids" not in server.chat_requests[0].body
        assert not {k for k in raw if "token" in k}


def test_token_trace_stitches_turns_and_refuses_what_does_not_line_up() -> None:
    trace = TokenTrace()
    trace.add([1, 2], [3, 9], [-0.5, -0.1])
    trace.add([1, 2, 3, 9, 7, 7], [4, 9], [-0.2, -0.3])
    assert trace.to_raw() == {
        "prompt_token_ids": [1, 2],
        "completion_token_ids": [3, 9, 7, 7, 4, 9],
        "completion_mask": [1, 1, 0, 0, 1, 1],
        "completion_logprobs": [-0.5, -0.1, 0.0, 0.0, -0.2, -0.3],
    }
    no_logprobs = TokenTrace()
    no_logprobs.add([1], [2])
    assert "completion_logprobs" not in no_logprobs.to_raw()
    rewritten = TokenTrace()
    rewritten.add([1, 2], [3])
    rewritten.add([1, 5, 3, 7], [4])  # the template changed an earlier turn
    assert rewritten.to_raw() == {
        "token_ids_note": "the prompt of model call 2 does not extend the previous prompt "
        "and response: no token-level data"
    }
    partial = TokenTrace()
    partial.add([1], [2])
    partial.add(None, None)
    assert "model call 2 returned no prompt" in partial.to_raw()["token_ids_note"]
    assert TokenTrace().to_raw() == {}


#: Turn 0's reply loses the ids of its second streamed chunk (or piece of a whole
#: completion), as vLLM's tool parsers lost chunks: the text arrives, the usage counts
#: every token, the ids and logprobs of that piece are missing.
GAP_SCRIPT = {
    "rules": [
        {"match": {"turn": 0}, "reply": {"content": "four, and so on", "chunk_size": 4,
                                         "drop_token_chunks": [1]}},
        {"match": {"turn": 1}, "reply": {"content": "nine"}},
    ]
}  # fmt: skip


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_a_completion_missing_token_ids_is_not_recorded_as_exact(stream: bool) -> None:
    """Ids fewer than ``usage.completion_tokens``: the response says so
    (``token_gap``) and the rollout records no token-level data, with a note saying
    which call and what differs, rather than ids with a hole in them."""
    with ScriptedModelServer(GAP_SCRIPT) as server:
        harness = ChatHarness(token_ids=True, stream=stream)
        result = asyncio.run(harness.run(TASK, RunContext(model="m", base_url=server.base_url)))
        assert result.status == "completed", result.error
        sampled = server.chat_requests[0].sent["completion_token_ids"]
        # the model sampled all 6 tokens (the text's 4, the end of its turn's 2)
        assert sampled == tokens.encode("four, and so on") + tokens.encode(tokens.END_OF_TURN)
    raw = result.raw
    assert not {"prompt_token_ids", "completion_token_ids", "completion_mask"} & set(raw)
    assert raw["token_ids_note"] == (
        "model call 1: the completion's token ids are not all there: 5 ids, but "
        "usage.completion_tokens is 6 (the server lost some, as vLLM's tool parsers did "
        "with streamed chunks): no token-level data"
    )


def test_a_response_whose_ids_disagree_with_its_logprobs_has_a_gap() -> None:
    """What the answer says about its ids, one check at a time."""
    ids = [5, 6, 7]
    assert completion_ids_gap(ids, completion_tokens=3) is None
    assert completion_ids_gap(ids, completion_tokens=None) is None  # nothing to compare
    assert completion_ids_gap(ids, completion_tokens="3") is None  # not a count
    assert "3 ids, but usage.completion_tokens is 4" in (
        completion_ids_gap(ids, completion_tokens=4) or ""
    )
    entries = [{"token": t, "logprob": -0.1} for t in ("a", "b")]
    assert "3 ids, but 2 logprobs" in (completion_ids_gap(ids, logprobs=entries) or "")
    named = [{"token": f"token_id:{i}", "logprob": -0.1} for i in (5, 6, 7)]
    assert completion_ids_gap(ids, completion_tokens=3, logprobs=named) is None
    named[1]["token"] = "token_id:8"
    assert completion_ids_gap(ids, logprobs=named) == (
        "the completion's token ids are not the sampled ones: id 1 is 6, but its logprob "
        "names token_id:8"
    )
    # TokenTrace.add_response reads the same from a completion body
    trace = TokenTrace()
    body = {"prompt_token_ids": [1], "usage": {"completion_tokens": 4},
            "choices": [{"token_ids": ids, "message": {}}]}  # fmt: skip
    trace.add_response(body)
    assert trace.to_raw()["token_ids_note"].startswith("model call 1: the completion's token ids")
    whole = TokenTrace()
    whole.add_response({**body, "usage": {"completion_tokens": 3}})
    assert whole.to_raw()["completion_token_ids"] == ids
