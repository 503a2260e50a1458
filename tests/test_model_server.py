"""The scripted model server, driven over loopback by the real openai client."""

from __future__ import annotations

import asyncio
import json
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import anthropic
import anyio
import httpx
import openai
import pytest

from agentkit import ValidationError
from agentkit.testing.model_server import ScriptedModelServer
from agentkit.testing.script import RequestView, Script, load_script

USER = [{"role": "user", "content": "hello"}]


def client(server: ScriptedModelServer, **kw: Any) -> openai.OpenAI:
    return openai.OpenAI(
        base_url=server.base_url, api_key=kw.pop("api_key", "sk-test"), max_retries=0, **kw
    )


def claude(server: ScriptedModelServer, api_key: str) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=server.url, api_key=api_key, max_retries=0)


def raw_post(server: ScriptedModelServer, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(f"{server.base_url}/chat/completions", json=body, timeout=10)


def sse_events(text: str) -> list[str]:
    return [line[len("data: ") :] for line in text.splitlines() if line.startswith("data: ")]


def test_text_reply_usage_and_request_log(model_server: ScriptedModelServer) -> None:
    model_server.set_api_key("sk-test")
    model_server.set_script(
        {
            "default": {
                "content": "hi {{last_user}} at turn {{turn}} from {{model}}",
                "usage": {
                    "prompt_tokens": 11,
                    "completion_tokens": 7,
                    "cached_tokens": 5,
                    "reasoning_tokens": 3,
                },
            }
        }
    )
    assert model_server.base_url.endswith("/v1")
    reply = client(model_server).chat.completions.create(model="m1", messages=USER)
    assert reply.choices[0].message.content == "hi hello at turn 0 from m1"
    assert reply.choices[0].finish_reason == "stop"
    assert reply.object == "chat.completion"
    usage = reply.usage
    assert usage is not None
    assert (usage.prompt_tokens, usage.completion_tokens, usage.total_tokens) == (11, 7, 18)
    assert usage.prompt_tokens_details and usage.prompt_tokens_details.cached_tokens == 5
    assert usage.completion_tokens_details
    assert usage.completion_tokens_details.reasoning_tokens == 3

    (logged,) = model_server.requests
    assert (logged.method, logged.path) == ("POST", "/v1/chat/completions")
    assert logged.api_key_sent is True
    assert logged.headers["authorization"] == "[redacted]"
    assert "sk-test" not in json.dumps(logged.headers)
    assert logged.body == {"model": "m1", "messages": USER}
    assert logged.rule is None


def test_request_without_key_is_logged_as_such(model_server: ScriptedModelServer) -> None:
    raw_post(model_server, {"model": "m", "messages": USER}).raise_for_status()
    assert model_server.requests[-1].api_key_sent is False
    assert "authorization" not in model_server.requests[-1].headers


def test_a_server_given_no_key_answers_any_key_but_none_counts_as_its_own(
    model_server: ScriptedModelServer,
) -> None:
    reply = client(model_server, api_key="anything").chat.completions.create(
        model="m", messages=USER
    )
    assert reply.choices[0].message.content == "ok"
    [logged] = model_server.requests
    assert logged.headers["authorization"] == "[redacted]" and logged.api_key_sent is False


KEY = "sk-scripted-3f9c2a71e5"


@pytest.mark.model_script({"rules": [{"times": 1, "reply": {"content": "first"}}]})
def test_a_server_given_a_key_refuses_any_other_key_or_none_in_each_protocol(
    model_server: ScriptedModelServer,
) -> None:
    model_server.set_api_key(KEY)
    assert model_server.api_key == KEY
    for wrong in ("agentkit-no-key", KEY + "x", KEY[:-1]):
        with pytest.raises(openai.AuthenticationError) as refused:
            client(model_server, api_key=wrong).chat.completions.create(model="m", messages=USER)
        assert refused.value.status_code == 401 and refused.value.code == "invalid_api_key"
        assert wrong not in str(refused.value.body)
        with pytest.raises(openai.AuthenticationError):
            client(model_server, api_key=wrong).responses.create(model="m", input="hi")
        with pytest.raises(openai.AuthenticationError):
            client(model_server, api_key=wrong).models.list()
        with pytest.raises(anthropic.AuthenticationError) as refused_messages:
            claude(model_server, wrong).messages.create(model="m", max_tokens=9, messages=USER)
        assert refused_messages.value.body["error"]["type"] == "authentication_error"
        with pytest.raises(anthropic.AuthenticationError):
            claude(model_server, wrong).messages.count_tokens(model="m", messages=USER)
    # no key at all, a bearer token with no token, the key beside another one
    keyless = raw_post(model_server, {"model": "m", "messages": USER})
    assert keyless.status_code == 401 and keyless.json()["error"]["code"] == "invalid_api_key"
    for headers in (
        {"authorization": "Bearer"},
        {"authorization": f"Bearer {KEY}", "x-api-key": "agentkit-no-key"},
        {"authorization": f"Basic {KEY}"},
    ):
        body = {"model": "m", "messages": USER}
        url = f"{model_server.base_url}/chat/completions"
        assert httpx.post(url, json=body, headers=headers, timeout=10).status_code == 401
    refused_log = model_server.requests
    assert refused_log and not any(r.api_key_sent for r in refused_log)
    assert all(r.rule is None for r in refused_log)
    assert KEY not in json.dumps([r.headers for r in refused_log])
    # the refused requests used no rule's ``times``: the first answered one gets "first"
    model_server.clear_requests()
    reply = client(model_server, api_key=KEY).chat.completions.create(model="m", messages=USER)
    assert reply.choices[0].message.content == "first"
    message = claude(model_server, KEY).messages.create(model="m", max_tokens=9, messages=USER)
    assert message.content[0].type == "text"
    azure = httpx.post(
        f"{model_server.base_url}/chat/completions",
        json={"model": "m", "messages": USER},
        headers={"api-key": KEY},
        timeout=10,
    )
    assert azure.status_code == 200
    assert [r.api_key_sent for r in model_server.requests] == [True, True, True]
    model_server.set_api_key(None)  # any key again
    raw_post(model_server, {"model": "m", "messages": USER}).raise_for_status()
    with pytest.raises(ValueError, match="api_key"):
        model_server.set_api_key("")


@pytest.mark.anyio
async def test_wait_for_requests_returns_once_held_requests_arrived(
    model_server: ScriptedModelServer,
) -> None:
    model_server.hold()
    aclient = openai.AsyncOpenAI(base_url=model_server.base_url, api_key="k", max_retries=0)
    calls = [
        asyncio.ensure_future(aclient.chat.completions.create(model="m", messages=USER))
        for _ in range(3)
    ]
    with anyio.fail_after(30):  # a hang guard: the three calls are all held, all logged
        logged = await model_server.wait_for_requests(3)
    assert len(logged) == 3 and not any(c.done() for c in calls)
    assert model_server.held == logged  # received, and their answers kept back
    assert len(await model_server.wait_for_requests(2)) == 3  # already there: at once
    model_server.release()
    replies = await asyncio.gather(*calls)
    assert [r.choices[0].message.content for r in replies] == ["ok"] * 3
    assert model_server.held == []  # answered
    model_server.clear_requests()
    waiting = asyncio.ensure_future(model_server.wait_for_requests(1))
    await asyncio.sleep(0)
    assert not waiting.done()  # cleared: the three do not count
    await aclient.chat.completions.create(model="m", messages=USER)
    with anyio.fail_after(30):
        assert len(await waiting) == 1
    await aclient.close()


def test_estimated_usage_grows_with_text(model_server: ScriptedModelServer) -> None:
    model_server.set_script("a reply of some length")
    c = client(model_server)
    short = c.chat.completions.create(model="m", messages=USER).usage
    long = c.chat.completions.create(
        model="m", messages=[{"role": "user", "content": "word " * 100}]
    ).usage
    assert short and long
    assert long.prompt_tokens > short.prompt_tokens > 0
    assert long.completion_tokens == short.completion_tokens > 0


def test_models_endpoint_and_unknown_routes(model_server: ScriptedModelServer) -> None:
    model_server.set_script({"models": ["alpha", "beta"]})
    assert [m.id for m in client(model_server).models.list()] == ["alpha", "beta"]
    missing = httpx.get(f"{model_server.url}/v1/nothing")
    assert missing.status_code == 404
    assert "no route" in missing.json()["error"]["message"]
    bad = httpx.post(f"{model_server.base_url}/chat/completions", content=b"not json")
    assert bad.status_code == 400 and bad.json()["error"]["type"] == "invalid_request_error"


@pytest.mark.parametrize("include_usage", [True, False])
def test_streamed_text_with_and_without_usage(
    model_server: ScriptedModelServer, include_usage: bool
) -> None:
    model_server.set_script({"default": {"content": "streamed words here", "chunk_size": 4}})
    options = {"include_usage": True} if include_usage else None
    chunks = list(
        client(model_server).chat.completions.create(
            model="m", messages=USER, stream=True, stream_options=options
        )
    )
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "streamed words here"
    assert all(c.object == "chat.completion.chunk" for c in chunks)
    assert chunks[0].choices[0].delta.role == "assistant"
    finish = [c.choices[0].finish_reason for c in chunks if c.choices]
    assert finish[-1] == "stop" and set(finish[:-1]) == {None}
    if include_usage:
        assert chunks[-1].choices == [] and chunks[-1].usage is not None
        assert chunks[-1].usage.completion_tokens > 0
        assert all(c.usage is None for c in chunks[:-1])
    else:
        assert all(c.usage is None for c in chunks)
    raw = httpx.post(
        f"{model_server.base_url}/chat/completions",
        json={"model": "m", "messages": USER, "stream": True},
    )
    assert raw.headers["content-type"].startswith("text/event-stream")
    assert sse_events(raw.text)[-1] == "[DONE]"


TOOL_SCRIPT = {
    "rules": [
        {
            "match": {"after_tool": False},
            "reply": {
                "content": "Let me check.",
                "chunk_size": 3,
                "tool_calls": [
                    {"id": "call_a", "name": "get_weather", "arguments": {"city": "Paris"}},
                    {"name": "lookup", "arguments": '{"q": "x", "n": [1, 2]}'},
                ],
            },
        },
        {"match": {"after_tool": True}, "reply": {"content": "It is sunny."}},
    ]
}
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": name,
            "description": "test tool",
            "parameters": {"type": "object", "properties": {}, "additionalProperties": True},
        },
    }
    for name in ("get_weather", "lookup")
]


