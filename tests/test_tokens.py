"""One definition of a call's token ids (agentkit._tokens), shared by the chat client, the
model proxy and the training exports: the same list-of-ids check everywhere, the same
reading of a server's token fields (vLLM's and SGLang's names), the same stitching of
calls into a sequence."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from _calls_runs import worked_example, write_calls
from hypothesis import given
from hypothesis import strategies as st

from agentkit._calls import ModelCall
from agentkit._tokens import int_list
from agentkit.chat import ChatClient, TokenTrace, response_tokens
from agentkit.proxy import ProxySettings, shared_proxy
from agentkit.testing.model_server import ScriptedModelServer
from agentkit.training import ExportError, sequences_of

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


NOT_IDS: list[Any] = [[1, True], [False], [1, 2.0], [1, "2"], [1, None], [[1]], (1, 2), "12"]


@pytest.mark.parametrize("value", NOT_IDS, ids=repr)
def test_token_ids_are_a_list_of_integers_for_every_reader(tmp_path: Path, value: Any) -> None:
    """JSON's true and false, a float, a string, null or a nested list is no token id:
    the chat client takes no ids from such a completion, and a calls file holding them
    is refused naming the file, the line and the field."""
    assert int_list([0, 7, 151_643]) == [0, 7, 151_643] and int_list([]) == []
    assert int_list(value) is None
    body = {"prompt_token_ids": value, "choices": [{"message": {}, "token_ids": value}]}
    assert response_tokens(body)[:2] == (None, None)
    if not isinstance(value, list):
        return  # a tuple or text cannot be written as a calls file's list
    path = write_calls(tmp_path, "r0", worked_example("r0"))
    lines = path.read_text().splitlines()
    bad = json.loads(lines[0])
    bad["completion_token_ids"] = value
    path.write_text("\n".join([json.dumps(bad), *lines[1:]]) + "\n")
    from agentkit.training._callfiles import read_calls

    with pytest.raises(
        ExportError, match=r"r0.jsonl: line 1.completion_token_ids: expected a list"
    ):
        read_calls(tmp_path, "r0", run_id=None)


async def test_the_chat_client_reads_sglangs_ids_as_the_proxy_records_them() -> None:
    """A whole completion from SGLang carries its ids on the choice (prompt_token_ids,
    response_token_ids): the chat client asking for token ids reads them there, as the
    proxy does, straight from the server and through the proxy alike."""
    reply = {"content": "done", "tool_calls": [{"name": "bash", "arguments": {"cmd": "ls"}}]}
    messages = [{"role": "user", "content": "list the files"}]
    async with ScriptedModelServer({"default": reply}, engine="sglang") as server:
        direct = ChatClient(server.base_url, model="m", token_ids=True)
        try:
            response = await direct.complete(messages)
        finally:
            await direct.aclose()
        [sent] = [r.sent for r in server.model_requests]
        assert response.prompt_token_ids == sent["prompt_token_ids"]
        assert response.token_ids == sent["completion_token_ids"]
        assert response.token_gap is None and response.logprobs is not None
        assert len(response.logprobs) == len(response.token_ids)
        async with shared_proxy() as proxy:
            route = proxy.open_route(
                rollout_id="r0", upstream=server.base_url, api_key="sk-test",
                settings=ProxySettings(token_ids=True),
            )  # fmt: skip
            through = ChatClient(route.base_url, model="m", api_key=route.key)
            try:
                await through.complete(messages)
            finally:
                await through.aclose()
            [call] = route.close()
        [_, again] = [r.sent for r in server.model_requests]
        assert call.prompt_token_ids == again["prompt_token_ids"] == sent["prompt_token_ids"]
        assert call.completion_token_ids == again["completion_token_ids"] == response.token_ids


TURN = st.tuples(
    st.lists(st.integers(0, 50), max_size=5),  # what the prompt adds (a tool result)
    st.lists(st.integers(0, 50), max_size=5),  # the sampled tokens
    st.booleans(),  # whether the server sent their logprobs
    st.booleans(),  # whether the next prompt rewrites an earlier token (a prefix break)
)


@given(st.lists(st.integers(0, 50), min_size=1, max_size=5), st.lists(TURN, max_size=6))
def test_a_harness_trace_and_training_export_stitch_the_same_sequence(
    first: list[int], turns: list[tuple[list[int], list[int], bool, bool]]
) -> None:
    """The same calls give the same sequence whether a harness's TokenTrace stitches them
    (HarnessResult.raw) or training export does (a recorded rollout's calls): one
    definition of a token sequence. A prompt that does not extend the last one is a note
    in the trace and a new sequence in the export."""
    trace = TokenTrace()
    calls: list[ModelCall] = []
    prompt = list(first)
    broke = False
    for index, (added, sampled, with_logprobs, rewrite) in enumerate(turns):
        logprobs = [-0.5] * len(sampled) if with_logprobs else None
        trace.add(list(prompt), list(sampled), logprobs)
        calls.append(
            ModelCall(
                rollout_id="r",
                index=index,
                protocol="chat",
                prompt_token_ids=list(prompt),
                completion_token_ids=list(sampled),
                completion_logprobs=logprobs,
                token_source="server",
            )
        )
        seen = prompt + sampled
        prompt = seen + added
        if rewrite and index + 1 < len(turns):  # the next prompt rewrites an earlier token
            prompt[len(seen) - 1] = 99  # no token the strategies draw
            broke = True
    raw = trace.to_raw()
    sequences = sequences_of(calls).sequences
    if not calls:
        assert raw == {} and sequences == ()
    elif broke:
        assert "does not extend" in raw["token_ids_note"] and len(sequences) > 1
    else:
        [sequence] = sequences
        assert raw["prompt_token_ids"] == sequence.prompt_token_ids
        assert raw["completion_token_ids"] == sequence.completion_token_ids
        assert raw["completion_mask"] == sequence.completion_mask
        assert raw.get("completion_logprobs") == sequence.completion_logprobs
