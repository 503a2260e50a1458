"""verifiers / prime-rl: one trace record per rollout, as JSONL.

verifiers 0.4.0 records a rollout as a ``Trace``: a graph of message nodes,
each carrying the tokens it adds to the sequence; every root-to-leaf path
(``trace.branches``) is one training sample, and prime-rl's orchestrator
trains on each branch's ``token_ids``, ``sampled_mask`` and ``logprobs``
(``trace_to_samples``). ``verifiers.WireTrace.model_validate(line)`` loads a
line as a trainer does, without the run's packages.

Each training sequence of the rollout is one root-to-leaf chain: per merged
call, a node for each message its request added (no tokens: ids from the
model server come without per-message spans, as verifiers' own graph does
then; for a call the proxy served from chat completions, a Messages or
Responses call in its translation mode, the messages of the chat request the
server was sent, and the answer as the chat message it stands for, the
call's ``chat_answer``) and an assistant node holding the
tokens the call's prompt added and then its sampled tokens (mask True on the
sampled ones only; ``logprobs`` and ``advantages`` over them). A sequence
without the sampler's logprobs (a server that returned none, the tokenizer
fallback) marks no token trainable (mask all False, no logprobs): verifiers
spreads a missing logprob as 0.0, so prime-rl would train on it with the
sampler's logprob taken for 0; its ``info["agentkit"]["sequences"]`` entry
says ``"logprobs": false``. ``rewards``
holds the rollout's reward (``reward``, weight 1, so ``trace.reward`` is it),
``metrics`` every metric,
``ok`` whether the harness completed (prime-rl masks a trace that did not),
and ``info["agentkit"]`` the rollout's identity, its sequences and its token
issues (and for a branching run's leaf its ``prefix_id``, ``branch_step`` and
``prefix_messages``, and each sequence's ``prefix_tokens``).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from agentkit._calls import ModelCall
from agentkit._reasoning import message_reasoning
from agentkit.training._files import write_lines
from agentkit.training._records import TrainingRecord
from agentkit.training._toolcalls import tool_calls_of

__all__ = ["CallTurn", "call_turns", "trace_record", "write_verifiers"]

#: One call as a trace shows it: the messages its request added, its answer, and how
#: many tokens its sequence holds once the call's completion is in.
CallTurn = tuple[list[dict[str, Any]], dict[str, Any], int]


def _text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [p.get("text") for p in content if isinstance(p, Mapping)]
        if all(isinstance(p, str) for p in parts) and parts:
            return "".join(p for p in parts if isinstance(p, str))
    return json.dumps(content, ensure_ascii=False)


def vf_message(message: Mapping[str, Any]) -> dict[str, Any]:
    """An OpenAI chat message as a verifiers message (``role``-tagged, text content; an
    assistant's thinking, ``reasoning`` or ``reasoning_content``, as verifiers'
    ``reasoning_content``)."""
    role = message.get("role")
    if role in ("system", "developer"):
        return {"role": "system", "content": _text(message.get("content"))}
    if role == "assistant":
        out: dict[str, Any] = {"role": "assistant", "content": message.get("content")}
        if not isinstance(out["content"], str | None):
            out["content"] = _text(out["content"])
        reasoning = message_reasoning(message)[1]  # vLLM's ``reasoning``, or the older name
        if isinstance(reasoning, str):
            out["reasoning_content"] = reasoning  # verifiers' AssistantMessage field
        calls = [
            {"id": cid, "name": name, "arguments": arguments}
            for cid, name, arguments in tool_calls_of(message, ensure_ascii=True)
        ]
        if calls:
            out["tool_calls"] = calls
        return out
    if role == "tool":
        tool: dict[str, Any] = {
            "role": "tool",
            "tool_call_id": str(message.get("tool_call_id") or ""),
            "content": _text(message.get("content")),
        }
        if isinstance(message.get("name"), str):
            tool["name"] = message["name"]
        return tool
    return {"role": "user", "content": _text(message.get("content"))}


def _chat_request(call: ModelCall) -> Mapping[str, Any] | None:
    """The chat completions request of a call: the agent's own for a chat call, the one
    the proxy sent the server for a call it translated (Messages or Responses served
    from chat completions); None for any other call."""
    if call.upstream_protocol == "chat":
        request = call.upstream_request
    elif call.protocol == "chat":
        request = call.request
    else:
        return None
    return request if isinstance(request, Mapping) else None


def _answer(call: ModelCall) -> dict[str, Any] | None:
    """The chat assistant message of a call's answer (a translated call's recorded answer
    is in the agent's protocol: its ``chat_answer`` is the chat message it stands for)."""
    if call.upstream_protocol is not None:
        return call.chat_answer
    response = call.response if isinstance(call.response, Mapping) else {}
    choices = response.get("choices")
    reply = choices[0].get("message") if isinstance(choices, list) and choices else None
    return dict(reply) if isinstance(reply, Mapping) else None


def _call_messages(call: ModelCall) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """(the messages the call's request added, its response message), from a chat call or
    a call the proxy served from chat completions (its chat request's messages)."""
    request = _chat_request(call)
    messages = request.get("messages") if request is not None else None
    if not isinstance(messages, list) or not all(isinstance(m, Mapping) for m in messages):
        new = [{"role": "user", "content": f"(the {call.protocol} request of call {call.index})"}]
    else:
        last = max((i for i, m in enumerate(messages) if m.get("role") == "assistant"), default=-1)
        new = [vf_message(m) for m in messages[last + 1 :]]
    reply = _answer(call)
    answer = vf_message(reply) if reply is not None else {"role": "assistant"}
    answer["role"] = "assistant"
    return new, answer


