"""A real RL loop on a laptop CPU: a tiny model served by vLLM, trained live through
agentkit's rollout service.

- **The policy.** A tiny Qwen2-style model (any small Hugging Face model
  directory; the ``servers`` session passes the one tests/servers/tiny_models.py
  makes). Its starting point is made from it here (:func:`make_base`): the head
  is untied and set so that, after the task's prompt, the four letters A-D hold
  most of the probability (about a fifth each), the other tokens share the
  rest. Training changes a LoRA adapter (rank 8 on every layer's ``o_proj`` and
  ``down_proj``); version 0 is the base model, version ``v`` the base with the
  adapter of step ``v``.
- **The server.** vLLM's CPU build (``--enable-lora``, runtime LoRA loading),
  float32 and eager, as the ``servers`` session serves its models. After each
  step the trainer writes the new adapter in PEFT's layout, loads it by a new
  name (``POST /v1/load_lora_adapter``) and announces it:
  ``service.set_policy(v, model=name)``. A call tagged ``v`` is sent to the
  adapter of ``v`` by name, so the tag and the weights that answered cannot
  disagree, even for calls in flight across an update.
- **The rollouts.** agentkit's :class:`~agentkit.service.RolloutService` over the
  chat harness on one JSONL task (``tasks.jsonl``: "Pick one letter", rewarded
  1 for ``C`` only; one token per answer), groups of 4, records without the
  overlong filter (every answer stops for length).
- **The step.** Plain ``torch``: the trainer reads each delivered group's
  training records (exact token ids, the sampler's logprobs, masks, GRPO
  advantages), checks them, and takes one clipped importance-sampling step
  (PPO's objective, ratio against the sampler's logprobs) with Adam.

It shows the machinery is right, and checks it as it goes:

(a) every delivered sequence's sampled tokens get, from the trainer's own
    forward pass under the policy version its records name, the logprob the
    server recorded (``|delta| <`` :data:`TOLERANCE`);
(b) no delivered group is more than ``max_staleness`` versions behind the
    trainer's current version, counted from its calls' own ``policy_version``;
(c) the reward rises: the mean reward of the delivered groups, and the
    policy's own probability of the rewarded answer at each version.

It runs the loop with ``max_staleness`` 0 (synchronous) and 2 (two steps of
groups asked for ahead, stale ones dropped), prints one JSON line per step and
writes ``summary.json``; the exit status is 1 when a check failed::

    python examples/train-tiny/train.py --vllm .cache/vllm/venv/bin/vllm \\
        --model TINY_MODEL_DIR --out runs/train-tiny
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import resource
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import aiohttp
import torch
from safetensors.torch import save_file
from transformers import AutoModelForCausalLM, AutoTokenizer

from agentkit.env import AgentEnv, RunOptions
from agentkit.service import RecordOptions, RolloutService, ServiceGroup
from agentkit.training import TrainingRecord

PROMPT = "Pick one letter: A, B, C or D."
ANSWER = "C"
LETTERS = ("A", "B", "C", "D")
#: The letters' logit after the prompt in the base model (the others' are near 0):
#: with about 1000 tokens, the four hold about 80% together.
LETTER_LOGIT = 7.0
#: The size of each letter's own direction in the head (the other rows' are about 0.2).
LETTER_SPREAD = 0.1
SERVED = "tiny"
RANK = 8
LORA_ALPHA = 16
TARGETS = ("o_proj", "down_proj")
GROUP_SIZE = 4
GROUPS_PER_STEP = 2
STEPS = 8
LEARNING_RATE = 0.001
CLIP = 0.2
#: How far a recomputed logprob may be from the sampler's (float32 on the CPU), as
#: tests/servers' trainer check.
TOLERANCE = 1e-4
START_WITHIN = 600.0


def make_base(source: Path, out: Path) -> Path:
    """The starting policy: ``source``'s weights with an untied head whose rows for
    the letters A-D give each the logit :data:`LETTER_LOGIT` after the prompt."""
    tokenizer = AutoTokenizer.from_pretrained(source)
    model: Any = AutoModelForCausalLM.from_pretrained(source, dtype=torch.float32)
    model.config.tie_word_embeddings = False
    head = model.get_input_embeddings().weight.detach().clone()
    ids = prompt_ids(tokenizer)
    with torch.no_grad():
        decoder: Any = model.model  # the layers and the final norm, without the head
        hidden = decoder(torch.tensor([ids])).last_hidden_state[0, -1]
        generator = torch.Generator().manual_seed(0)
        for letter in LETTERS:
            # a direction of its own (that the adapter can move the hidden state
            # along) and, along the prompt's hidden state, the logit LETTER_LOGIT
            row = torch.randn(head.shape[1], generator=generator) * LETTER_SPREAD
            row -= (row @ hidden) * hidden / (hidden @ hidden)
            head[letter_token(tokenizer, letter)] = row + LETTER_LOGIT * hidden / (hidden @ hidden)
    model.lm_head.weight = torch.nn.Parameter(head)
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    return out


def prompt_ids(tokenizer: Any) -> list[int]:
    """The prompt's token ids as the chat harness sends it (one user message)."""
    ids = tokenizer.apply_chat_template(
        [{"role": "user", "content": PROMPT}], add_generation_prompt=True, tokenize=True
    )
    return list(ids["input_ids"] if isinstance(ids, dict) or hasattr(ids, "keys") else ids)


