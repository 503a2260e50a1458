"""One model call of a rollout, as the model proxy recorded it.

Every model call a rollout makes (whoever makes it: agentkit's own harnesses or
a real agent program in a sandbox) passes the rollout's model proxy, which
writes one :class:`ModelCall` per call. They are kept in the run directory as
``calls/<rollout_id>.jsonl`` (one JSON object a line, in the order the calls
started; see ``docs/run-directory.md``), read back by :mod:`agentkit.runs`,
and turned into training sequences by :mod:`agentkit.training`.

Token ids and logprobs are those the model server returned (vLLM's
``prompt_token_ids`` and a choice's ``token_ids`` and ``logprobs``, asked for by
the proxy on the agent's behalf); nothing here is re-tokenized. When a call has
no ids, ``token_note`` says why, so no rollout loses its tokens silently.

The calls file is written by :func:`calls_json` and read by :func:`read_calls_file`
(the one parser: :mod:`agentkit.runs` and :mod:`agentkit.training` both use it).
A call whose prompt repeats an earlier call's prompt and completion stores only
a reference to that call and the ids it adds (``{"call", "keep", "add"}``), and
the parser rebuilds the full list, so a rollout of many calls does not write its
conversation's ids again with every call.
"""

from __future__ import annotations

import functools
import re
import typing
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Literal, TypeAlias

import attrs
import orjson

from agentkit._convert import structure
from agentkit._errors import AgentkitError, RunDirError
from agentkit._tokens import int_list
from agentkit._usage import Usage

__all__ = [
    "PROTOCOLS",
    "PROTOCOL_NAME_FORM",
    "ModelCall",
    "TokenSource",
    "WireProtocol",
    "calls_json",
    "foreign_calls",
    "is_protocol_name",
    "parse_calls",
    "read_calls_file",
]

#: The wire protocol of a call, by the path it was sent to: one of :data:`PROTOCOLS`, or
#: the name of one a plugin adds (``Wire.protocol`` of a handler given to
#: ``agentkit.proxy.register_wire``), which :func:`is_protocol_name` accepts.
WireProtocol: TypeAlias = str
#: The protocols agentkit's proxy serves itself (``other``: a request it refused, or a
#: registered handler's that names no protocol of its own).
PROTOCOLS: tuple[WireProtocol, ...] = ("chat", "responses", "messages", "completions", "other")
#: What a protocol's name may be, said in errors.
PROTOCOL_NAME_FORM = (
    "a protocol's name (chat, responses, messages, completions, other, or a plugin's own: "
    "a lowercase letter, then up to 63 lowercase letters, digits, '_', '-' or '.')"
)
_PROTOCOL_NAME = re.compile(r"[a-z][a-z0-9_.-]{0,63}")


def is_protocol_name(value: object) -> bool:
    """Whether ``value`` can name a wire protocol (:data:`PROTOCOL_NAME_FORM`)."""
    return type(value) is str and _PROTOCOL_NAME.fullmatch(value) is not None


#: Where a call's token ids came from: the server (exact), a tokenizer the user
#: asked for as a fallback (marked, never silent), or nowhere.
TokenSource = Literal["server", "tokenizer", "none"]


