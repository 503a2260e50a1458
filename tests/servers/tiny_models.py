"""Tiny models made on the spot, for a real inference server on the CPU.

:func:`build` writes a Hugging Face model directory (``config.json``, weights in
safetensors, ``tokenizer.json`` and a chat template) that vLLM serves: a
Qwen2-style decoder of two layers with attention heads of 64 (the smallest the
CPU attention kernels take), in float32, with a byte-level BPE tokenizer trained
by ``tokenizers`` on a few lines and a ChatML chat template with Hermes tool
calls (``<tool_call>{json}</tool_call>``) and ``<think>`` blocks. Everything
follows from the :class:`Recipe` (a seed included): the same recipe gives the
same files, and a directory is kept under the digest of its recipe, so a second
build is a lookup.

Two kinds of weights: random ones (the tokens are nonsense, but every token
check holds for nonsense as for sense), and weights set by hand to follow a
fixed script (:mod:`scripted_model`), so that real agent programs finish a task
against the real server.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
from pathlib import Path
from typing import Any

import attrs

__all__ = [
    "CHAT_TEMPLATE",
    "RANDOM",
    "SPECIAL_TOKENS",
    "TEXT_TOKENS",
    "Recipe",
    "build",
    "digest",
]

#: Special tokens (skipped when text is decoded): the turn markers.
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
#: Tokens of their own that stay in the decoded text, as in Qwen's vocabularies:
#: vLLM's Hermes tool parser and its ``qwen3`` reasoning parser look for them.
TEXT_TOKENS = [
    "<tool_call>",
    "</tool_call>",
    "<tool_response>",
    "</tool_response>",
    "<think>",
    "</think>",
]

#: A ChatML template with tools (in the system turn), Hermes tool calls in assistant
#: turns, tool results as ``<tool_response>`` user turns, and reasoning kept as a
#: ``<think>`` block. Content given as parts is joined.
CHAT_TEMPLATE = r"""
{%- macro text(content) -%}
{%- if content is string -%}{{ content }}
{%- elif content -%}
{%- for part in content -%}{%- if part.text is defined -%}{{ part.text }}{%- endif -%}{%- endfor -%}
{%- endif -%}
{%- endmacro -%}
{%- set first = messages[0] if messages else none -%}
{%- if tools or (first and first.role in ['system', 'developer']) -%}
<|im_start|>system
{% if first and first.role in ['system', 'developer'] %}{{ text(first.content) }}{% endif %}
{%- if tools %}

# Tools

<tools>
{%- for tool in tools %}
{{ (tool.function if tool.function is defined else tool) | tojson }}
{%- endfor %}
</tools>

Call a tool as <tool_call>
{"name": <name>, "arguments": <arguments>}
</tool_call>
{%- endif %}<|im_end|>
{% endif -%}
{%- for message in messages -%}
{%- if loop.first and message.role in ['system', 'developer'] -%}
{%- elif message.role == 'assistant' -%}
<|im_start|>assistant
{% if message.reasoning is defined and message.reasoning %}<think>
{{ message.reasoning }}
</think>

{% elif message.reasoning_content is defined and message.reasoning_content %}<think>
{{ message.reasoning_content }}
</think>

