"""A tiny model whose weights are set by hand to follow a script, so that real agent
programs finish a task against a real vLLM.

Random weights answer nonsense that never ends a turn, and a tiny model trained
on the CPU for minutes to follow a script did not carry it over to the agent
programs' prompts (thousands of tokens longer than those it could be trained
on in that time). This module writes the weights of a :mod:`tiny_models`
decoder directly, in about a second, so that its greedy answer is the script's,
token for token, on prompts of any length the server takes:

- a ``<think>`` block (:data:`THINK`: vLLM's ``qwen3`` reasoning parser
  splits it off as ``reasoning``), then either a Hermes tool call
  (``<tool_call>\\n{json}\\n</tool_call>``, which vLLM's ``hermes`` parser turns
  into ``tool_calls``, or the text Fleet's harness reads) or :data:`FINAL`, then
  the end of the turn;
- the call is the one of :data:`CALLS` for the first of its tools the prompt
  offers (a tool's name as the chat template, or Fleet's system prompt, writes it
  in JSON, ``"name": "bash"``, is one token of the tokenizer's own: a *marker*).
  It does the Harbor ``hello-world`` task in one call (:data:`COMMAND` writes the
  file, then prints mini-swe-agent's submit word, which ends mini-swe-agent's
  run), or Fleet's ``room-202-back-in-service``;
- after a tool's result (``<tool_response>``, or the ``Tool result:`` Fleet's
  harness sends one in) the answer is :data:`AFTER`'s for that tool (the terminal
  harness's ``submit``), else :data:`FINAL`; so is the answer to a prompt without
  the script's tools (a plain chat).

How (:func:`construct`): the residual stream is cut into named dimensions and
blocks of one-hot dimensions (the current token, the previous token, the next
token). In the first layer, two attention heads find the markers and the results
anywhere in the context: their queries and keys sit on the slowest rotary pair,
which ``rope_theta`` 1e12 keeps still over 32,768 positions, and the markers'
keys are graded in :data:`CALLS`' order. Other heads attend to the previous token
(queries and keys on the fastest rotary pairs, the query turned one position
back) and copy it. The first layer's MLP is a lookup table: one unit per (case,
previous token, current token) of the script (:func:`table`, which checks that
the pair fixes the next token), writing the next token, which the head maps to
the vocabulary.

So that a trainer's forward pass has something to reproduce, every answer's
distribution is a real one: random weights in a block of their own (random
embeddings, a random attention head in each layer, a random part of the head)
move every logit by about half a unit with the context, while the script's next
token leads the rest by six or more (most of the probability, never second: the
server decodes greedily, the model's generation config saying ``top_k`` 1). A
word changed in a 9,000-token prompt moves the answer's logprobs by about 3e-4.
The model is kept under the digest of its recipe (:data:`RECIPE`) and of this
module's text.
"""

from __future__ import annotations

import json
import math
from typing import Any

import attrs
from tiny_models import Recipe

__all__ = [
    "AFTER",
    "CALLS",
    "COMMAND",
    "FINAL",
    "REASONING",
    "RECIPE",
    "RESULTS",
    "THINK",
    "WORDS",
    "Case",
    "ScriptError",
    "answer",
    "cases",
    "construct",
    "marker",
    "table",
]

#: The reasoning of every answer, and the block it is in.
REASONING = "The task says what to do."
THINK = f"<think>\n{REASONING}\n</think>\n\n"
#: The command every shell call runs: it writes the file the Harbor ``hello-world``
#: task asks for, then prints mini-swe-agent's submit word (its first output line
#: ends mini-swe-agent's run; the other programs just show it).
COMMAND = "printf 'Hello, world!\\n' > /app/hello.txt && echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"
#: The answer after a tool's result, and to a prompt without the script's tools
#: (``<done>`` ends Fleet's episode; the programs end on an answer without a call).
FINAL = "Done. <done>"
DESCRIPTION = "Write the greeting"


def _call(name: str, arguments: dict[str, Any]) -> str:
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": arguments}) + "\n</tool_call>"