@attrs.frozen(kw_only=True)
class ModelCall:
    """One model call: what was asked, what came back, when, and its tokens.

    ``request`` is the JSON body the agent sent (secrets redacted);
    ``forwarded`` lists the fields the proxy added or changed on its way to
    the server (for example ``return_token_ids``), so ``request`` stays what the
    agent said; ``headers`` are the agent's request headers (secret-looking
    values ``***``). ``response`` is the JSON body the agent received (what the
    server returned, less the fields the proxy asked for on the agent's
    behalf: those are in the token fields); for a streamed call it is the
    final object assembled from the stream's events (``stream`` is then
    True); for a failed call (``status`` 400 or more) the error body. Timing
    is in seconds: ``started_at`` is a Unix time, ``ttft_s`` the time to the
    first byte of the answer's body (the first event of a stream),
    ``duration_s`` the whole call.

    ``upstream_protocol`` is set when the proxy translated the call (its
    translation mode, ``translate_to_chat``): ``protocol`` is what the agent
    spoke (``messages``, ``responses``), ``upstream_protocol`` what the server
    was sent (``chat``), ``upstream_request`` the body it was sent (the token
    fields the proxy asked for included, as ``forwarded`` lists them); the
    token ids are those of the server's answer. ``chat_answer`` is then the chat
    assistant message the agent's answer stands for (what exports that speak chat
    train on), written by the proxy as it records the call; None for a call it did
    not translate, or whose answer its translation cannot say as a chat message.

    ``index`` numbers a rollout's calls from 0 in the order they started;
    ``parent`` is the index of the call this one continues when the caller
    said so (a sub-agent or a parallel branch; None otherwise).

    ``run_id`` is the id of the run that recorded the call (its manifest's
    ``run_id``), written by the run store with the calls file; None for a call
    not written to a run directory, or written before runs had ids. Readers
    check it and ``rollout_id`` against the run and the rollout they read the
    file for (:func:`foreign_calls`).

    A call that did not complete (``error`` set: it failed, broke off, was
    cut short or never reached the server) has no ``completion_token_ids``:
    what the server had sampled before it ended is in ``partial_token_ids``,
    never training data, and ``token_note`` says what happened. A request the
    proxy refused (not a model call) is recorded with protocol ``other``,
    its method and path, the status it was answered with and no body.
    ``cuts`` lists the texts of ``response`` the record keeps shorter than
    they came (``{"field", "chars"}``: where, and how long it was), each cut
    to ``MAX_REPLY_CHARS``, the length agentkit's own harnesses cut a reply to.

    ``policy_version`` is the version of the policy the call was sent to, when a
    trainer announces policy versions (``agentkit.service``: the version current
    when the call started); None otherwise.
    """

    rollout_id: str
    index: int
    run_id: str | None = None
    protocol: WireProtocol
    method: str = "POST"
    path: str = ""
    model: str | None = None
    stream: bool = False
    request: Any = None
    forwarded: dict[str, Any] = attrs.field(factory=dict)
    headers: dict[str, str] = attrs.field(factory=dict)
    status: int | None = None
    response: Any = None
    error: str | None = None
    started_at: float = 0.0
    ttft_s: float | None = None
    duration_s: float = 0.0
    usage: Usage | None = None
    finish_reason: str | None = None
    prompt_token_ids: list[int] | None = None
    completion_token_ids: list[int] | None = None
    completion_logprobs: list[float] | None = None
    partial_token_ids: list[int] | None = None
    token_source: TokenSource = "none"
    token_note: str | None = None
    session_id: str | None = None
    parent: int | None = None
    upstream_protocol: WireProtocol | None = None
    upstream_request: Any = None
    chat_answer: dict[str, Any] | None = None
    cuts: list[dict[str, Any]] = attrs.field(factory=list)
    policy_version: int | None = None

    @property
    def call_id(self) -> str:
        """``<rollout_id>:c<index>``: stable across runs of the same rollout id."""
        return f"{self.rollout_id}:c{self.index}"

    @property
    def has_tokens(self) -> bool:
        """Whether the call carries both its prompt's and its completion's token ids."""
        return self.prompt_token_ids is not None and self.completion_token_ids is not None


# -- the calls file: calls/<rollout_id>.jsonl ------------------------------------------