def call_turns(calls: Iterable[ModelCall]) -> dict[int, CallTurn]:
    """The turn of each of a rollout's calls that has token ids (those its training
    sequences hold), by call index: all a trace needs of its calls."""
    out: dict[int, CallTurn] = {}
    for call in calls:
        if call.has_tokens:
            new, answer = _call_messages(call)
            end = len(call.prompt_token_ids or []) + len(call.completion_token_ids or [])
            out[call.index] = (new, answer, end)
    return out


def _segments(record: TrainingRecord, turns: Mapping[int, CallTurn]) -> list[CallTurn]:
    """Per merged call: (new input messages, response message, tokens it adds)."""
    prompt = record.prompt_token_ids or []
    completion = record.completion_token_ids or []
    if record.calls and all(i in turns for i in record.calls):
        out = []
        length = 0
        for index in record.calls:
            new, answer, end = turns[index]
            out.append((new, answer, end - length))
            length = end
        return out
    # a harness's per-rollout tokens: the prompt's messages, one assistant node
    answer = next(
        (vf_message(m) for m in reversed(record.completion) if m.get("role") == "assistant"),
        {"role": "assistant"},
    )
    return [([vf_message(m) for m in record.prompt], answer, len(prompt) + len(completion))]


def _nodes(record: TrainingRecord, turns: Mapping[int, CallTurn]) -> list[dict[str, Any]]:
    tokens = (record.prompt_token_ids or []) + (record.completion_token_ids or [])
    n_prompt = len(record.prompt_token_ids or [])
    # without the sampler's logprobs no token is marked trainable: verifiers reads a
    # sampled token's missing logprob as 0.0, and prime-rl would train on that
    has_logprobs = record.completion_logprobs is not None
    sampled_ones = (record.completion_mask or []) if has_logprobs else []
    mask = [False] * n_prompt + [bool(m) for m in sampled_ones]
    mask += [False] * (len(tokens) - len(mask))
    values = record.completion_logprobs if has_logprobs else None
    logprobs = [0.0] * n_prompt + list(values or [0.0] * (len(tokens) - n_prompt))
    nodes: list[dict[str, Any]] = []
    at = 0
    for new, answer, size in _segments(record, turns):
        for message in new:
            nodes.append({"message": message, "token_ids": [], "mask": []})
        span = slice(at, at + size)
        node_mask = mask[span]
        sampled = [lp for lp, m in zip(logprobs[span], node_mask, strict=True) if m]
        node: dict[str, Any] = {
            "message": answer,
            "sampled": True,
            "token_ids": tokens[span],
            "mask": node_mask,
            "logprobs": sampled,
        }
        if record.advantage is not None:
            node["advantages"] = [record.advantage] * len(sampled)
        nodes.append(node)
        at += size
    return nodes


def trace_record(
    records: list[TrainingRecord], calls: list[ModelCall] | None = None
) -> dict[str, Any]:
    """The trace record of one rollout's records (its training sequences)."""
    return _trace(records, call_turns(calls or []))


def _trace(records: list[TrainingRecord], turns: Mapping[int, CallTurn]) -> dict[str, Any]:
    first = records[0]
    nodes: list[dict[str, Any]] = []
    for record in records:
        if not record.has_tokens:
            continue
        chain = _nodes(record, turns)
        for i, node in enumerate(chain):
            node["parent"] = len(nodes) - 1 if i else None
            nodes.append(node)
    rewards = {} if first.reward is None else {"reward": {"score": first.reward, "weight": 1.0}}
    return {
        "id": first.rollout_id,
        "task": {"type": "AgentkitTask", "data": {"name": first.example_id}, "key": first.task_id},
        "agent": {"config": {}},
        "nodes": nodes,
        "rewards": rewards,
        "metrics": {k: float(v) for k, v in first.rewards.items()},
        "info": {
            "agentkit": {
                "rollout_id": first.rollout_id,
                "task_id": first.task_id,
                "rollout_index": first.rollout_index,
                "group": first.group,
                "advantage": first.advantage,
                "passed": first.passed,
                "sequences": [
                    {
                        "sequence": r.sequence,
                        "calls": r.calls,
                        "start": r.sequence_start,
                        "prefix_tokens": r.prefix_tokens,
                        "logprobs": r.completion_logprobs is not None,
                    }
                    for r in records
                    if r.has_tokens
                ],
                "prefix_id": first.prefix_id,
                "branch_step": first.branch_step,
                "prefix_messages": first.prefix_messages,
                "token_source": first.token_source,
                "token_issues": first.token_issues,
            }
        },
        "is_completed": True,
        "ok": first.status == "completed",
        "stop_condition": first.status,
    }


def _by_rollout(records: Iterable[TrainingRecord]) -> Iterator[list[TrainingRecord]]:
    batch: list[TrainingRecord] = []
    for record in records:
        if batch and record.rollout_id != batch[0].rollout_id:
            yield batch
            batch = []
        batch.append(record)
    if batch:
        yield batch


def write_verifiers(
    records: Iterable[TrainingRecord],
    out: str | os.PathLike[str],
    turns_of: Callable[[str], Mapping[int, CallTurn] | None],
) -> int:
    """Write one trace record per rollout that has token ids; returns how many.
    ``turns_of`` gives a rollout's :func:`call_turns` (None: it has no calls file)."""
    traces = (
        _trace(batch, turns_of(batch[0].rollout_id) or {})
        for batch in _by_rollout(records)
        if any(r.has_tokens for r in batch)
    )
    return write_lines(traces, out)