#: The answer to a prompt that offers a tool, by the tool's name; the first the
#: prompt offers wins.
CALLS: dict[str, str] = {
    # opencode (offers bash and todowrite; its bash asks for a description)
    "todowrite": _call("bash", {"command": COMMAND, "description": DESCRIPTION}),
    # Claude Code
    "Bash": _call("Bash", {"command": COMMAND, "description": DESCRIPTION}),
    # codex
    "exec_command": _call("exec_command", {"cmd": COMMAND}),
    # agentkit's terminal harness (then submit: AFTER)
    "shell": _call("shell", {"command": COMMAND}),
    # Fleet's tool-call harness, on the bookings environment's room-202-back-in-service
    "set_room_status": _call("set_room_status", {"room_id": 4, "status": "available"}),
    # mini-swe-agent
    "bash": _call("bash", {"command": COMMAND}),
}
#: The answer after a tool's result when the prompt offers this tool (else :data:`FINAL`):
#: the terminal harness's episode ends on its ``submit`` tool.
AFTER: dict[str, str] = {"shell": _call("submit", {})}
#: Tokens of the tokenizer's own that say a tool's result is in the prompt: the chat
#: template's tool turn, and the user turn Fleet's harness sends a result in.
RESULTS = ("<tool_response>", "Tool result:")


def _keys() -> list[str]:
    """The calls' argument keys as JSON writes them (``"command": ``): tokens of the
    tokenizer's own, so that what follows a key is fixed by the token before it."""
    keys: dict[str, None] = {}
    for text in [*CALLS.values(), *AFTER.values()]:
        for body in text.split("<tool_call>\n")[1:]:
            call = json.loads(body.split("\n</tool_call>")[0])
            keys.update({f'"{key}": ': None for key in call["arguments"]})
    return list(keys)


def marker(tool: str) -> str:
    """The token of the tokenizer's own that stands for ``tool``'s name, as the chat
    template (and Fleet's system prompt) writes it in JSON."""
    return f'"name": "{tool}"'


def answer(tool: str | None, after_result: bool = False) -> str:
    """What the model samples (before the end of the turn): the reasoning, then the
    script's answer to a prompt that offers ``tool`` (the first of :data:`CALLS` it
    offers; None: none of them) and holds a tool's result (``after_result``) or not."""
    if tool is None:
        return THINK + FINAL
    if after_result:
        return THINK + AFTER.get(tool, FINAL)
    return THINK + CALLS[tool]


class ScriptError(Exception):
    """The script cannot be written into the weights (a token's successor is not
    fixed by the token before it, or the model is too small)."""


_WORDS = """
the a an of to in for on with at by from as into about over after before under between
through during without within and or but not no if then else when while because so than
that this these those there here where which who whom whose what how why is are was were be
been being am has have had do does did done will would shall should can could may might must
it its they them their you your we our us he she his her i me my one two three first last
next each every all any some many more most other another such same only own file files
folder directory directories path paths line lines text content contents code source test
tests testing tool tools command commands run runs running ran call calls called use uses
used using user users assistant agent agents model models task tasks output outputs input
inputs result results error errors warning message messages response responses request
requests read reads write writes writing edit edits create creates created update delete
remove add added change changes changed make build check find search list show print open
close start stop string number integer boolean object array null true false type types name
names value values key keys default description parameters properties required items enum
example examples shell bash Bash exec cmd submit terminal program process python node npm
git diff patch branch commit repository project workspace environment system function
functions method class module package import export return returns argument arguments
option options config configuration setting settings new old current previous following
above below always never also just even still already again once important note notes
instructions instruction guidelines rules rule follow provide provided include includes
including don't can't won't isn't doesn't you're it's let's time date today day days hour
minutes seconds timeout limit limits max min size length count total data json yaml
markdown html url web http https api server client browser page avoid prefer ensure keep
sure need needs want like work working works worked complete completed finish finished good
better best bad wrong right correct exactly clear concise short long simple small large
question questions answer answers ask asks explain explanation describe summary whenever
unless until both either neither whether directly immediately carefully properly actually
really very much schema skill skills status context script id instead prompt set explicitly
specific available session multiple review goal app loop existing single background codebase
findings role token tokens something otherwise verify repo absolute back final pass grep
blocked apply cli asked query requested parallel pattern patterns defaults conversation level
step steps memory cache local information send permission permissions optional format match
replace wait words progress mode doing formatting actions finding fail inline report cannot
reminder editing reading execute full remote larger nothing state related budget possible
detail based rather usage structure load parameter fix maximum require omit filesystem coding
reference turn turns label help issue issues style say across action given see security part
matches exists empty prefix per fresh resume tell medium ids dynamic inside approval section
title end now keyword effort fork autonomous headers get hand explaining understand choice
perform bugs proactively contain workflows different external searching specify echo starts
least fast later image continue needed args via block confirmed put precedence sandbox bullet
strict feedback docs non outside means please relevant take written suggest know references
exact root specialized creating built txt access offset cat skip returned longer listed
guidance launch complex yourself calling general structured explicit install high takes
stream filename view header updates email invoke case off invoked self scope shown active
plain sessions pages literal const interactive guess give tone trivial displayed communicate
comments fewer watch implementation allowed approach making library look naming way feel
useful independent together named linux operations spaces specified head sed push hooks
minimum found occurrences select definition prior mark brief present relative plan judgment
whole mention service building deferred configured interval deploy override main listing
sentence further consecutive meta clarity free objective confident direct interface helpful
sentences quality details contains asking well language surrounding secrets adding
recommended sequentially solution lint tags policy order begin think allow location failed
executes room rooms booking bookings guest guests hello world done
"""
#: The words the tokenizer learns whole (its merges come from sentences of them):
#: the agent programs' prompts then take about half as many tokens.
WORDS = tuple(dict.fromkeys(_WORDS.split()))