def calls_json(calls: Sequence[ModelCall]) -> list[dict[str, Any]]:
    """The lines of a calls file: each call as JSON, its prompt's ids delta-encoded.

    A call whose prompt starts with an earlier call's prompt and completion
    (the conversation so far: the usual case) stores ``prompt_token_ids`` as
    ``{"call": k, "keep": n, "add": [...]}``: the first ``n`` ids of call
    ``k``'s prompt followed by its completion, then ``add``. The earlier call
    is the one the call names as ``parent``, else the one before it, else the
    latest one whose ids the prompt extends; a prompt that extends none keeps
    the longest prefix it shares with the parent or the call before it (a
    chat template that rewrote an earlier turn), or its whole list when it
    shares none. :func:`parse_calls` rebuilds the full list.
    """
    out: list[dict[str, Any]] = []
    done: dict[int, list[int]] = {}  # call index -> its prompt + completion ids
    previous: int | None = None
    for call in sorted(calls, key=lambda c: c.index):
        line = _line(call)
        prompt = call.prompt_token_ids
        if prompt is not None:
            delta = _delta(prompt, call.parent, previous, done)
            if delta is not None:
                line["prompt_token_ids"] = delta
            if call.completion_token_ids is not None:
                done[call.index] = prompt + call.completion_token_ids
        previous = call.index
        out.append(line)
    return out


def _line(call: ModelCall) -> dict[str, Any]:
    """One call's fields as JSON values: :func:`~agentkit._convert.unstructure`'s, made
    without the converter (which loads cattrs, and copies the request and response,
    JSON already, a field at a time)."""
    line = attrs.asdict(call, recurse=False)
    if call.usage is not None:
        line["usage"] = call.usage.to_json()
    return line


def _delta(
    prompt: list[int], parent: int | None, previous: int | None, done: dict[int, list[int]]
) -> dict[str, Any] | None:
    near = [i for i in (parent, previous) if i is not None and i in done]
    for index in [*near, *sorted(done, reverse=True)]:
        ids = done[index]
        n = len(ids)
        if n and n <= len(prompt) and prompt[n - 1] == ids[-1] and prompt[:n] == ids:
            return {"call": index, "keep": n, "add": prompt[n:]}
    best: tuple[int, int] | None = None
    for index in near:
        keep = _common_prefix(prompt, done[index])
        if keep and (best is None or keep > best[1]):
            best = (index, keep)
    if best is None:
        return None
    return {"call": best[0], "keep": best[1], "add": prompt[best[1] :]}


def _common_prefix(a: list[int], b: list[int]) -> int:
    """How many leading ids ``a`` and ``b`` share (slices compared in C, halving)."""
    lo, hi = 0, min(len(a), len(b))
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def read_calls_file(
    path: Path, *, references: dict[int, tuple[int, int]] | None = None
) -> list[ModelCall] | None:
    """The calls in ``path`` in order of ``index``; None when there is no such file.

    See :func:`parse_calls`. Raises :class:`~agentkit.rundir.RunDirError`
    naming the file, the line and the field.
    """
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise RunDirError(f"{path}: cannot read: {exc.strerror or exc}") from None
    return parse_calls(data, str(path), references=references)


def parse_calls(
    data: bytes, source: str, *, references: dict[int, tuple[int, int]] | None = None
) -> list[ModelCall]:
    """The calls of a calls file's bytes, in order of ``index``, their ids in full.

    ``references``, when given, is filled with what the file says of each prompt
    it stores by reference: call index -> (the earlier call, how many of its ids
    the prompt starts with); training export then need not compare those ids again.

    A calls file is written whole before its rollout's line, so a line cut short
    (the last one too) is damage, not an interrupted write: an error like any
    other line that is not JSON. Every field is checked against
    :class:`ModelCall`; keys this agentkit does not know (a newer writer's)
    are ignored. A bad line raises :class:`~agentkit.rundir.RunDirError`:
    ``<source>: line 3.prompt_token_ids: expected ...``.
    """
    lines = data.split(b"\n")
    parsed: list[tuple[dict[str, Any], str]] = []
    loads = orjson.loads
    for number, line in enumerate(lines, start=1):
        try:
            value = loads(line)
        except orjson.JSONDecodeError as exc:
            if not line.strip():
                continue  # an empty line (the file's last, after its final newline)
            cut = "cut short (no newline at its end), " if number == len(lines) else ""
            raise RunDirError(
                f"{source}: line {number}: {cut}not valid JSON ({exc}); expected one model "
                "call (a JSON object) per line"
            ) from None
        where = f"{source}: line {number}"
        if type(value) is not dict:
            raise RunDirError(f"{where}: expected a JSON object (one model call)")
        parsed.append((_fields(value, where), where))
    parsed.sort(key=lambda p: p[0]["index"])
    done: dict[int, dict[str, Any]] = {}
    calls = []
    for fields, where in parsed:
        delta = fields["prompt_token_ids"]
        if type(delta) is dict:
            fields["prompt_token_ids"] = _rebuild(delta, done, where)
            if references is not None:
                references[fields["index"]] = (delta["call"], delta["keep"])
        done[fields["index"]] = fields
        calls.append(ModelCall(**fields))
    return calls