{% endif %}{{ text(message.content) }}
{%- if message.tool_calls -%}
{%- for call in message.tool_calls -%}
{%- set f = call.function if call.function is defined else call -%}
{%- set args = f.arguments if f.arguments is string else (f.arguments | tojson) -%}
{%- if loop.first and text(message.content) %}
{% endif -%}
<tool_call>
{"name": "{{ f.name }}", "arguments": {{ args }}}
</tool_call>
{%- endfor -%}
{%- endif -%}
<|im_end|>
{% elif message.role == 'tool' -%}
<|im_start|>user
<tool_response>
{{ text(message.content) }}
</tool_response><|im_end|>
{% else -%}
<|im_start|>{{ message.role }}
{{ text(message.content) }}<|im_end|>
{% endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}
<|im_start|>assistant
{% endif -%}
"""

#: The lines the tokenizer learns its merges from (with the script's own texts).
_LINES = [
    "You are a helpful assistant. Answer the question, or call a tool.",
    "The quick brown fox jumps over the lazy dog.",
    'def hello():\n    print("Hello, world!")\n',
    '{"name": "bash", "arguments": {"command": "ls -la"}}',
    "Create the file /app/hello.txt with the text Hello, world!",
    "The answer is 42. Let me check the file first.",
]


@attrs.frozen
class Recipe:
    """Everything a tiny model is made from: its directory is a function of this.

    ``vocab_size`` bounds the tokenizer's vocabulary (its merges are learnt from
    :data:`_LINES` and ``lines``); ``hidden``, ``layers``, ``heads`` (of 64 each
    but for ``hidden // heads``) and ``intermediate`` shape the decoder;
    ``max_positions`` is the context it accepts; ``rope_theta`` the base of its
    rotary positions; ``words``: words the tokenizer learns whole (it learns its
    merges from :data:`SENTENCES` seeded sentences of them too: agent programs'
    prompts then take about half the tokens); ``added``: more tokens of the
    tokenizer's own, kept in decoded text (a tool's name as the chat template
    writes it, say); ``greedy``: the model's generation config asks for greedy
    decoding (``top_k`` 1, which vLLM takes as the default of a request that does
    not say), so that a script is followed token for token; ``tied``: the head
    shares the embeddings' weights. ``scripted`` names the version of
    :mod:`scripted_model`'s script whose weights the model gets (its module's
    text is in the digest too), or is empty for random weights.
    """

    seed: int = 0
    vocab_size: int = 1024
    hidden: int = 128
    layers: int = 2
    heads: int = 2
    kv_heads: int = 1
    intermediate: int = 256
    max_positions: int = 32768
    rope_theta: float = 1_000_000.0
    lines: tuple[str, ...] = ()
    words: tuple[str, ...] = ()
    added: tuple[str, ...] = ()
    greedy: bool = False
    tied: bool = True
    scripted: str = ""

    def as_dict(self) -> dict[str, Any]:
        return attrs.asdict(self)


#: How many sentences of a recipe's ``words`` the tokenizer learns its merges from.
SENTENCES = 4000


def sentences(words: tuple[str, ...], seed: int, count: int = SENTENCES) -> list[str]:
    """``count`` lines of 40 of ``words`` each (chosen with a generator seeded by
    ``seed``, a tenth capitalised, punctuation between some), for the tokenizer."""
    rng = random.Random(seed)
    punct = [".", ",", ":", "(", ")", "-", "/", "`", "\n", "\n\n", "\n- ", '"', "'", "_"]
    out = []
    for _ in range(count):
        line = []
        for _ in range(40):
            word = rng.choice(words)
            line.append(word.capitalize() if rng.random() < 0.1 else word)
            if rng.random() < 0.15:
                line.append(rng.choice(punct))
        out.append(" ".join(line))
    return out


def digest(recipe: Recipe) -> str:
    """The first 16 hex digits of the SHA-256 of the recipe (its JSON, sorted keys), of
    what every recipe shares (the chat template, the tokenizer's lines and tokens) and,
    for a scripted model, of :mod:`scripted_model`'s text."""
    shared = [CHAT_TEMPLATE, _LINES, SPECIAL_TOKENS, TEXT_TOKENS, SENTENCES]
    if recipe.scripted:
        shared.append(Path(__file__).with_name("scripted_model.py").read_text())
    text = json.dumps([recipe.as_dict(), shared], sort_keys=True, default=repr)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _tokenizer(recipe: Recipe) -> Any:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers  # deferred: heavy

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=recipe.vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    corpus = [*_LINES, *recipe.lines]
    if recipe.words:
        corpus += sentences(recipe.words, recipe.seed)
    tok.train_from_iterator(corpus, trainer=trainer)
    from tokenizers import AddedToken  # deferred: heavy

    kept = [*TEXT_TOKENS, *recipe.added]
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in kept])
    return tok


def _save_tokenizer(recipe: Recipe, out: Path) -> Any:
    from transformers import PreTrainedTokenizerFast  # deferred: heavy

    fast = PreTrainedTokenizerFast(
        tokenizer_object=_tokenizer(recipe),
        bos_token=None,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        unk_token=None,
    )
    fast.chat_template = CHAT_TEMPLATE.strip("\n")
    fast.save_pretrained(out)
    return fast


def _model(recipe: Recipe, vocab: int, eos: int, pad: int) -> Any:
    import torch  # deferred: heavy
    from transformers import Qwen2Config, Qwen2ForCausalLM  # deferred: heavy

    config = Qwen2Config(
        vocab_size=vocab,
        hidden_size=recipe.hidden,
        intermediate_size=recipe.intermediate,
        num_hidden_layers=recipe.layers,
        num_attention_heads=recipe.heads,
        num_key_value_heads=recipe.kv_heads,
        max_position_embeddings=recipe.max_positions,
        rope_theta=recipe.rope_theta,
        tie_word_embeddings=recipe.tied,
        eos_token_id=eos,
        pad_token_id=pad,
        bos_token_id=None,
        torch_dtype="float32",
    )
    torch.manual_seed(recipe.seed)
    model = Qwen2ForCausalLM(config)
    model.eval()
    return model


def build(recipe: Recipe, cache: Path) -> Path:
    """The model directory of ``recipe`` under ``cache`` (``cache/<digest>``), made
    when missing (in a temporary directory, then renamed: a build that stopped
    half-way is never taken)."""
    out = cache / digest(recipe)
    if (out / "done").exists():
        return out
    cache.mkdir(parents=True, exist_ok=True)
    work = cache / f".{out.name}.{os.getpid()}"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir()
    fast = _save_tokenizer(recipe, work)
    vocab = len(fast)
    eos = fast.convert_tokens_to_ids("<|im_end|>")
    pad = fast.convert_tokens_to_ids("<|endoftext|>")
    model = _model(recipe, vocab, eos, pad)
    if recipe.scripted:
        import scripted_model  # deferred: the script's weights, beside this module

        scripted_model.construct(model, fast, recipe)
    model.save_pretrained(work, safe_serialization=True)
    if recipe.greedy:
        generation = json.loads((work / "generation_config.json").read_text())
        (work / "generation_config.json").write_text(json.dumps({**generation, "top_k": 1}))
    (work / "recipe.json").write_text(json.dumps(recipe.as_dict(), sort_keys=True, default=repr))
    (work / "done").write_text("")
    shutil.rmtree(out, ignore_errors=True)
    os.replace(work, out)
    return out


#: Random weights: nonsense answers, every token check holds all the same.
RANDOM = Recipe()