def letter_token(tokenizer: Any, letter: str) -> int:
    """The id of the single token ``letter``."""
    ids = tokenizer.encode(letter, add_special_tokens=False)
    if len(ids) != 1:
        raise SystemExit(f"the tokenizer splits {letter!r} into {ids}: pick another answer")
    return int(ids[0])


class LoRALinear(torch.nn.Module):
    """A frozen linear layer plus a trainable low-rank update, ``(x A^T B^T) * alpha/r``,
    as PEFT and vLLM define it."""

    def __init__(self, base: torch.nn.Linear, generator: torch.Generator) -> None:
        super().__init__()
        self.base = base
        self.scale = LORA_ALPHA / RANK
        bound = 1 / math.sqrt(base.in_features)
        a = (torch.rand(RANK, base.in_features, generator=generator) * 2 - 1) * bound
        self.lora_a = torch.nn.Parameter(a)
        self.lora_b = torch.nn.Parameter(torch.zeros(base.out_features, RANK))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """The base layer's output plus the adapter's."""
        out: torch.Tensor = self.base(x) + (x @ self.lora_a.T @ self.lora_b.T) * self.scale
        return out


class Trainer:
    """The policy in plain ``torch``: the base model frozen, a LoRA adapter trained, and
    the adapter of every version kept (to recompute a stale group's logprobs)."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.model: Any = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
        # in eval mode as loaded (no dropout); only the adapter is trained
        for p in self.model.parameters():
            p.requires_grad_(False)
        generator = torch.Generator().manual_seed(0)
        self.layers: dict[str, LoRALinear] = {}
        for name, module in list(self.model.named_modules()):
            for child in TARGETS:
                linear = getattr(module, child, None)
                if isinstance(linear, torch.nn.Linear):
                    lora = LoRALinear(linear, generator)
                    setattr(module, child, lora)
                    self.layers[f"{name}.{child}"] = lora
        self.initial = self.snapshot()
        self.reset()

    def reset(self) -> None:
        """Back to version 0 (the base model: every ``B`` is zero), a new optimizer."""
        self.load(self.initial)
        self.versions: dict[int, dict[str, torch.Tensor]] = {0: self.snapshot()}
        self.version = 0
        params = [p for lora in self.layers.values() for p in (lora.lora_a, lora.lora_b)]
        self.optimizer = torch.optim.Adam(params, lr=LEARNING_RATE)

    def snapshot(self) -> dict[str, torch.Tensor]:
        """A copy of the adapter's tensors (``<layer>.a``, ``<layer>.b``)."""
        out = {}
        for name, lora in self.layers.items():
            out[f"{name}.a"] = lora.lora_a.detach().clone()
            out[f"{name}.b"] = lora.lora_b.detach().clone()
        return out

    def load(self, state: dict[str, torch.Tensor]) -> None:
        """Set the adapter's tensors to those of a :meth:`snapshot`."""
        with torch.no_grad():
            for name, lora in self.layers.items():
                lora.lora_a.copy_(state[f"{name}.a"])
                lora.lora_b.copy_(state[f"{name}.b"])

    @contextmanager
    def at(self, version: int) -> Iterator[None]:
        """The model holds version ``version``'s adapter inside the block."""
        current = self.snapshot()
        self.load(self.versions[version])
        try:
            yield
        finally:
            self.load(current)

    def token_logprobs(self, record: TrainingRecord) -> torch.Tensor:
        """``log p(token)`` of each completion token of ``record``, one forward pass."""
        prompt = record.prompt_token_ids or []
        completion = record.completion_token_ids or []
        tokens = torch.tensor([[*prompt, *completion]])
        logits = self.model(tokens).logits[0].double()
        logprobs = torch.log_softmax(logits[len(prompt) - 1 : -1], dim=-1)
        return logprobs.gather(1, torch.tensor(completion).unsqueeze(1)).squeeze(1)

    def recompute(self, record: TrainingRecord, version: int) -> float:
        """Check (a): the largest ``|recomputed - recorded|`` over ``record``'s sampled
        tokens, the forward pass under ``version``."""
        mask = record.completion_mask or []
        recorded = record.completion_logprobs or []
        with torch.no_grad(), self.at(version):
            mine = self.token_logprobs(record).tolist()
        deltas = [abs(m - r) for m, r, s in zip(mine, recorded, mask, strict=True) if s]
        return max(deltas, default=0.0)

    def step(self, records: Sequence[TrainingRecord]) -> float:
        """One clipped importance-sampling step over the records, making the next version;
        returns the loss."""
        self.optimizer.zero_grad()
        terms: list[torch.Tensor] = []
        for record in records:
            if not record.advantage or not record.loss_mask:
                continue
            mask = torch.tensor(record.completion_mask or [], dtype=torch.float64)
            sampler = torch.tensor(record.completion_logprobs or [], dtype=torch.float64)
            ratio = torch.exp(self.token_logprobs(record) - sampler)
            advantage = record.advantage * record.loss_mask
            objective = torch.minimum(
                ratio * advantage, torch.clamp(ratio, 1 - CLIP, 1 + CLIP) * advantage
            )
            terms.append(-(objective * mask).sum() / mask.sum().clamp(min=1))
        loss = 0.0
        if terms:  # else every group's rewards were equal: nothing to learn, same weights
            total = torch.stack(terms).mean()
            torch.autograd.backward(total)
            self.optimizer.step()
            loss = float(total.detach())
        self.version += 1
        self.versions[self.version] = self.snapshot()
        return loss

    def answer_probability(self, version: int, tokenizer: Any) -> float:
        """The policy's own probability of answering :data:`ANSWER` at ``version``."""
        ids = torch.tensor([prompt_ids(tokenizer)])
        with torch.no_grad(), self.at(version):
            logits = self.model(ids).logits[0, -1].double()
        return float(torch.softmax(logits, -1)[letter_token(tokenizer, ANSWER)])

    def save_adapter(self, out: Path) -> Path:
        """The current adapter in PEFT's layout (what vLLM loads)."""
        out.mkdir(parents=True, exist_ok=True)
        tensors = {}
        for name, lora in self.layers.items():
            tensors[f"base_model.model.{name}.lora_A.weight"] = lora.lora_a.detach().clone()
            tensors[f"base_model.model.{name}.lora_B.weight"] = lora.lora_b.detach().clone()
        save_file(tensors, out / "adapter_model.safetensors")
        config = {
            "peft_type": "LORA", "task_type": "CAUSAL_LM", "r": RANK,
            "lora_alpha": LORA_ALPHA, "lora_dropout": 0.0, "bias": "none",
            "target_modules": list(TARGETS), "base_model_name_or_path": str(self.base),
            "fan_in_fan_out": False, "modules_to_save": None,
        }  # fmt: skip
        (out / "adapter_config.json").write_text(json.dumps(config, indent=1))
        return out