def _rebuild(delta: dict[str, Any], done: dict[int, dict[str, Any]], where: str) -> list[int]:
    """The full prompt ids of ``{"call", "keep", "add"}``, from an earlier call's."""
    base = done.get(delta["call"])
    if base is None or base["prompt_token_ids"] is None:
        raise RunDirError(
            f"{where}.prompt_token_ids.call: expected an earlier call of the file "
            f"with token ids, got {delta['call']!r}"
        )
    prompt = base["prompt_token_ids"]
    completion = base.get("completion_token_ids") or []
    keep = delta["keep"]
    if keep > len(prompt) + len(completion):
        raise RunDirError(
            f"{where}.prompt_token_ids.keep: expected at most the "
            f"{len(prompt) + len(completion)} ids of call {delta['call']}, got {keep}"
        )
    ids: list[int] = prompt[:keep] if keep <= len(prompt) else prompt + completion
    if len(ids) > keep:
        del ids[keep:]
    ids += delta["add"]  # in place: one copy of the conversation so far, not two
    return ids


# The checks below take the line's place (``<file>: line N``) and the field's name apart:
# the message naming both is made only for a line that fails.


def _ids(value: Any, where: str, name: str) -> list[int] | None:
    if value is None:
        return None
    ids = int_list(value)
    if ids is None:
        raise RunDirError(f"{where}.{name}: expected a list of integer token ids or null")
    return ids


def _floats(value: Any, where: str, name: str) -> list[float] | None:
    if value is None:
        return None
    if type(value) is list:
        try:
            sum(value)
            return value
        except TypeError:
            pass
    raise RunDirError(f"{where}.{name}: expected a list of numbers (logprobs) or null")


def _prompt_ids(value: Any, where: str) -> list[int] | dict[str, Any] | None:
    """A prompt's ids: a list, null, or ``{"call", "keep", "add"}`` (rebuilt later)."""
    if type(value) is not dict:
        return _ids(value, where, "prompt_token_ids")
    ok = (
        type(value.get("call")) is int
        and type(value.get("keep")) is int
        and value["call"] >= 0
        and value["keep"] >= 0
        and type(value.get("add")) is list
    )
    if not ok:
        raise RunDirError(
            f"{where}.prompt_token_ids: expected a list of integer token ids, null, or "
            '{"call": index, "keep": n, "add": [ids]}'
        )
    _ids(value["add"], where, "prompt_token_ids.add")
    return value


#: A field's check: (its value, the line's place, the field's name) -> the value to keep.
Check = Callable[[Any, str, str], Any]


@attrs.frozen
class _Plan:
    """How to check the lines of one shape (keys, and each value's JSON type)."""

    drop: tuple[str, ...]  # keys that are no field of ModelCall
    to_float: tuple[str, ...]  # number fields written as integers
    checks: tuple[tuple[str, Check], ...]  # the fields whose values need a look
    missing: str | None  # the first of the keys every line needs that lines of the shape lack