@pytest.mark.model_script(TOOL_SCRIPT)
def test_tool_calls_streamed_parse_with_openai_stream_helper(
    model_server: ScriptedModelServer,
) -> None:
    completions = client(model_server).chat.completions
    helper = getattr(completions, "stream", None)
    if helper is None:  # older openai releases keep it under beta
        helper = client(model_server).beta.chat.completions.stream
    with helper(model="m", messages=USER, tools=TOOLS) as stream:
        kinds = {event.type for event in stream}
        final = stream.get_final_completion()
    assert {"content.delta", "tool_calls.function.arguments.delta"} <= kinds
    message = final.choices[0].message
    assert final.choices[0].finish_reason == "tool_calls"
    assert message.content == "Let me check."
    calls = message.tool_calls or []
    assert calls[0].id == "call_a" and calls[1].id
    assert [c.function.name for c in calls] == ["get_weather", "lookup"]
    assert json.loads(calls[0].function.arguments) == {"city": "Paris"}
    assert json.loads(calls[1].function.arguments) == {"q": "x", "n": [1, 2]}


@pytest.mark.model_script(TOOL_SCRIPT)
def test_tool_call_wire_format(model_server: ScriptedModelServer) -> None:
    plain = raw_post(model_server, {"model": "m", "messages": USER}).json()
    message = plain["choices"][0]["message"]
    assert message["tool_calls"][0] == {
        "id": "call_a",
        "type": "function",
        "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
    }
    streamed = raw_post(model_server, {"model": "m", "messages": USER, "stream": True})
    chunks = [json.loads(e) for e in sse_events(streamed.text)[:-1]]
    deltas = [c["choices"][0]["delta"] for c in chunks]
    tool_deltas = [d["tool_calls"][0] for d in deltas if "tool_calls" in d]
    first = tool_deltas[0]
    assert first == {
        "index": 0,
        "id": "call_a",
        "type": "function",
        "function": {"name": "get_weather", "arguments": ""},
    }
    assert all(set(d) == {"index", "function"} for d in tool_deltas if "id" not in d)
    args = "".join(d["function"]["arguments"] for d in tool_deltas if d["index"] == 0)
    assert json.loads(args) == {"city": "Paris"}
    # a follow-up after a tool result takes the second rule
    follow = client(model_server).chat.completions.create(
        model="m",
        messages=[
            *USER,
            {"role": "assistant", "content": None, "tool_calls": [message["tool_calls"][0]]},
            {"role": "tool", "tool_call_id": "call_a", "content": "sunny"},
        ],
    )
    assert follow.choices[0].message.content == "It is sunny."
    assert model_server.requests[-1].rule == 1


