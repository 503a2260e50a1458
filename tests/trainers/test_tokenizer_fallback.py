"""``agentkit export --tokenizer PATH``: calls the server returned no token ids for get
ids from a local Hugging Face tokenizer, and their sequences say so.

The tokenizer is built here, offline (``tokenizers``' WordLevel model and a chat
template, saved with ``transformers``); the trainers session has transformers,
which the tests session does not.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from _calls_runs import make_run

from agentkit.testing.model_server import ScriptedModelServer

pytestmark = pytest.mark.anyio

#: The tiny tokenizer's vocabulary: a word's id is its place here (its pre-tokenizer cuts
#: text into runs of word characters and runs of other characters: ``<|``, ``user``, ``|>``).
WORDS = ["[UNK]", "<|", "|>", "user", "assistant", "q", "a", "2", "+", "3"]
TEMPLATE = (
    "{% for m in messages %}<|{{ m.role }}|> {{ m.content }} {% endfor %}"
    "{% if add_generation_prompt %}<|assistant|> {% endif %}"
)


def tiny_tokenizer(where: Path) -> object:
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    model = Tokenizer(models.WordLevel({w: i for i, w in enumerate(WORDS)}, unk_token="[UNK]"))
    model.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=model, unk_token="[UNK]")
    tokenizer.chat_template = TEMPLATE
    tokenizer.save_pretrained(where)
    return tokenizer


def export(run_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agentkit", "export", str(run_dir), *args],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


async def test_calls_without_ids_get_the_tokenizers_and_are_marked(
    tmp_path: Path, model_server: ScriptedModelServer
) -> None:
    run_dir = await make_run(tmp_path, model_server)  # its last rollout's call 1 has no ids
    tokenizer = tiny_tokenizer(tmp_path / "tok")
    out = tmp_path / "train.jsonl"
    done = export(run_dir, "--out", str(out), "--tokenizer", str(tmp_path / "tok"))
    assert done.returncode == 0, done.stderr
    records = [json.loads(x) for x in out.read_text().splitlines()]
    made = [r for r in records if r["token_source"] == "tokenizer"]
    (record,) = made
    assert record["calls"] == [1] and record["sequence_start"] == "prefix_break"
    # the chat template's own rendering of the call's request and of it with the answer
    # (the calls file's: the user's "q", the assistant's "a"), tokenized word by word
    messages = [{"role": "user", "content": "q"}]
    rendered = tokenizer.apply_chat_template(  # type: ignore[attr-defined]
        messages, add_generation_prompt=True, tokenize=False
    )
    answered = tokenizer.apply_chat_template(  # type: ignore[attr-defined]
        [*messages, {"role": "assistant", "content": "a"}], tokenize=False
    )
    assert rendered == "<|user|> q <|assistant|> " and answered == "<|user|> q <|assistant|> a "
    vocab = {w: i for i, w in enumerate(WORDS)}
    assert record["prompt_token_ids"] == [
        vocab[w] for w in ["<|", "user", "|>", "q", "<|", "assistant", "|>"]
    ]
    assert record["completion_token_ids"] == [vocab["a"]]  # what the answer adds to it
    assert record["completion_mask"] == [1]
    assert record["completion_logprobs"] is None  # the sampler's are not known
    rest = [r for r in records if r["rollout_id"] == record["rollout_id"] and r is not record]
    assert [r["token_source"] for r in rest] == ["server"]  # call 0: the server's ids
    assert "made by a local tokenizer" in done.stderr

    # without --tokenizer nothing is re-tokenized; --require-token-ids refuses the fallback
    plain = export(run_dir, "--out", str(tmp_path / "plain.jsonl"))
    assert plain.returncode == 0, plain.stderr
    plain_records = [json.loads(x) for x in (tmp_path / "plain.jsonl").read_text().splitlines()]
    assert {r["token_source"] for r in plain_records} == {"server"}
    strict = export(run_dir, "--tokenizer", str(tmp_path / "tok"), "--require-token-ids")
    assert strict.returncode == 2 and "made by a local tokenizer" in strict.stderr


async def test_verifiers_trains_nothing_of_a_sequence_without_the_samplers_logprobs(
    tmp_path: Path, model_server: ScriptedModelServer
) -> None:
    """A tokenizer's ids come without the sampler's logprobs: in the verifiers file
    their sequence's branch has no trainable token (verifiers reads a missing logprob
    as 0.0, and prime-rl would train on it), and says why; the others are as they were."""
    import verifiers.v1 as vf

    run_dir = await make_run(tmp_path, model_server)
    tiny_tokenizer(tmp_path / "tok")
    out = tmp_path / "v.jsonl"
    done = export(run_dir, "--format", "verifiers", "--out", str(out),
                  "--tokenizer", str(tmp_path / "tok"))  # fmt: skip
    assert done.returncode == 0, done.stderr
    traces = [vf.WireTrace.model_validate_json(x) for x in out.read_text().splitlines()]
    logprobs = {t.id: [s["logprobs"] for s in t.info["agentkit"]["sequences"]] for t in traces}
    (trace,) = [t for t in traces if False in logprobs[t.id]]  # the capital rollout's call 1
    assert logprobs[trace.id] == [True, False]
    server_ids, made = trace.branches
    assert not any(made.sampled_mask)  # nothing to train; the tokens are all kept:
    vocab = {w: i for i, w in enumerate(WORDS)}
    words = ["<|", "user", "|>", "q", "<|", "assistant", "|>", "a"]
    assert made.token_ids == [vocab[w] for w in words]
    assert any(server_ids.sampled_mask)  # call 0's own ids and logprobs: trainable
    sampled = [lp for lp, m in zip(server_ids.logprobs, server_ids.sampled_mask, strict=True) if m]
    assert sampled == [-1.0, -0.5]


async def test_a_path_without_a_tokenizer_is_one_clear_error(
    tmp_path: Path, model_server: ScriptedModelServer
) -> None:
    run_dir = await make_run(tmp_path, model_server)
    (tmp_path / "empty").mkdir()
    done = export(run_dir, "--tokenizer", str(tmp_path / "empty"))
    assert done.returncode == 2
    assert f"{tmp_path / 'empty'}: cannot load a tokenizer from it" in done.stderr
    assert "Traceback" not in done.stderr