#: Line shapes seen, and their plans: the lines of a file mostly share one.
_PLANS: dict[tuple[tuple[str, ...], tuple[type[Any], ...]], _Plan] = {}


def _fields(value: dict[str, Any], where: str) -> dict[str, Any]:
    """One line's fields of :class:`ModelCall`, checked (the prompt ids maybe a delta).

    The keys and the JSON type of each value are checked once per shape of
    line; each line then costs only the checks of its values (the token ids,
    the usage, the choices), done in C where they can be.
    """
    shape = (tuple(value), tuple(map(type, value.values())))
    plan = _PLANS.get(shape)
    if plan is None:
        plan = _plan(value, where)
        if len(_PLANS) < 256:
            _PLANS[shape] = plan
    for name in plan.drop:
        del value[name]
    for name in plan.to_float:
        value[name] = float(value[name])
    for name, check in plan.checks:
        value[name] = check(value[name], where, name)
    prompt = value.get("prompt_token_ids")
    if type(prompt) is list:
        _ids(prompt, where, "prompt_token_ids")
    elif prompt is not None:
        _prompt_ids(prompt, where)
    else:
        value["prompt_token_ids"] = None
    completion = value.get("completion_token_ids")
    if completion is not None:
        _ids(completion, where, "completion_token_ids")
    partial = value.get("partial_token_ids")
    if partial is not None:
        _ids(partial, where, "partial_token_ids")
    logprobs = value.get("completion_logprobs")
    try:
        if logprobs is not None:
            sum(logprobs)
    except TypeError:
        _floats(logprobs, where, "completion_logprobs")
    if plan.missing is not None:
        raise RunDirError(f"{where}.{plan.missing}: required key is missing")
    if value["index"] < 0:
        raise RunDirError(f"{where}.index: expected a whole number >= 0")
    if value["protocol"] not in PROTOCOLS:
        _protocol(value["protocol"], where, "protocol")
    upstream = value.get("upstream_protocol")
    if upstream is not None and upstream not in PROTOCOLS:
        _protocol(upstream, where, "upstream_protocol")
    if value.get("token_source", "none") not in _TOKEN_SOURCES:
        raise RunDirError(
            f"{where}.token_source: expected one of {', '.join(_TOKEN_SOURCES)}, "
            f"got {value['token_source']!r}"
        )
    parent = value.get("parent")
    if parent is not None and parent < 0:
        raise RunDirError(f"{where}.parent: expected a call index >= 0 or null")
    return value


_TOKEN_SOURCES: tuple[str, ...] = typing.get_args(TokenSource)


def _protocol(value: Any, where: str, name: str) -> None:
    if value in PROTOCOLS or is_protocol_name(value):
        return
    shown = repr(value) if len(repr(value)) <= 80 else repr(value)[:80] + "..."
    raise RunDirError(f"{where}.{name}: expected {PROTOCOL_NAME_FORM}, got {shown}")


def _plan(value: dict[str, Any], where: str) -> _Plan:
    """Check the JSON types of one line's values; the plan for lines of its shape."""
    types, checks = _field_checks()
    drop, to_float, look = [], [], []
    for name, raw in value.items():
        allowed = types.get(name)
        if allowed is not None:
            if type(raw) not in allowed:
                names = " or ".join("null" if t is type(None) else t.__name__ for t in allowed)
                raise RunDirError(f"{where}.{name}: expected {names}, got {type(raw).__name__}")
            if float in allowed and type(raw) is int:
                to_float.append(name)
        elif name in checks:
            look.append((name, checks[name]))
        elif name not in _VALUE_CHECKED:
            drop.append(name)
    missing = next((name for name in _REQUIRED if name not in value), None)
    return _Plan(drop=tuple(drop), to_float=tuple(to_float), checks=tuple(look), missing=missing)


#: The keys every line has (the fields of :class:`ModelCall` without a default).
_REQUIRED = ("rollout_id", "index", "protocol")


