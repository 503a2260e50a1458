"""A tiny model trained on the spot to answer in a script's shapes.

Random weights answer nonsense that never ends a turn. This module trains a
:mod:`tiny_models` model on the CPU, for about a minute on a quiet machine (150
steps of 8 random prompts), to answer as a reasoning model with tools does:
a ``<think>`` block (vLLM's ``deepseek_r1`` reasoning parser splits it off as
``reasoning``), then either a text answer or a Hermes tool call
(``<tool_call>{json}</tool_call>``, which vLLM's ``hermes`` parser turns into
``tool_calls``), and the end-of-turn token. The server's answers then have
every part whose tokens the proxy must get right: reasoning, text, a tool
call's wrapper and arguments, the end of the turn.

The script (:data:`PROFILES`) names one fixed conversation per agent program
(the program's shell tool, then a final answer or its submit command), told
apart by tokens of the tokenizer's own (a tool's name as the chat template
writes it in the tool list, ``"name": "bash"``, or mini-swe-agent's submit
word) and by whether a tool's result (``<tool_response>``) is in the prompt.
In this training budget the model learns the shapes, a text answer without
tools and a tool call with them, but not yet to tell the programs apart: it
answers every prompt with tools with the same ``bash`` call. The training
prompts are random text around those tokens (tools with random names and
descriptions, system and user texts of random words), so that what is
learnt is the tokens and the turn, not any one program's prompt.
"""

from __future__ import annotations

import json
import random
import time
from typing import Any

import attrs
from tiny_models import Recipe

__all__ = ["PROFILES", "RECIPE", "THINK", "Profile", "answers", "train"]

#: The reasoning every answer starts with.
THINK = "<think>\nThe task says what to do.\n</think>\n\n"
#: The file the Harbor ``hello-world`` task asks for, and its text.
WRITE = "printf 'Hello, world!\\n' > /app/hello.txt"
SUBMIT = "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"
DONE = "Created /app/hello.txt."


@attrs.frozen
class Profile:
    """One scripted conversation: the ``marker`` token (a tokenizer token that only
    this profile's prompts hold; empty: none of the others'), and the answer text of
    each turn (after :data:`THINK`)."""

    marker: str
    turns: tuple[str, ...]


def _call(name: str, arguments: dict[str, Any]) -> str:
    body = json.dumps({"name": name, "arguments": arguments})
    return f"<tool_call>\n{body}\n</tool_call>"


#: The profiles, by the tool list's token that tells them apart (most specific first).
PROFILES: dict[str, Profile] = {
    "mini-swe-agent": Profile(
        "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT",
        (_call("bash", {"command": WRITE}), _call("bash", {"command": SUBMIT})),
    ),
    "codex": Profile('"name": "exec_command"', (_call("exec_command", {"cmd": WRITE}), DONE)),
    "claude-code": Profile(
        '"name": "Bash"',
        (_call("Bash", {"command": WRITE, "description": "Write the greeting"}), DONE),
    ),
    "terminal": Profile(
        '"name": "shell"',
        (_call("shell", {"command": WRITE}), _call("submit", {})),
    ),
    "opencode": Profile(
        '"name": "bash"',
        (_call("bash", {"command": WRITE, "description": "Write the greeting"}), DONE),
    ),
    "chat": Profile("", ("Hello, world! The answer is 9.",)),
}

#: Tokens of the tokenizer's own for the profiles' markers.
MARKERS = tuple(p.marker for p in PROFILES.values() if p.marker)

_WORDS = [
    "the",
    "a",
    "an",
    "of",
    "to",
    "in",
    "for",
    "on",
    "with",
    "file",
    "files",
    "tool",
    "tools",
    "command",
    "commands",
    "run",
    "runs",
    "user",
    "assistant",
    "task",
    "tasks",
    "output",
    "input",
    "you",
    "your",
    "must",
    "should",
    "can",
    "will",
    "not",
    "never",
    "always",
    "use",
    "using",
    "read",
    "write",
    "edit",
    "list",
    "search",
    "find",
    "path",
    "directory",
    "code",
    "test",
    "tests",
    "answer",
    "question",
    "result",
    "results",
    "error",
    "errors",
    "line",
    "lines",
    "text",
    "json",
    "value",
    "values",
    "when",
    "if",
    "then",
    "else",
    "each",
    "every",
    "all",
    "any",
    "this",
    "that",
    "these",
    "those",
    "it",
    "is",
    "are",
    "be",
    "was",
    "agent",
    "model",
    "system",
    "message",
    "messages",
    "work",
    "working",
    "shell",
    "terminal",
    "program",
    "python",
    "git",
    "diff",
    "patch",
    "apply",
    "create",
    "update",
    "delete",
    "make",
    "build",
    "check",
    "call",
    "calls",
    "return",
    "string",
    "number",
    "object",
    "array",
    "boolean",
    "true",
    "false",
    "null",
    "name",
    "names",
    "description",
    "type",
    "parameters",
    "properties",
    "required",
    "items",
    "enum",
    "default",
    "example",
    "examples",
    "note",
    "important",
]
_PUNCT = [".", ",", ":", ";", "!", "?", "(", ")", "-", "/", "`", "\n", "\n\n", " -", "#", "*"]


def _text(rng: random.Random, words: int) -> str:
    out = []
    for _ in range(words):
        word = rng.choice(_WORDS)
        if rng.random() < 0.1:
            word = word.capitalize()
        out.append(word)
        if rng.random() < 0.15:
            out.append(rng.choice(_PUNCT))
    return " ".join(out)


