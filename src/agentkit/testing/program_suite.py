"""One suite for every harness that runs an agent's own program (``codex``,
``claude-code``, ``opencode``, ``mini-swe-agent``): the real program, by name,
through :class:`~agentkit.AgentEnv` and ``agentkit run`` on the Harbor
``hello-world`` task, against the scripted model server, graded by the task's
own verifier. A plugin's test file holds its model script and what is its own,
and makes the suite's test class with one call (see ``docs/testing.md``)::

    TestMyAgent = program_harness_suite("my-agent", tasks=EXAMPLES, script=SCRIPT, ...)

The suite's tests (:func:`program_harness_suite`) check what every such
harness must do.
"""

from __future__ import annotations

import copy
import json
import re
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar, Literal

import attrs
import pytest

import agentkit.runs
from agentkit._calls import ModelCall
from agentkit._events import Event
from agentkit.env import AgentEnv, RolloutRecord
from agentkit.testing.model_server import ScriptedModelServer
from agentkit.testing.programs import (
    TELEMETRY_WEIGHTS,
    agentkit_run,
    assert_calls_carry_the_server_tokens,
    assert_exports_carry_the_server_tokens,
    assert_exports_hold_the_calls_tokens,
    assert_key_only_reached_the_model,
    harbor_rollout,
    need_harbor_task,
    telemetry_weights,
)
from agentkit.testing.sandbox_fixtures import requires_bwrap

__all__ = [
    "SUITE_API_KEY",
    "SUITE_API_KEY_ENV",
    "TokenKind",
    "hello_world_script",
    "program_harness_suite",
]

#: The API key the suite's runs send (the server accepts no other); checked to
#: reach the model server and nothing else.
SUITE_API_KEY = "sk-agentkit-program-suite-5d8e2a7c1f"
#: The environment variable the suite's runs read :data:`SUITE_API_KEY` from.
SUITE_API_KEY_ENV = "AGENTKIT_TEST_PROGRAM_KEY"
#: What the model calls of a harness's program carry, recorded through the model
#: proxy asked for token ids: ``"logprobs"`` (the server's token ids and logprobs,
#: chat completions), ``"ids"`` (its ids, no logprobs: a ``token_note`` says why),
#: ``"none"`` (no ids: a ``token_note`` says why, as for Anthropic Messages).
TokenKind = Literal["logprobs", "ids", "none"]

_TASK = "harbor:hello-world"
_MODEL = "scripted-model"


def hello_world_script(
    *, tool: str = "bash", command_key: str = "command", describe: bool = False,
    submit: str | None = None,
) -> dict[str, Any]:  # fmt: skip
    """A model script for the Harbor ``hello-world`` task in two calls, each reporting
    its usage: the first writes the file with the program's shell tool (``tool``,
    its command under ``command_key``, with a ``description`` argument when
    ``describe``: opencode's ``bash`` and Claude Code's ``Bash`` ask for one), the
    second, after the tool's result, says it is done, running ``submit`` when the
    program finishes by a command (mini-swe-agent)."""

    def shell(command: str, description: str) -> dict[str, Any]:
        arguments = {command_key: command, **({"description": description} if describe else {})}
        return {"name": tool, "arguments": arguments}

    done: dict[str, Any] = {"content": "Created /app/hello.txt."}
    if submit is not None:
        done["tool_calls"] = [shell(submit, "Submit")]
    return {
        "rules": [
            {
                "match": {"after_tool": False, "last_user_contains": "hello.txt"},
                "reply": {
                    "content": "I will create the file.",
                    "tool_calls": [
                        shell("printf 'Hello, world!\\n' > /app/hello.txt", "Write the greeting")
                    ],
                    "usage": {"prompt_tokens": 900, "completion_tokens": 25, "cached_tokens": 100},
                },
            },
            {
                "match": {"after_tool": True},
                "reply": {**done, "usage": {"prompt_tokens": 950, "completion_tokens": 8}},
            },
        ]
    }


def _expected(script: Mapping[str, Any]) -> dict[str, float]:
    """The telemetry of a run that answers with each of the script's rules once."""
    replies = [rule["reply"] for rule in script["rules"]]
    usages = [reply.get("usage") or {} for reply in replies]
    prompt = sum(u.get("prompt_tokens", 0) for u in usages)
    completion = sum(u.get("completion_tokens", 0) for u in usages)
    return {
        "turns": float(len(replies)),
        "tool_calls": float(sum(len(reply.get("tool_calls") or []) for reply in replies)),
        "tokens": float(prompt + completion),
        "input_tokens": float(prompt),
        "cached_tokens": float(sum(u.get("cached_tokens", 0) for u in usages)),
    }