#: Fields :func:`_fields` checks itself, line by line.
_VALUE_CHECKED = frozenset(
    {"prompt_token_ids", "completion_token_ids", "completion_logprobs", "partial_token_ids"}
)


def _headers(value: Any, where: str, name: str) -> dict[str, str]:
    if type(value) is dict and all(type(v) is str for v in value.values()):
        return value
    raise RunDirError(f"{where}.{name}: expected an object of strings")


def _objects(value: Any, where: str, name: str) -> list[dict[str, Any]]:
    if type(value) is list and all(type(v) is dict for v in value):
        return value
    raise RunDirError(f"{where}.{name}: expected a list of objects")


def _structured(hint: Any) -> Check:
    """A field of a type the fast checks do not cover: the strict converter's check."""

    def check(value: Any, where: str, name: str) -> Any:
        try:
            return structure(value, hint)
        except AgentkitError as exc:
            raise RunDirError(f"{where}.{name}: {exc}") from None

    return check


def _usage(value: Any, where: str, name: str) -> Usage | None:
    if value is None:
        return None
    if type(value) is dict and all(type(v) is int for v in value.values()):
        try:
            return Usage(**value)  # the usual case: every count a whole number
        except TypeError:
            pass
    return _structured(Usage)(value, where, name)  # type: ignore[no-any-return]


@functools.cache
def _field_checks() -> tuple[dict[str, tuple[type[Any], ...]], dict[str, Check]]:
    """Per field of :class:`ModelCall`: the JSON types it takes, or a check function.

    The JSON types of the fields it has today (token ids, the protocol and the
    token source are checked by :func:`_fields`); a field of any other type
    (added later) is checked by the strict converter.
    """
    json_types: dict[Any, tuple[type[Any], ...]] = {
        str: (str,),
        int: (int,),
        bool: (bool,),
        float: (float, int),
        str | None: (str, type(None)),
        int | None: (int, type(None)),
        float | None: (float, int, type(None)),
        dict[str, Any]: (dict,),
        dict[str, Any] | None: (dict, type(None)),
        Any: (dict, list, str, int, float, bool, type(None)),
        TokenSource: (str,),
    }
    special: dict[Any, Check] = {
        dict[str, str]: _headers,
        Usage | None: _usage,
        list[dict[str, Any]]: _objects,
    }
    types: dict[str, tuple[type[Any], ...]] = {}
    checks: dict[str, Check] = {}
    for name, hint in typing.get_type_hints(ModelCall).items():
        if name in _VALUE_CHECKED:
            continue
        if hint in json_types:
            types[name] = json_types[hint]
        else:
            checks[name] = special.get(hint) or _structured(hint)
    return types, checks


# -- whose calls: the rollout and the run a calls file belongs to ------------------------


def foreign_calls(calls: Sequence[ModelCall], *, rollout_id: str, run_id: str | None) -> str | None:
    """Why ``calls`` are not the calls of rollout ``rollout_id`` of the run whose
    manifest's ``run_id`` is ``run_id``, or None when every one of them is.

    A call belongs when it names the rollout and was recorded by the run (the same
    ``run_id``; a run written before runs had ids has none, and neither have its
    calls). A calls file copied from another run, or another rollout's file under
    this rollout's name, gives the first call that does not belong and why.
    """
    for call in calls:
        if call.rollout_id != rollout_id:
            return (
                f"call {call.index} is of rollout {call.rollout_id!r}, not {rollout_id!r}: "
                "the file is another rollout's"
            )
        if call.run_id != run_id:
            if call.run_id is None:
                found = "has no run id (it was written before runs had ids)"
            else:
                found = f"was recorded by run {call.run_id!r}"
            this = f"{run_id!r}" if run_id is not None else "none (an older run)"
            return f"call {call.index} {found}; this run's id is {this}: the file is another run's"
    return None