def _free_port() -> int:
    """A TCP port free on loopback now (the server binds it next)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@contextmanager
def serve(vllm: str, model: Path, log: Path) -> Iterator[str]:
    """vLLM serving ``model`` with runtime LoRA loading, on loopback; yields its base
    URL once its log says the application started; stops its process group after."""
    port = _free_port()
    command = [
        vllm, "serve", str(model), "--served-model-name", SERVED, "--host", "127.0.0.1",
        "--port", str(port), "--dtype", "float32", "--max-model-len", "512",
        "--enforce-eager", "--seed", "0", "--enable-lora", "--max-lora-rank", str(RANK),
        "--max-loras", "3",
    ]  # fmt: skip
    env = {
        **os.environ, "VLLM_TARGET_DEVICE": "cpu", "VLLM_CPU_KVCACHE_SPACE": "1",
        "VLLM_ALLOW_RUNTIME_LORA_UPDATING": "True", "HF_HUB_OFFLINE": "1",
        "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1",
    }  # fmt: skip
    proc = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env,
        start_new_session=True, text=True, errors="replace",
    )  # fmt: skip
    ready = threading.Event()

    def copy() -> None:  # the server's output to its log; ready at its start line
        assert proc.stdout is not None
        with log.open("w") as out:
            for line in proc.stdout:
                out.write(line)
                out.flush()
                if "Application startup complete" in line:
                    ready.set()
        ready.set()

    threading.Thread(target=copy, daemon=True).start()
    try:
        ready.wait(START_WITHIN)
        if proc.poll() is not None or not ready.is_set():
            tail = "".join(log.read_text().splitlines(keepends=True)[-20:])
            raise SystemExit(f"vLLM did not start (exit {proc.poll()}); {log} ends:\n{tail}")
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


async def load_adapter(base_url: str, name: str, path: Path) -> None:
    """Load the adapter at ``path`` into the server under ``name``."""
    root = base_url.removesuffix("/v1")
    async with (
        aiohttp.ClientSession() as http,
        http.post(
            f"{root}/v1/load_lora_adapter", json={"lora_name": name, "lora_path": str(path)}
        ) as reply,
    ):
        if reply.status != 200:
            raise SystemExit(f"vLLM refused adapter {name}: {reply.status} {await reply.text()}")


def call_version(group: ServiceGroup, record: TrainingRecord) -> int:
    """The policy version that answered ``record``'s calls (one, or the check fails)."""
    rollout = next(r for r in group.rollouts if r.rollout_id == record.rollout_id)
    wanted = set(record.calls or [])
    versions = {c.policy_version for c in rollout.model_calls if c.index in wanted}
    version: int | None = next(iter(versions), None)
    if len(versions) != 1 or version is None:
        raise SystemExit(f"{record.rollout_id}: its calls name versions {versions}")
    return version