def _thinking(script: Mapping[str, Any]) -> dict[str, Any]:
    """The script with the model reasoning before its first answer (translated: a
    thinking block or a reasoning item, which the program sends back with its tool
    call); a server that returns token ids counts a completion's tokens as its ids
    (vLLM's usage), so no rule keeps a ``completion_tokens`` of its own, which the
    proxy would take for ids that went missing."""
    thinking: dict[str, Any] = copy.deepcopy(dict(script))
    thinking["rules"][0]["reply"]["reasoning"] = "Write it with printf."
    for rule in thinking["rules"]:
        (rule["reply"].get("usage") or {}).pop("completion_tokens", None)
    return thinking


def _cli_option(name: str, value: Any) -> str:
    """``name=value`` as ``-H`` takes it (JSON for what is not text)."""
    return f"{name}={value if isinstance(value, str) else json.dumps(value)}"


@attrs.frozen
class _Spec:
    """What :func:`program_harness_suite` was given, and what its tests derive from it."""

    harness: str
    tasks: Path
    script: Mapping[str, Any]
    raw: Mapping[str, Any]
    protocol: str
    stream: bool
    tokens: TokenKind
    token_note: str | None
    token_script: Mapping[str, Any] | None
    options: Mapping[str, Any]

    @property
    def expected(self) -> dict[str, float]:
        return _expected(self.script)

    def env(self, **kwargs: Any) -> AgentEnv:
        """The harness by name on the Harbor tasks, with its options."""
        return AgentEnv.from_names(f"harbor:{self.tasks}", self.harness, **kwargs, **self.options)

    def cli_options(self) -> list[str]:
        return [arg for k, v in self.options.items() for arg in ("-H", _cli_option(k, v))]

    async def run_once(
        self,
        server: ScriptedModelServer,
        run_dir: Path,
        monkeypatch: pytest.MonkeyPatch,
        answers: Mapping[str, Any],
        env: AgentEnv | None = None,
        *,
        token_ids: bool = False,
        translate_to_chat: bool = False,
    ) -> tuple[RolloutRecord, list[ModelCall]]:
        """``hello-world`` through ``env`` (else a new one) on the host userland,
        ``server`` answering from ``answers`` to the suite's key only: the rollout
        (graded 1) and its recorded model calls."""
        need_harbor_task(self.tasks / "hello-world")
        server.set_script(dict(answers))
        monkeypatch.setenv(SUITE_API_KEY_ENV, SUITE_API_KEY)
        server.set_api_key(SUITE_API_KEY)  # any other key: a 401
        rollout = await harbor_rollout(
            env or self.env(),
            _TASK,
            server=server,
            out=run_dir,
            api_key_env=SUITE_API_KEY_ENV,
            sandbox_options={"image": "host"},
            token_ids=token_ids,
            translate_to_chat=translate_to_chat,
        )
        assert rollout.rewards["core.reward"] == 1.0
        calls = agentkit.runs.open(run_dir).calls(rollout.rollout_id)
        assert rollout.calls == len(calls)
        return rollout, calls