def _tool(rng: random.Random, name: str) -> dict[str, Any]:
    params = {
        w: {"type": "string", "description": _text(rng, rng.randint(1, 5))}
        for w in rng.sample(_WORDS, rng.randint(1, 3))
    }
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": _text(rng, rng.randint(2, 12)),
            "parameters": {"type": "object", "properties": params, "required": list(params)[:1]},
        },
    }


def _prompt(
    rng: random.Random, profile: str, turn: int, tool_name: str | None
) -> tuple[list[dict[str, Any]], list[dict[str, Any]] | None]:
    marker = PROFILES[profile].marker
    tools: list[dict[str, Any]] | None = None
    system = _text(rng, rng.choice([0, 8, 30, 60]))
    user = _text(rng, rng.randint(3, 30))
    if profile == "mini-swe-agent":
        system += f" When done, run `{SUBMIT}` alone. " + _text(rng, rng.randint(0, 50))
    if tool_name is not None:
        names = [tool_name] + [
            rng.choice(_WORDS) + rng.choice(["", "_x", "s", "er"]) for _ in range(rng.randint(0, 3))
        ]
        rng.shuffle(names)
        tools = [_tool(rng, n) for n in names]
    if not marker and rng.random() < 0.5:
        tools = None
    messages: list[dict[str, Any]] = []
    if system:
        messages.append({"role": "system", "content": system})
    messages.append({"role": "user", "content": user})
    if turn > 0:
        said = PROFILES[profile].turns[0]
        call = json.loads(said.split("\n")[1]) if said.startswith("<tool_call>") else None
        if call is not None:
            messages.append(
                {
                    "role": "assistant",
                    "content": rng.choice(["", None]),
                    "tool_calls": [
                        {
                            "id": "call_1",
                            "type": "function",
                            "function": {
                                "name": call["name"],
                                "arguments": json.dumps(call["arguments"]),
                            },
                        }
                    ],
                }
            )
        messages.append(
            {"role": "tool", "tool_call_id": "call_1", "content": _text(rng, rng.randint(0, 30))}
        )
    return messages, tools


def _tool_name(profile: str) -> str | None:
    marker = PROFILES[profile].marker
    if marker.startswith('"name": "'):
        return marker[len('"name": "') : -1]
    if profile == "mini-swe-agent":
        return "bash"
    return None


def answers(profile: str) -> list[str]:
    """The completion text of each turn of ``profile`` (what the model is trained to
    sample: the reasoning, then the turn's answer)."""
    return [THINK + turn for turn in PROFILES[profile].turns]


def _example(rng: random.Random, tokenizer: Any) -> tuple[list[int], list[int]]:
    profile = rng.choice(list(PROFILES))
    turns = PROFILES[profile].turns
    turn = rng.randrange(len(turns))
    messages, tools = _prompt(rng, profile, turn, _tool_name(profile))
    prompt = tokenizer.apply_chat_template(
        messages, tools=tools, add_generation_prompt=True, tokenize=False
    )
    ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
    target = tokenizer(THINK + turns[turn], add_special_tokens=False)["input_ids"] + [
        tokenizer.eos_token_id
    ]
    return ids, target


def train(model: Any, tokenizer: Any, recipe: Any) -> None:
    """Train ``model`` (in place) on random prompts of every profile, the loss on the
    answers only: ``recipe.training`` gives ``steps``, ``batch`` and ``lr``."""
    import torch  # deferred: heavy

    settings = dict(recipe.training)
    steps, batch, lr = int(settings["steps"]), int(settings["batch"]), float(settings["lr"])
    rng = random.Random(recipe.seed)
    torch.manual_seed(recipe.seed)
    torch.set_num_threads(max(1, torch.get_num_threads()))
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    schedule = torch.optim.lr_scheduler.OneCycleLR(
        optimizer, max_lr=lr, total_steps=steps, pct_start=0.1
    )
    pad = tokenizer.pad_token_id
    started = time.monotonic()
    for step in range(steps):
        examples = [_example(rng, tokenizer) for _ in range(batch)]
        width = max(len(p) + len(t) for p, t in examples)
        inputs = torch.full((batch, width), pad, dtype=torch.long)
        labels = torch.full((batch, width), -100, dtype=torch.long)
        mask = torch.zeros((batch, width), dtype=torch.long)
        for row, (prompt, target) in enumerate(examples):
            whole = prompt + target
            inputs[row, : len(whole)] = torch.tensor(whole)
            labels[row, len(prompt) : len(whole)] = torch.tensor(target)
            mask[row, : len(whole)] = 1
        loss = model(input_ids=inputs, attention_mask=mask, labels=labels).loss
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        if step % 20 == 0 or step == steps - 1:
            print(
                f"step {step} loss {loss.item():.4f} at {time.monotonic() - started:.0f} s",
                flush=True,
            )
    model.eval()


#: The scripted model: trained (``trained`` names this module's script, its version
#: bumped whenever the script or the training changes) on the profiles' answers.
RECIPE = Recipe(
    seed=0,
    vocab_size=1024,
    hidden=128,
    heads=2,
    kv_heads=1,
    intermediate=256,
    lines=tuple(a for p in PROFILES for a in answers(p)),
    added=MARKERS,
    trained="scripted-v1",
    training=(("steps", 150), ("batch", 8), ("lr", 3e-3)),
)