async def train(
    trainer: Trainer, tokenizer: Any, base_url: str, tasks: Path, out: Path, staleness: int
) -> dict[str, Any]:
    """The loop at ``max_staleness=staleness``: its steps, checks and the service's report."""
    trainer.reset()
    env = AgentEnv.from_names(f"jsonl:{tasks}", "chat", max_tokens=1)
    options = RunOptions(
        model=SERVED, base_url=base_url, concurrency=GROUP_SIZE * GROUPS_PER_STEP,
        token_ids=True, out=out / "run",
    )  # fmt: skip
    steps: list[dict[str, Any]] = []
    async with RolloutService(
        env, options, group_size=GROUP_SIZE, max_staleness=staleness, format="jsonl",
        records=RecordOptions(filter_overlong=False),
    ) as service:  # fmt: skip
        # synchronous: one step's groups at a time. Else the groups of more steps than
        # the bound lets through are collected under version 0 before the first step
        # (a trainer that starts late): the oldest are past the bound, dropped.
        ahead = 1 if staleness == 0 else staleness + 2
        service.request(ahead * GROUPS_PER_STEP)
        if staleness:
            await service.wait_for_rollouts(ahead * GROUPS_PER_STEP * GROUP_SIZE)
        for step in range(STEPS):
            batch = [await service.next_group() for _ in range(GROUPS_PER_STEP)]
            groups, worst, rewards = [], 0.0, []
            for group in batch:
                versions = [call_version(group, r) for r in group.records]
                behind = trainer.version - min(versions)  # (b), from the calls themselves
                for record, version in zip(group.records, versions, strict=True):
                    worst = max(worst, trainer.recompute(record, version))  # (a)
                rewards += [r for r in group.rewards if r is not None]
                groups.append(
                    {"group_id": group.group_id, "versions": sorted(set(versions)),
                     "behind": behind, "staleness": group.staleness,
                     "rollout_ids": [r.rollout_id for r in group.rollouts]}
                )  # fmt: skip
            records = [r for group in batch for r in group.records]
            loss = trainer.step(records)
            name = f"staleness{staleness}-v{trainer.version}"
            path = trainer.save_adapter(out / "adapters" / name)
            await load_adapter(base_url, name, path)
            await service.set_policy(trainer.version, model=name)
            service.request(GROUPS_PER_STEP)  # these start under the new policy
            line = {
                "staleness_bound": staleness, "step": step, "version": trainer.version - 1,
                "groups": groups, "sequences": len(records),
                "max_logprob_delta": worst, "mean_reward": sum(rewards) / len(rewards),
                "loss": loss,
            }  # fmt: skip
            print(json.dumps(line), flush=True)
            steps.append(line)
        report = service.report().to_json()
    probabilities = [trainer.answer_probability(v, tokenizer) for v in range(trainer.version + 1)]
    return {"max_staleness": staleness, "steps": steps, "report": report,
            "answer_probability": probabilities}  # fmt: skip


