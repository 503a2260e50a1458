"""Helpers for harnesses that run an agent's own program (a CLI such as
``codex`` or ``claude``) inside the rollout's sandbox.

- :func:`find_program` locates the executable (an option, an environment
  variable, PATH, or a project-local npm install) and reads its version;
  :class:`ProgramBinary` says what to run and which host directories a
  sandbox must show read-only.
- :func:`executable_in` runs it in place when the sandbox shows it, or copies
  it in; :func:`write_text` and :func:`read_text` move configuration and
  session files; :func:`process_path` is a sandbox path as the program sees it.
- :func:`drive` feeds the prompt, hands each output line to a reader live and
  kills the whole process tree on timeout, error or cancellation
  (:func:`time_left` of the timeout once the set-up is done);
  :func:`json_line` takes one line of a program's JSON-lines output apart
  (what is not a JSON event is kept and logged), :func:`json_object` and
  :func:`json_int` read its fields, :func:`json_or_text` reads JSON text the
  model wrote (a tool call's arguments) and :func:`loads_bounded` any other
  JSON the program or a server wrote, refusing nesting deeper than
  ``MAX_NESTING_DEPTH`` with a ``ValueError`` (never a ``RecursionError``);
  :func:`http_error_kind` classifies a failed model call it reports;
  :func:`stderr_tail` logs the end of its standard error and
  :func:`timeout_error` says it timed out.
- :func:`run_secrets` lists the run's secrets (its API key, secret-looking
  header values); :func:`redactor` and :func:`scrub_sandbox_dir` keep them
  out of recorded text and out of the files the program leaves.
- :func:`prompt_text` is the task's text; :class:`ModelCall` one model call
  assembled from the program's output, :func:`assistant_message` one as a
  transcript message, :func:`transcript` a run's calls as its transcript and
  :func:`final_text` its answer; :func:`telemetry_rubric` the weight-0
  ``harness.*`` metrics.
- :class:`ProgramHarness` is the base of such a harness: its options checked,
  the optional Harness members, the model check, the timeout rule and a
  local sandbox when the run gives none; its :meth:`~ProgramHarness.start_run`
  begins ``run_in`` with a :class:`ProgramRun` (the run's secrets, redactor,
  recorder, key and timeout), which stages the program, says how much time is
  left and cleans up after it.

The ``codex``, ``claude-code`` and ``opencode`` plugins are built on these;
``mini-swe-agent`` uses the secret helpers.
"""

from __future__ import annotations

from agentkit.programs._binary import ProgramBinary, Resolver, find_program, is_elf, local_npm_bins
from agentkit.programs._drive import (
    STDERR_TAIL,
    drive,
    kill_shielded,
    stderr_tail,
    time_left,
    timeout_error,
)
from agentkit.programs._errors import http_error_kind
from agentkit.programs._files import (
    executable_in,
    process_path,
    read_text,
    remove_staged,
    write_text,
)
from agentkit.programs._harness import ProgramHarness
from agentkit.programs._jsonl import json_int, json_line, json_object, json_or_text, loads_bounded
from agentkit.programs._prompt import prompt_text
from agentkit.programs._run import ProgramRun
from agentkit.programs._secrets import (
    MIN_SECRET_LEN,
    REDACTED,
    Secrets,
    redactor,
    run_secrets,
    scrub_sandbox_dir,
    scrub_tree,
)
from agentkit.programs._telemetry import telemetry_rubric
from agentkit.programs._transcript import ModelCall, assistant_message, final_text, transcript

__all__ = [
    "MIN_SECRET_LEN",
    "REDACTED",
    "STDERR_TAIL",
    "ModelCall",
    "ProgramBinary",
    "ProgramHarness",
    "ProgramRun",
    "Resolver",
    "Secrets",
    "assistant_message",
    "drive",
    "executable_in",
    "final_text",
    "find_program",
    "http_error_kind",
    "is_elf",
    "json_int",
    "json_line",
    "json_object",
    "json_or_text",
    "kill_shielded",
    "loads_bounded",
    "local_npm_bins",
    "process_path",
    "prompt_text",
    "read_text",
    "redactor",
    "remove_staged",
    "run_secrets",
    "scrub_sandbox_dir",
    "scrub_tree",
    "stderr_tail",
    "telemetry_rubric",
    "time_left",
    "timeout_error",
    "transcript",
    "write_text",
]