#: The case head's scores (after the head's scaling): the markers in :data:`CALLS`'
#: order, each this much above the next; the result head's score of a result token.
MARKER_SCORE = 40.0
MARKER_STEP = 12.0
RESULT_SCORE = 40.0
#: How many of the fastest rotary pairs the previous-token heads use, and each pair's
#: amplitude: the score one position back then leads every other position's by over 40.
PREVIOUS_PAIRS = 12
PREVIOUS_AMPLITUDE = 24.0
#: The lookup units' gates are +-0.5 (times the norm's factor) times this.
GATE_SCALE = 10.0
#: ONE's value in every embedding: it dominates the residual stream's norm, so that
#: the norms' factors hardly move with the context; what the lookup writes (about
#: 100) dominates it in turn at the answer's tokens.
ONE = 8.0
NEXT_VALUE = 100.0
#: The size of the random block, the scale of its attention scores and of its logits
#: (about one either way), and the head's weight on the script's next token.
NOISE_DIMS = 64
NOISE_SCORE = 0.3
NOISE_LOGIT = 0.5
NEXT_LOGIT = 12.0
HEAD = 64


@attrs.frozen
class Case:
    """One way the script answers: the prompt offers ``tool`` (None: none of
    :data:`CALLS`) and holds a tool's result (``after_result``) or not. ``gate``:
    the weights (before :data:`GATE_SCALE`) a lookup unit of this answer gives the
    named dimensions of the residual stream."""

    tool: str | None
    after_result: bool
    gate: tuple[tuple[str, float], ...]

    @property
    def text(self) -> str:
        """What the model samples in this case (before the end of the turn)."""
        return answer(self.tool, self.after_result)


def cases() -> list[Case]:
    """Every way the script answers. In the residual stream ``one`` is 1 on every
    token, ``result`` is 1 when a tool's result is in the prompt, ``tool:<name>`` is 1
    for the first tool of :data:`CALLS` the prompt offers; a unit's current and
    previous tokens add 1 each. A unit fires at +0.5; every other combination of
    those is -0.5 or less."""
    tools = list(CALLS)
    out = [
        # none of the script's tools: FINAL, whatever else
        Case(None, False, (("one", -1.5), *((f"tool:{t}", -3.0) for t in tools))),
        # a tool's result, and a tool without an answer after one: FINAL
        Case(
            None,
            True,
            (
                ("one", -3.5),
                ("result", 1.0),
                *((f"tool:{t}", -3.0 if t in AFTER else 1.0) for t in tools),
            ),
        ),
    ]
    for tool in tools:
        out.append(Case(tool, False, (("one", -2.5), (f"tool:{tool}", 1.0), ("result", -3.0))))
        if tool in AFTER:
            out.append(Case(tool, True, (("one", -3.5), (f"tool:{tool}", 1.0), ("result", 1.0))))
    return out


def _tokens(tokenizer: Any, text: str) -> list[int]:
    ids: list[int] = tokenizer(text, add_special_tokens=False)["input_ids"]
    return ids