def test_rules_first_match_wins_on_every_condition(model_server: ScriptedModelServer) -> None:
    model_server.set_script(
        {
            "rules": [
                {"match": {"model": "special"}, "reply": {"content": "model rule"}},
                {"match": {"last_user_regex": "^calc \\d+$"}, "reply": {"content": "regex"}},
                {"match": {"turn": [1, 2]}, "reply": {"content": "turn {{turn}}"}},
                {"match": {"any_message_contains": "SYSTEM-X"}, "reply": {"content": "any"}},
                {"match": {"last_user_contains": "hello"}, "reply": {"content": "contains"}},
                {"match": {"stream": True}, "reply": {"content": "streaming"}},
            ],
            "default": {"content": "fallback"},
        }
    )
    c = client(model_server)

    def ask(messages: list[dict[str, Any]], model: str = "m") -> str | None:
        return c.chat.completions.create(model=model, messages=messages).choices[0].message.content

    assert ask(USER, model="special") == "model rule"
    assert ask([{"role": "user", "content": "calc 42"}]) == "regex"
    assert ask([{"role": "user", "content": "calc 42 please"}]) == "fallback"
    one_turn = [*USER, {"role": "assistant", "content": "x"}, {"role": "user", "content": "y"}]
    assert ask(one_turn) == "turn 1"
    assert ask([{"role": "system", "content": "SYSTEM-X"}, *USER]) == "any"
    assert ask(USER) == "contains"
    assert [r.rule for r in model_server.requests] == [0, 1, None, 2, 3, 4]