def verdict(run: dict[str, Any]) -> list[str]:
    """What failed of checks (a)-(c) in one run's results (empty: all held)."""
    failed = []
    bound, steps = run["max_staleness"], run["steps"]
    worst = max(s["max_logprob_delta"] for s in steps)
    if not worst < TOLERANCE:
        failed.append(f"(a) a recomputed logprob is {worst:.3g} from the sampler's")
    behind = max(g["behind"] for s in steps for g in s["groups"])
    if behind > bound:
        failed.append(f"(b) a group {behind} versions behind reached the trainer (bound {bound})")
    third = max(1, len(steps) // 3)
    first = sum(s["mean_reward"] for s in steps[:third]) / third
    last = sum(s["mean_reward"] for s in steps[-third:]) / third
    p = run["answer_probability"]
    if not (last > first and p[-1] > p[0]):
        failed.append(
            f"(c) the reward did not rise: mean {first:.2f} -> {last:.2f}, "
            f"p({ANSWER}) {p[0]:.2f} -> {p[-1]:.2f}"
        )
    return failed


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--vllm", default=os.environ.get("AGENTKIT_VLLM"), help="vllm executable")
    parser.add_argument("--model", type=Path, required=True, help="a tiny model's directory")
    parser.add_argument("--out", type=Path, required=True, help="where everything is written")
    parser.add_argument("--staleness", type=int, nargs="+", default=[0, 2])
    args = parser.parse_args(argv)
    if not args.vllm:
        parser.error("--vllm (or $AGENTKIT_VLLM) names vLLM's executable")
    torch.manual_seed(0)
    started, cpu_start = time.monotonic(), resource.getrusage(resource.RUSAGE_SELF)
    out: Path = args.out
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    base = make_base(args.model, out / "base")
    tokenizer = AutoTokenizer.from_pretrained(base)
    tasks = out / "tasks.jsonl"
    tasks.write_text(json.dumps({"id": "pick-c", "input": PROMPT, "target": ANSWER}) + "\n")
    trainer = Trainer(base)
    runs, times = [], {}
    with serve(args.vllm, base, out / "vllm.log") as base_url:
        times["vllm_start_s"] = time.monotonic() - started
        for staleness in args.staleness:
            begun = time.monotonic()
            where = out / f"staleness-{staleness}"
            run = asyncio.run(train(trainer, tokenizer, base_url, tasks, where, staleness))
            run["wall_s"] = time.monotonic() - begun
            run["failed"] = verdict(run)
            runs.append(run)
    mine, children = (
        resource.getrusage(resource.RUSAGE_SELF),
        resource.getrusage(resource.RUSAGE_CHILDREN),
    )
    times["wall_s"] = time.monotonic() - started
    times["trainer_cpu_s"] = (mine.ru_utime + mine.ru_stime) - (
        cpu_start.ru_utime + cpu_start.ru_stime
    )
    times["vllm_cpu_s"] = children.ru_utime + children.ru_stime
    summary = {"runs": runs, "times": times}
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    for run in runs:
        print(json.dumps({"max_staleness": run["max_staleness"], "failed": run["failed"],
                          "answer_probability": run["answer_probability"],
                          "report": run["report"], "wall_s": run["wall_s"]}))  # fmt: skip
    print(json.dumps({"times": times}))
    return 1 if any(run["failed"] for run in runs) else 0


if __name__ == "__main__":
    sys.exit(main())