def _prompt_end(tokenizer: Any) -> list[int]:
    """The last two tokens of every prompt: the chat template's generation prompt."""
    text = tokenizer.apply_chat_template(
        [{"role": "user", "content": "x"}], add_generation_prompt=True, tokenize=False
    )
    return _tokens(tokenizer, text)[-2:]


def table(tokenizer: Any) -> dict[tuple[int, int, int], int]:
    """The script as a lookup: (case number in :func:`cases`, previous token, current
    token) -> next token, from the generation prompt's last two tokens to the end of
    the turn. Raises :class:`ScriptError` where a pair would need two successors."""
    end = _prompt_end(tokenizer)
    out: dict[tuple[int, int, int], int] = {}
    for n, case in enumerate(cases()):
        ids = [*end, *_tokens(tokenizer, case.text), tokenizer.eos_token_id]
        for prev, cur, nxt in zip(ids, ids[1:], ids[2:], strict=False):
            if out.setdefault((n, prev, cur), nxt) != nxt:
                pair = tokenizer.convert_ids_to_tokens([prev, cur])
                raise ScriptError(f"{case}: after {pair} the script has two next tokens")
    return out


@attrs.frozen
class Layout:
    """Where things are in the residual stream: named dimensions (``one``,
    ``generic``, ``result``, ``tool:<name>``), then three one-hot blocks of the
    script's tokens (``slot``: token -> place in a block): the current token
    (``cur0``), the previous one (``prev0``), the next one (``next0``), then the
    random block (``noise``). ``lookup`` is :func:`table`'s."""

    dim: dict[str, int]
    slot: dict[int, int]
    markers: list[int]
    results: list[int]
    lookup: dict[tuple[int, int, int], int]

    @property
    def cur0(self) -> int:
        return len(self.dim)

    @property
    def prev0(self) -> int:
        return self.cur0 + len(self.slot)

    @property
    def next0(self) -> int:
        return self.prev0 + len(self.slot)

    @property
    def noise(self) -> slice:
        start = self.next0 + len(self.slot)
        return slice(start, start + NOISE_DIMS)

    @property
    def previous_heads(self) -> int:
        """How many heads copy the previous token (64 of its block each)."""
        return math.ceil(len(self.slot) / HEAD)

    @classmethod
    def of(cls, tokenizer: Any, recipe: Recipe) -> Layout:
        """The layout of the script in a model of ``recipe``; :class:`ScriptError` when
        it does not fit."""
        lookup = table(tokenizer)
        markers = [tokenizer.convert_tokens_to_ids(marker(t)) for t in CALLS]
        results = [tokenizer.convert_tokens_to_ids(r) for r in RESULTS]
        known = {t for _, p, c in lookup for t in (p, c)} | set(lookup.values())
        tokens = sorted(known | set(markers) | set(results))
        names = ["one", "generic", "result", *(f"tool:{t}" for t in CALLS)]
        layout = cls(
            {name: n for n, name in enumerate(names)},
            {t: n for n, t in enumerate(tokens)},
            markers,
            results,
            lookup,
        )
        need = {
            "hidden": layout.noise.stop,
            "heads": 2 + layout.previous_heads + 1,
            "intermediate": len(lookup),
        }
        for what, wanted in need.items():
            if wanted > getattr(recipe, what):
                raise ScriptError(f"the script needs {what} {wanted}, the recipe has less")
        return layout