def test_times_fails_exactly_n_requests_under_concurrency(
    model_server: ScriptedModelServer,
) -> None:
    model_server.set_script(
        {"rules": [{"times": 5, "reply": {"fail": "rate_limit"}}], "default": {"content": "ok"}}
    )

    def status() -> int:
        return raw_post(model_server, {"model": "m", "messages": USER}).status_code

    results: list[int] = []
    threads = [threading.Thread(target=lambda: results.append(status())) for _ in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results) == [200] * 15 + [429] * 5
    model_server.set_script(
        {"rules": [{"times": 1, "reply": {"fail": "server_error"}}], "default": {"content": "ok"}}
    )
    assert [status(), status()] == [500, 200]


@pytest.mark.parametrize(
    ("reply", "status", "error_type", "exc"),
    [
        ({"fail": "rate_limit"}, 429, "requests", openai.RateLimitError),
        ({"fail": "server_error"}, 500, "server_error", openai.InternalServerError),
        ({"status": 503, "message": "overloaded"}, 503, "server_error", openai.APIStatusError),
        (
            {"fail": "rate_limit", "status": 400},
            400,
            "invalid_request_error",
            openai.BadRequestError,
        ),
    ],
)
@pytest.mark.parametrize("stream", [False, True])
def test_http_error_injection(
    model_server: ScriptedModelServer,
    reply: dict[str, Any],
    status: int,
    error_type: str,
    exc: type[Exception],
    stream: bool,
) -> None:
    model_server.set_script({"default": reply})
    raw = raw_post(model_server, {"model": "m", "messages": USER, "stream": stream})
    assert raw.status_code == status
    body = raw.json()
    assert set(body["error"]) == {"message", "type", "param", "code"}
    assert body["error"]["type"] == error_type
    if "message" in reply:
        assert body["error"]["message"] == reply["message"]
    with pytest.raises(exc) as info:
        client(model_server).chat.completions.create(model="m", messages=USER, stream=stream)
    assert getattr(info.value, "status_code", None) == status


@pytest.mark.parametrize("stream", [False, True])
def test_invalid_json_body(model_server: ScriptedModelServer, stream: bool) -> None:
    model_server.set_script({"default": {"fail": "invalid_json", "content": "text"}})
    raw = raw_post(model_server, {"model": "m", "messages": USER, "stream": stream})
    assert raw.status_code == 200
    if stream:
        events = sse_events(raw.text)
        assert events[-1] == "[DONE]"
        bad = [e for e in events[:-1] if not _is_json(e)]
        assert len(bad) == 1
    else:
        assert not _is_json(raw.text)
    with pytest.raises(ValueError):
        result = client(model_server).chat.completions.create(
            model="m", messages=USER, stream=stream
        )
        if stream:
            list(result)  # type: ignore[arg-type]