class _ProgramTests:
    """The suite's tests; :func:`program_harness_suite` makes a subclass with its
    :class:`_Spec`."""

    spec: ClassVar[_Spec]

    async def test_harbor_task_passes_its_verifier(
        self,
        model_server: ScriptedModelServer,
        tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch,
    ) -> None:
        """By name through AgentEnv: graded 1 by the task's verifier; the telemetry,
        usage and ``raw`` the script and program make; the program ran in place; the
        key reached only the model server."""
        spec, expected = self.spec, self.spec.expected
        need_harbor_task(spec.tasks / "hello-world")
        seen: list[Event] = []
        env = spec.env(trace_callback=seen.append)
        assert telemetry_weights(env) == TELEMETRY_WEIGHTS
        run_dir = tmp_path / "run"
        rollout, _ = await spec.run_once(model_server, run_dir, monkeypatch, spec.script, env)
        assert rollout.rewards["harness.turns"] == expected["turns"]
        assert rollout.rewards["harness.tool_calls"] == expected["tool_calls"]
        assert rollout.rewards["harness.tool_errors"] == 0.0
        assert rollout.rewards["harness.tokens"] == expected["tokens"]
        assert rollout.usage["input_tokens"] == expected["input_tokens"]
        assert rollout.usage["cached_tokens"] == expected["cached_tokens"]
        assert {k: rollout.raw.get(k) for k in spec.raw} == dict(spec.raw)
        # the runner shows the program's directories read-only (sandbox_ro_binds): no copy
        assert not [e for e in seen if "is not visible in the sandbox" in str(e.data)]
        assert {"tool.call", "tool.result", "harness.end"} <= {e.type for e in seen}
        assert rollout.events_file is not None
        assert "tool.result" in (run_dir / rollout.events_file).read_text()
        # not in the run directory, the events, or the program's own files
        assert_key_only_reached_the_model(
            SUITE_API_KEY, server=model_server, run_dir=run_dir, events=seen
        )

    def test_agentkit_run_runs_it_by_name(
        self, model_server: ScriptedModelServer, tmp_path: Path
    ) -> None:
        """By name through ``agentkit run`` (the task's image): completed, graded 1,
        ``raw``; the key in no output and no file."""
        spec = self.spec
        need_harbor_task(spec.tasks / "hello-world")
        model_server.set_script(dict(spec.script))
        model_server.set_api_key(SUITE_API_KEY)
        run_dir = tmp_path / "cli-run"
        proc, record = agentkit_run(
            f"harbor:{spec.tasks}", spec.harness, "--task", _TASK,
            "--model", _MODEL, "--base-url", model_server.base_url,
            "--api-key-env", SUITE_API_KEY_ENV, *spec.cli_options(), "--out", str(run_dir),
            env={SUITE_API_KEY_ENV: SUITE_API_KEY, "NO_COLOR": "1"},
        )  # fmt: skip
        assert record["status"] == "completed", record["error"]
        assert record["rewards"]["core.reward"] == 1.0
        assert {k: record["raw"].get(k) for k in spec.raw} == dict(spec.raw)
        assert SUITE_API_KEY not in proc.stdout + proc.stderr
        assert_key_only_reached_the_model(SUITE_API_KEY, server=model_server, run_dir=run_dir)

    async def test_every_model_call_is_recorded_with_the_servers_tokens(
        self,
        model_server: ScriptedModelServer,
        tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch,
    ) -> None:
        """Through the model proxy asked for token ids: every call in the program's
        protocol, recorded with exactly the token fields the server sent (or a note
        saying why none); with a token script, the exports hold them in two
        sequences."""
        spec = self.spec
        run_dir = tmp_path / "run"
        answers = spec.token_script or spec.script
        rollout, calls = await spec.run_once(
            model_server, run_dir, monkeypatch, answers, token_ids=True
        )
        assert len(calls) >= 2
        assert {c.protocol for c in calls} == {spec.protocol}
        assert all(c.stream is spec.stream for c in calls)
        with_ids = assert_calls_carry_the_server_tokens(calls, model_server)
        if spec.token_note is not None:
            assert all(spec.token_note in (c.token_note or "") for c in calls)
        if spec.tokens == "none":
            assert with_ids == []
            assert rollout.calls_without_tokens == [
                {"note": calls[0].token_note, "calls": [c.index for c in calls]}
            ]
        else:
            assert with_ids == calls  # every call: the server's ids, exactly
            assert rollout.calls_without_tokens == []
            if spec.tokens == "logprobs":
                assert all(c.completion_logprobs and c.token_note is None for c in calls)
            else:
                assert all(c.completion_logprobs is None for c in calls)
        assert_key_only_reached_the_model(SUITE_API_KEY, server=model_server, run_dir=run_dir)
        if spec.token_script is not None:
            sequences = assert_exports_carry_the_server_tokens(
                run_dir, rollout.rollout_id, model_server
            )
            assert sequences == [[0, 1], [2]]


class _TranslatedProgramTests(_ProgramTests):
    """The suite's tests and the translated mode's."""

    async def test_translated_to_chat_every_call_has_the_servers_exact_tokens(
        self,
        model_server: ScriptedModelServer,
        tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch,
    ) -> None:
        """In the proxy's translation mode, against a server of chat completions only:
        the program's calls served from chat completions, each with the server's
        exact ids and logprobs, listed so by ``agentkit show``, and exported in one
        sequence per format."""
        spec = self.spec
        model_server.set_apis({"chat"})  # the program's own endpoint: 404
        run_dir = tmp_path / "run"
        rollout, calls = await spec.run_once(
            model_server, run_dir, monkeypatch, _thinking(spec.script),
            token_ids=True, translate_to_chat=True,
        )  # fmt: skip
        assert rollout.rewards["harness.tool_calls"] == spec.expected["tool_calls"]
        assert len(calls) >= 2
        assert {(c.protocol, c.upstream_protocol) for c in calls} == {(spec.protocol, "chat")}
        assert {r.api for r in model_server.model_requests} == {"chat"}
        assert assert_calls_carry_the_server_tokens(calls, model_server) == calls
        assert all(c.completion_logprobs for c in calls)
        assert rollout.calls_without_tokens == []
        listed = subprocess.run(
            [sys.executable, "-m", "agentkit", "show", str(run_dir),
             "--rollout", rollout.rollout_id, "--calls"],
            capture_output=True, text=True, timeout=60, check=True,
        ).stdout  # fmt: skip
        first = calls[0]
        shown = f"[0] {spec.protocol} (served from chat){' stream' if first.stream else ''}"
        finish = f" {first.finish_reason}" if first.finish_reason else ""
        assert f"{shown} {_MODEL}  200{finish}  ttft" in listed, listed
        exported = assert_exports_hold_the_calls_tokens(run_dir, calls)
        # each prompt extends the one before and its completion: one sequence each
        assert {fmt: len(sequences) for fmt, sequences in exported.items()} == {
            "skyrl": 1,
            "tinker": 1,
            "verifiers": 1,
        }
        assert_key_only_reached_the_model(SUITE_API_KEY, server=model_server, run_dir=run_dir)