def construct(model: Any, tokenizer: Any, recipe: Recipe) -> None:
    """Write the script into ``model`` (a :mod:`tiny_models` Qwen2 decoder with untied
    embeddings, heads of 64 and ``rope_theta`` 1e12), in place; its random block
    seeded by ``recipe.seed``. Raises :class:`ScriptError` when it does not fit."""
    import torch  # deferred: heavy

    layout = Layout.of(tokenizer, recipe)
    generator = torch.Generator().manual_seed(recipe.seed)
    hidden = model.config.hidden_size
    # every embedding has the same norm, so the first norm's factor is this everywhere
    r0 = math.sqrt(hidden / (ONE**2 + 2))
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
        layers = model.model.layers
        for norm in [model.model.norm, *(n for x in layers for n in
                     (x.input_layernorm, x.post_attention_layernorm))]:  # fmt: skip
            norm.weight.fill_(1.0)
        _embeddings(model.model.embed_tokens.weight, layout, generator)
        attn = layers[0].self_attn
        markers = layout.markers
        _finder(attn, 0, layout, r0,
                {t: MARKER_SCORE + MARKER_STEP * (len(markers) - 1 - n)
                 for n, t in enumerate(markers)},
                {t: f"tool:{tool}" for t, tool in zip(markers, CALLS, strict=True)})  # fmt: skip
        _finder(attn, 1, layout, r0, dict.fromkeys(layout.results, RESULT_SCORE),
                dict.fromkeys(layout.results, "result"))  # fmt: skip
        _previous(attn, layout, r0, recipe.rope_theta)
        for layer in layers:
            _random_head(layer.self_attn, model.config.num_attention_heads - 1, layout, generator)
        _lookup(layers[0].mlp, layout, r0)
        head = model.lm_head.weight
        for t, n in layout.slot.items():
            head[t, layout.next0 + n] = 1.0
        head[:, layout.noise] = torch.randn(head.shape[0], NOISE_DIMS, generator=generator)
    _calibrate(model, tokenizer, slice(layout.next0, layout.noise.start), layout.noise)


def _embeddings(emb: Any, layout: Layout, generator: Any) -> None:
    """ONE on every token, 1 on the token's own dimension (GENERIC for a token outside
    the script), a random unit vector in the random block: one norm for all."""
    import torch  # deferred: heavy

    emb[:, layout.dim["one"]] = ONE
    emb[:, layout.dim["generic"]] = 1.0
    for t, n in layout.slot.items():
        emb[t, layout.dim["generic"]] = 0.0
        emb[t, layout.cur0 + n] = 1.0
    z = torch.randn(emb.shape[0], NOISE_DIMS, generator=generator)
    emb[:, layout.noise] = z / z.norm(dim=1, keepdim=True)


def _finder(
    attn: Any, head: int, layout: Layout, r0: float, keyed: dict[int, float], writes: dict[int, str]
) -> None:
    """Head ``head`` attends to the ``keyed`` tokens anywhere (by their scores; its query
    and keys on the slowest rotary pair, dims 31 and 63) and writes 1 to the named
    dimension of ``writes`` for the token it found."""
    row = head * HEAD
    slow = HEAD // 2 - 1
    attn.q_proj.bias[row + slow] = HEAD**0.5  # the head's scaling undone
    for t, score in keyed.items():
        attn.k_proj.weight[row + slow, layout.cur0 + layout.slot[t]] = score / r0
    for j, (t, name) in enumerate(writes.items()):
        attn.v_proj.weight[row + j, layout.cur0 + layout.slot[t]] = 1.0
        attn.o_proj.weight[layout.dim[name], row + j] = 1.0 / r0


def _previous(attn: Any, layout: Layout, r0: float, rope_theta: float) -> None:
    """Heads 2..: keys and queries on the fastest rotary pairs, the query turned one
    position back, so that each attends to the token before; each copies 64 places
    of the current-token block to the previous-token block."""
    import torch  # deferred: heavy

    pairs = torch.arange(PREVIOUS_PAIRS, dtype=torch.float64)
    theta = rope_theta ** (-2.0 * pairs / HEAD)
    for h in range(layout.previous_heads):
        row = (2 + h) * HEAD
        half = row + HEAD // 2
        attn.k_proj.bias[row : row + PREVIOUS_PAIRS] = PREVIOUS_AMPLITUDE
        attn.q_proj.bias[row : row + PREVIOUS_PAIRS] = PREVIOUS_AMPLITUDE * torch.cos(theta)
        attn.q_proj.bias[half : half + PREVIOUS_PAIRS] = -PREVIOUS_AMPLITUDE * torch.sin(theta)
        for j in range(HEAD):
            n = h * HEAD + j
            if n < len(layout.slot):
                attn.v_proj.weight[row + j, layout.cur0 + n] = 1.0
                attn.o_proj.weight[layout.prev0 + n, row + j] = 1.0 / r0