@pytest.mark.parametrize("stream", [False, True])
def test_raw_body_is_sent_exactly_as_written(
    model_server: ScriptedModelServer, stream: bool
) -> None:
    deep = "[" * 200_000 + "]" * 200_000  # no JSON object in a script can hold this
    model_server.set_script({"default": {"raw_body": deep}})
    raw = raw_post(model_server, {"model": "m", "messages": USER, "stream": stream})
    assert raw.status_code == 200
    if stream:
        assert raw.headers["content-type"].startswith("text/event-stream")
        assert sse_events(raw.text) == [deep, "[DONE]"]
    else:
        assert raw.headers["content-type"].startswith("application/json")
        assert raw.text == deep
    model_server.set_script({"default": {"status": 503, "raw_body": "{not json"}})
    error = raw_post(model_server, {"model": "m", "messages": USER, "stream": stream})
    assert (error.status_code, error.text) == (503, "{not json")
    with pytest.raises(ValidationError, match="raw_body: give body or raw_body, not both"):
        Script.from_json({"default": {"body": {}, "raw_body": "{}"}})


def _is_json(text: str) -> bool:
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


@pytest.mark.parametrize("fail", ["broken_stream", "disconnect"])
@pytest.mark.parametrize("stream", [False, True])
def test_broken_and_dropped_connections(
    model_server: ScriptedModelServer, fail: str, stream: bool
) -> None:
    model_server.set_script({"default": {"fail": fail, "content": "x" * 200}})
    with pytest.raises((httpx.HTTPError, openai.APIConnectionError)):
        result = client(model_server).chat.completions.create(
            model="m", messages=USER, stream=stream
        )
        if stream:
            list(result)  # type: ignore[arg-type]
    # the server keeps serving other requests afterwards
    model_server.set_script("fine")
    assert raw_post(model_server, {"model": "m", "messages": USER}).status_code == 200


def test_hang_times_out_client_and_stop_releases_it(model_server_factory: Any) -> None:
    server = model_server_factory({"default": {"fail": "hang"}})
    with pytest.raises(openai.APITimeoutError):
        client(server, timeout=0.3).chat.completions.create(model="m", messages=USER)
    # a hanging request still in flight does not keep stop() waiting
    outcome: list[BaseException] = []

    def hang() -> None:
        try:
            client(server, timeout=30).chat.completions.create(model="m", messages=USER)
        except BaseException as exc:
            outcome.append(exc)

    thread = threading.Thread(target=hang)
    thread.start()
    while len(server.requests) < 2:
        time.sleep(0.01)
    server.stop()
    thread.join(10)
    assert not thread.is_alive()
    assert isinstance(outcome[0], openai.APIConnectionError)


def test_parallel_requests_overlap_instead_of_queueing(model_server_factory: Any) -> None:
    """All requests are received while none is answered: nothing serializes them."""
    server = model_server_factory({"default": {"content": "late", "latency": 3600}})
    n = 64
    outcomes: list[BaseException | int] = []

    async def main() -> None:
        limits = httpx.Limits(max_connections=n)
        async with httpx.AsyncClient(limits=limits, timeout=None) as http:

            async def one() -> None:
                try:
                    r = await http.post(
                        f"{server.base_url}/chat/completions",
                        json={"model": "m", "messages": USER},
                    )
                    outcomes.append(r.status_code)
                except httpx.HTTPError as exc:
                    outcomes.append(exc)

            await asyncio.gather(*(one() for _ in range(n)))

    thread = threading.Thread(target=asyncio.run, args=(main(),))
    thread.start()
    # wait on the count, not on the clock: every request is in the server at once
    while len(server.requests) < n:
        time.sleep(0.01)
    assert outcomes == []
    server.stop()  # closes the waiting connections
    thread.join(30)
    assert len(outcomes) == n
    assert all(isinstance(o, httpx.HTTPError) for o in outcomes)


@pytest.mark.anyio
async def test_async_context_manager_serves_on_the_running_loop() -> None:
    async with ScriptedModelServer({"default": {"content": "async"}}) as server:
        aclient = openai.AsyncOpenAI(base_url=server.base_url, api_key="k", max_retries=0)
        replies = await asyncio.gather(
            *(aclient.chat.completions.create(model="m", messages=USER) for _ in range(10))
        )
        assert {r.choices[0].message.content for r in replies} == {"async"}
        await aclient.close()
    with pytest.raises(RuntimeError, match="not running"):
        _ = server.base_url


@pytest.mark.model_script("from the marker")
def test_marker_with_reply_text(model_server: ScriptedModelServer) -> None:
    reply = client(model_server).chat.completions.create(model="m", messages=USER)
    assert reply.choices[0].message.content == "from the marker"