def program_harness_suite(
    harness: str,
    *,
    tasks: Path,
    fixtures: Sequence[str],
    script: Mapping[str, Any],
    raw: Mapping[str, Any],
    protocol: str,
    stream: bool,
    tokens: TokenKind,
    token_note: str | None = None,
    token_script: Mapping[str, Any] | None = None,
    translated: bool = False,
    options: Mapping[str, Any] | None = None,
) -> type:
    """A pytest test class for the program harness registered as ``harness``;
    assign it to a ``Test*`` name in the plugin's tests.

    Its tests run the real program in a local sandbox (they need bubblewrap and
    the Harbor plugin, else skip saying so) on the Harbor task
    ``tasks/hello-world``, against the scripted model server, with
    :data:`SUITE_API_KEY` (the server refuses any other key):

    - ``test_harbor_task_passes_its_verifier``: through
      :class:`~agentkit.AgentEnv` by name on the host userland, the verifier's
      reward is 1; the weight-0 ``harness.*`` metrics are the program harness's
      (:data:`~agentkit.testing.programs.TELEMETRY_WEIGHTS`), and their values
      and the usage are the script's (one turn per rule, its tool calls and its
      usage); ``raw`` holds ``raw``; the program ran in place (the runner showed
      its directories read-only); tool calls, their results and the end were
      events, live and in the run's events file; the key reached the model
      server and nothing else;
    - ``test_agentkit_run_runs_it_by_name``: the same through ``agentkit run``
      (on the task's image): completed, reward 1, ``raw``, and the key in no
      output and no file;
    - ``test_every_model_call_is_recorded_with_the_servers_tokens``: through the
      model proxy asked for token ids, every call is recorded in ``protocol``
      (streamed or not: ``stream``) with exactly the ids (and logprobs) the
      server sent, as ``tokens`` says (a ``token_note`` containing
      ``token_note`` on every call when it is given); with ``token_script``
      (:func:`~agentkit.testing.programs.hello_world_token_script`) the run
      answers from it, and ``agentkit export`` writes the server's tokens for
      SkyRL, Tinker and verifiers in two sequences (a merged call, then a
      prefix break);
    - with ``translated``, ``test_translated_to_chat_every_call_has_the_servers_exact_tokens``:
      in the proxy's translation mode against a server that serves chat
      completions only, the program's ``protocol`` calls are served from chat
      completions (the script with the model reasoning first), every call
      carries the server's ids and logprobs, ``agentkit show --calls`` lists
      them so, and the exports hold them in one sequence per format.

    ``fixtures`` are the plugin's (synchronous) pytest fixtures set up first:
    the one that finds the program, or skips saying how to install it.
    ``script`` is the model script for ``hello-world`` in the program's own
    tool: its rules are answered once each, in order, and each reply's
    ``usage`` is what the run must report. ``options`` are the harness's
    options (``AgentEnv.from_names`` keywords, ``-H`` on the command line).
    """
    label = "".join(part.capitalize() for part in re.split(r"[^A-Za-z0-9]+", harness))
    spec = _Spec(
        harness=harness,
        tasks=tasks,
        script=script,
        raw=raw,
        protocol=protocol,
        stream=stream,
        tokens=tokens,
        token_note=token_note,
        token_script=token_script,
        options=dict(options or {}),
    )
    base = _TranslatedProgramTests if translated else _ProgramTests
    doc = f"The {harness} harness runs its real program as every program harness must."
    suite = type(f"Test{label}Program", (base,), {"spec": spec, "__doc__": doc})
    marked: type = pytest.mark.anyio(pytest.mark.usefixtures(*fixtures)(requires_bwrap(suite)))
    return marked