def _random_head(attn: Any, head: int, layout: Layout, generator: Any) -> None:
    """Head ``head``: random, reading and writing the random block."""
    import torch  # deferred: heavy

    rows, noise = slice(head * HEAD, (head + 1) * HEAD), layout.noise

    def randn(*shape: int) -> Any:
        return torch.randn(*shape, generator=generator)

    attn.q_proj.weight[rows, noise] = randn(HEAD, NOISE_DIMS) * NOISE_SCORE
    attn.k_proj.weight[rows, noise] = randn(HEAD, NOISE_DIMS) * NOISE_SCORE
    attn.v_proj.weight[rows, noise] = randn(HEAD, NOISE_DIMS) / math.sqrt(NOISE_DIMS)
    attn.o_proj.weight[noise, rows] = randn(NOISE_DIMS, HEAD) / math.sqrt(HEAD)


def _lookup(mlp: Any, layout: Layout, r0: float) -> None:
    """A unit per (case, previous token, current token) of the script: its gate is
    +0.5 (times the norm's factor and :data:`GATE_SCALE`) for that case and pair only,
    its up projection reads ONE, and it writes about :data:`NEXT_VALUE` to the next
    token's place."""
    every = cases()
    for unit, ((n, prev, cur), nxt) in enumerate(sorted(layout.lookup.items())):
        gate = mlp.gate_proj.weight[unit]
        gate[layout.cur0 + layout.slot[cur]] = GATE_SCALE
        gate[layout.prev0 + layout.slot[prev]] = GATE_SCALE
        for name, weight in every[n].gate:
            gate[layout.dim[name]] = weight * GATE_SCALE / (ONE if name == "one" else 1.0)
        mlp.up_proj.weight[unit, layout.dim["one"]] = 1.0 / ONE
        # silu(gate) * up is then about 0.5 * GATE_SCALE * r0 * r0
        mlp.down_proj.weight[layout.next0 + layout.slot[nxt], unit] = NEXT_VALUE / (
            0.5 * GATE_SCALE * r0 * r0
        )


def _sample(tool: str | None, after_result: bool) -> tuple[list[dict[str, Any]], Any]:
    """A short conversation the script answers with ``answer(tool, after_result)``."""
    tools = [
        {"type": "function", "function": {"name": name, "description": "A tool.",
                                          "parameters": {"type": "object", "properties": {}}}}
        for name in ([tool] if tool else []) + ["other"]
    ]  # fmt: skip
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are an agent."},
        {"role": "user", "content": "Create the file."},
    ]
    if after_result:
        function = {"name": tool or "other", "arguments": "{}"}
        call = {"id": "c", "type": "function", "function": function}
        messages += [
            {"role": "assistant", "content": "", "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "c", "content": "done"},
        ]
    return messages, tools


def _calibrate(model: Any, tokenizer: Any, script: slice, noise: slice) -> None:
    """Scale the head so that, over a sample of every case's answers, the script's next
    token's logit averages :data:`NEXT_LOGIT` and the random logits have a standard
    deviation of :data:`NOISE_LOGIT`."""
    import torch  # deferred: heavy

    picked: list[float] = []
    spread: list[float] = []
    head = model.lm_head.weight
    with torch.no_grad():
        for case in cases():
            messages, tools = _sample(case.tool, case.after_result)
            prompt = _tokens(
                tokenizer,
                tokenizer.apply_chat_template(
                    messages, tools=tools, add_generation_prompt=True, tokenize=False
                ),
            )
            said = [*_tokens(tokenizer, case.text), tokenizer.eos_token_id]
            out = model(torch.tensor([prompt + said]), output_hidden_states=True)
            final = out.hidden_states[-1][0, len(prompt) - 1 : -1]
            for row, target in zip(final, said, strict=True):
                picked.append(float(head[target, script] @ row[script]))
                spread.append(float((head[:, noise] @ row[noise]).std()))
        head[:, script] *= NEXT_LOGIT / (sum(picked) / len(picked))
        head[:, noise] *= NOISE_LOGIT / (sum(spread) / len(spread))


#: The scripted model: its weights set by :func:`construct` (``scripted`` names its
#: version, bumped whenever the script or the construction changes).
RECIPE = Recipe(
    seed=0,
    vocab_size=4096,
    hidden=512,
    heads=8,
    kv_heads=8,
    intermediate=512,
    rope_theta=1e12,
    lines=(THINK + FINAL, *CALLS.values(), *AFTER.values()),
    words=WORDS,
    added=(*(marker(t) for t in CALLS), "Tool result:", *_keys()),
    greedy=True,
    tied=False,
    scripted="scripted-v3",
)