def test_start_and_stop_without_context_manager() -> None:
    server = ScriptedModelServer("plain text").start()
    try:
        reply = client(server).chat.completions.create(model="m", messages=USER)
        assert reply.choices[0].message.content == "plain text"
    finally:
        server.stop()


def test_script_file_and_validation_errors(tmp_path: Path) -> None:
    path = tmp_path / "script.json"
    path.write_text(json.dumps({"rules": [{"match": {"turn": 0}, "reply": {"content": "t0"}}]}))
    script = load_script(path)
    view = RequestView.from_body({"model": "m", "messages": USER})
    assert script.choose(view)[0].content == "t0"
    assert load_script(str(path)).rules[0].reply.content == "t0"

    path.write_text(json.dumps({"rules": [{"match": {"turn": "0"}}]}))
    with pytest.raises(ValidationError, match=r"script.json: rules\[0\]\.match\.turn: expected"):
        load_script(path)
    path.write_text(json.dumps({"default": {"fail": "explode"}}))
    with pytest.raises(ValidationError, match=r"default\.fail: expected one of|default\.fail"):
        load_script(path)
    path.write_text(json.dumps({"rules": [{"reply": {"contents": "typo"}}]}))
    with pytest.raises(ValidationError, match=r"rules\[0\]\.reply\.contents: unknown key"):
        load_script(path)
    path.write_text("{not json")
    with pytest.raises(ValidationError, match="invalid JSON"):
        load_script(path)
    with pytest.raises(ValidationError, match="status"):
        Script.from_json({"default": {"status": 200}})


EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "scripts"


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.json")), ids=lambda p: p.name)
def test_example_scripts_load(path: Path) -> None:
    data = json.loads(path.read_text())
    script = load_script(path)
    assert len(script.rules) == len(data.get("rules", []))
    assert script.default.content == data.get("default", {"content": "ok"}).get("content")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_cli_serves_a_script_until_interrupted(tmp_path: Path) -> None:
    script = tmp_path / "s.json"
    script.write_text(json.dumps({"default": {"content": "from the CLI"}}))
    with subprocess.Popen(
        [sys.executable, "-m", "agentkit.testing.model_server", "--script", str(script)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as proc:
        try:
            assert proc.stdout is not None
            base_url = proc.stdout.readline().strip()
            assert base_url.startswith("http://127.0.0.1:") and base_url.endswith("/v1")
            c = openai.OpenAI(base_url=base_url, api_key="k", max_retries=0)
            reply = c.chat.completions.create(model="m", messages=USER)
            assert reply.choices[0].message.content == "from the CLI"
            proc.send_signal(signal.SIGINT)
            assert proc.wait(10) == 0
        finally:
            proc.kill()


def test_cli_port_option_and_bad_script(tmp_path: Path) -> None:
    port = _free_port()
    with subprocess.Popen(
        [sys.executable, "-m", "agentkit.testing.model_server", "--port", str(port)],
        stdout=subprocess.PIPE,
        text=True,
    ) as proc:
        try:
            assert proc.stdout is not None
            assert proc.stdout.readline().strip() == f"http://127.0.0.1:{port}/v1"
            assert httpx.get(f"http://127.0.0.1:{port}/v1/models").status_code == 200
            proc.terminate()
            assert proc.wait(10) == 0
        finally:
            proc.kill()
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"rules": [{"match": {"nope": 1}}]}))
    done = subprocess.run(
        [sys.executable, "-m", "agentkit.testing.model_server", "--script", str(bad)],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 2
    assert "bad.json: rules[0].match.nope: unknown key" in done.stderr
    assert "Traceback" not in done.stderr


PLUGIN_USER_TEST = """
import openai
import pytest
from agentkit import RunContext, Task
from agentkit.harnesses.chat import ChatHarness
from agentkit.testing.conformance import check_harness


@pytest.mark.model_script({"default": {"content": "scripted {{last_user}}"}})
def test_marker(model_server):
    c = openai.OpenAI(base_url=model_server.base_url, api_key="k", max_retries=0)
    reply = c.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])
    assert reply.choices[0].message.content == "scripted x"


def test_factory(model_server_factory):
    a, b = model_server_factory("a"), model_server_factory("b")
    assert a.base_url != b.base_url


def test_sandbox_fixtures_are_registered_when_present(request):
    import importlib.util

    if importlib.util.find_spec("agentkit.testing.sandbox_fixtures") is not None:
        assert request.config.pluginmanager.get_plugin("agentkit-sandbox-fixtures")


@pytest.mark.anyio
async def test_conformance(model_server):
    context = RunContext(model="m", base_url=model_server.base_url)
    await check_harness(ChatHarness(), Task(task_id="t:1", input="hi"), context)
"""


def test_plugin_works_for_a_third_party_test_suite(tmp_path: Path) -> None:
    """A project that only installs agentkit gets the fixtures through the entry point."""
    (tmp_path / "test_uses_plugin.py").write_text(PLUGIN_USER_TEST)
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-p",
            "no:xdist",
            "--strict-markers",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert "4 passed" in run.stdout


def test_log_limit_keeps_the_newest_requests() -> None:
    with ScriptedModelServer("x", log_limit=3) as server:
        for i in range(5):
            raw_post(server, {"model": f"m{i}", "messages": USER})
        assert [r.body["model"] for r in server.requests] == ["m2", "m3", "m4"]
        server.clear_requests()
        assert server.requests == []


TOKEN_SCRIPT = {
    "rules": [
        {"match": {"model": "forced"}, "reply": {"content": "héllo wörld", "token_ids": True}},
        {
            "match": {"model": "calls"},
            "reply": {
                "reasoning": "think",
                "content": "I will call.",
                "chunk_size": 5,
                "tool_calls": [{"name": "bash", "arguments": {"command": "ls -la"}}],
                "logprobs": [-0.5, -1.5],
            },
        },
    ],
    "default": {"content": "The answer is 42."},
}


@pytest.mark.model_script(TOKEN_SCRIPT)
def test_logprobs_and_vllm_token_ids(model_server: ScriptedModelServer) -> None:
    from agentkit.testing import tokens

    plain = raw_post(model_server, {"model": "m", "messages": USER}).json()
    assert "prompt_token_ids" not in plain and "token_ids" not in plain["choices"][0]
    assert plain["choices"][0]["logprobs"] is None

    body = {
        "model": "m",
        "messages": USER,
        "logprobs": True,
        "top_logprobs": 2,
        "return_token_ids": True,
    }
    done = raw_post(model_server, body).json()
    choice = done["choices"][0]
    # the answer's text, then the end-of-turn token (in the ids, counted, not in the text)
    sampled = "The answer is 42." + tokens.END_OF_TURN
    assert tokens.decode(choice["token_ids"]) == sampled
    assert done["usage"]["completion_tokens"] == len(choice["token_ids"])
    assert tokens.decode(done["prompt_token_ids"]) == "<|user|>hello\n<|assistant|>"
    entries = choice["logprobs"]["content"]
    assert [e["token"] for e in entries] == [
        *tokens.pieces("The answer is 42."),
        *tokens.pieces(tokens.END_OF_TURN),
    ]
    assert len(entries) == len(choice["token_ids"])
    assert [e["logprob"] for e in entries[:3]] == [-0.1, -0.2, -0.3]
    assert all(bytes(e["bytes"]).decode() == e["token"] for e in entries)
    assert [t["token"] for t in entries[0]["top_logprobs"]] == [entries[0]["token"], "<alt1>"]

    # the official client reads the logprobs (asked alone, no token ids come)
    completion = client(model_server).chat.completions.create(
        model="m",
        messages=USER,  # type: ignore[arg-type]
        logprobs=True,
    )
    assert completion.model_extra is None or "prompt_token_ids" not in completion.model_extra
    assert completion.choices[0].logprobs is not None
    content = completion.choices[0].logprobs.content or []
    assert "".join(t.token for t in content) == sampled

    # streamed: each chunk carries its own tokens; joined they are the whole completion
    streamed = raw_post(model_server, {**body, "stream": True})
    chunks = [json.loads(e) for e in sse_events(streamed.text)[:-1]]
    assert chunks[0]["prompt_token_ids"] == done["prompt_token_ids"]
    assert all("prompt_token_ids" not in c for c in chunks[1:])
    assert "token_ids" not in chunks[0]["choices"][0]  # as vLLM's first chunk
    ids = [i for c in chunks[1:] for i in c["choices"][0]["token_ids"]]
    assert ids == choice["token_ids"]
    streamed_entries = [
        e
        for c in chunks
        if c["choices"][0]["logprobs"]
        for e in c["choices"][0]["logprobs"]["content"]
    ]
    assert streamed_entries == entries
    # as vLLM's: the finishing chunk carries the last sampled token (the end of the turn)
    _, *middle, last = chunks
    assert last["choices"][0]["finish_reason"] == "stop" and last["choices"][0]["delta"] == {}
    assert tokens.decode(last["choices"][0]["token_ids"]) == tokens.END_OF_TURN
    for c in middle:
        delta = c["choices"][0]["delta"].get("content") or ""
        assert tokens.decode(c["choices"][0]["token_ids"]) == delta


@pytest.mark.model_script(TOKEN_SCRIPT)
def test_token_ids_cover_reasoning_content_and_tool_arguments(
    model_server: ScriptedModelServer,
) -> None:
    from agentkit.testing import tokens

    forced = raw_post(model_server, {"model": "forced", "messages": USER}).json()
    assert tokens.decode(forced["choices"][0]["token_ids"]) == "héllo wörld" + tokens.END_OF_TURN
    assert forced["prompt_token_ids"]

    body = {"model": "calls", "messages": USER, "logprobs": True, "return_token_ids": True}
    done = raw_post(model_server, body).json()
    choice = done["choices"][0]
    # as sampled: the reasoning between think markers, the text, the tool call as Hermes
    # writes it, the end-of-turn token
    expected = (
        '<think>think</think>I will call.<tool_call>{"name": "bash", "arguments": '
        '{"command": "ls -la"}}</tool_call>' + tokens.END_OF_TURN
    )
    assert tokens.decode(choice["token_ids"]) == expected
    assert done["usage"]["completion_tokens"] == len(choice["token_ids"])
    values = [e["logprob"] for e in choice["logprobs"]["content"]]
    assert values[:4] == [-0.5, -1.5, -0.5, -1.5]
    streamed = raw_post(model_server, {**body, "stream": True})
    chunks = [json.loads(e) for e in sse_events(streamed.text)[:-1]]
    assert [i for c in chunks[1:] for i in c["choices"][0]["token_ids"]] == choice["token_ids"]
    # deltas never cut a token, and stay within chunk_size characters; a template's
    # marker goes on a chunk of its own with an empty delta (a tool call's opening on the
    # call's head), the end-of-turn token on the finishing chunk, as vLLM streams them
    markers = []
    for c in chunks[1:]:
        delta = c["choices"][0]["delta"]
        text = delta.get("content") or delta.get("reasoning") or ""
        ids = tokens.decode(c["choices"][0]["token_ids"])
        if "tool_calls" in delta and "id" in delta["tool_calls"][0]:
            markers.append(ids)
            continue
        if "tool_calls" in delta:
            text = delta["tool_calls"][0]["function"].get("arguments", "")
        if delta == {}:
            markers.append(ids)
            continue
        assert ids == text
        assert len(text) <= 5
    assert markers == [
        "<think>", "</think>", '<tool_call>{"name": "bash", "arguments": ', "}</tool_call>",
        tokens.END_OF_TURN,
    ]  # fmt: skip
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"


def test_stand_in_tokenizer_round_trips() -> None:
    from agentkit.testing import tokens

    for text in ["", "abc", "hello world", "héllo wörld 🎉", "a\0b\0\0c", "日本語のテキスト"]:
        assert tokens.decode(tokens.encode(text)) == text
        assert "".join(tokens.pieces(text)) == text
        assert all(len(p.encode()) <= 4 for p in tokens.pieces(text))
    assert len(tokens.encode("x" * 10)) == 3


def test_reply_logprobs_are_validated() -> None:
    with pytest.raises(ValidationError, match="logprobs"):
        Script.from_json({"default": {"logprobs": [0.5]}})
    with pytest.raises(ValidationError, match="logprobs"):
        Script.from_json({"default": {"logprobs": []}})


def test_a_server_of_chat_completions_only() -> None:
    """``apis``: the other protocols' routes answer 404, as from a server without them."""
    with ScriptedModelServer({"default": {"content": "hi"}}, apis=["chat"]) as server:
        body = {"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "x"}]}
        chat = httpx.post(f"{server.base_url}/chat/completions", json=body, timeout=30)
        assert chat.status_code == 200
        for path in ("/messages", "/messages/count_tokens", "/responses"):
            refused = httpx.post(f"{server.base_url}{path}", json=body, timeout=30)
            assert refused.status_code == 404, path
        server.set_apis(None)
        assert httpx.post(f"{server.base_url}/messages", json=body, timeout=30).status_code == 200
    with pytest.raises(ValueError, match="unknown protocol"):
        ScriptedModelServer(apis=["grpc"])  # type: ignore[list-item]
