"""What the policy is told: the system prompt, the two tools and the reminders.

The system prompt has one template per action format (``docs/terminal.md``
shows both verbatim, filled in with the defaults):

- ``tools`` (native OpenAI tool calls, what ``run()`` uses): the tools go in
  the request's ``tools`` (:data:`TOOLS`), and the prompt describes them;
- ``text`` (the policy writes its calls in its text, what a training loop
  that samples plain text uses): the prompt also gives the call format,
  ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``.

The task's own text is the user message that follows the system prompt.
"""

from __future__ import annotations

from typing import Any, Literal

__all__ = [
    "NO_CALL_TEXT",
    "NO_CALL_TOOLS",
    "SHELL",
    "SUBMIT",
    "SUBMITTED_TEXT",
    "TOOLS",
    "TOOL_NAMES",
    "ActionFormat",
    "system_prompt",
]

#: How the policy calls its tools: native tool calls (``tools``) or text (``text``).
ActionFormat = Literal["tools", "text"]

#: The tool that runs a command.
SHELL = "shell"
#: The tool that ends the episode.
SUBMIT = "submit"
TOOL_NAMES = (SHELL, SUBMIT)

#: The two tools in OpenAI's function format (the ``tools`` of a chat completions request).
TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": SHELL,
            "description": (
                "Run a bash command in the task's environment and return its exit code "
                "and output (stdout and stderr together)."
            ),
            "parameters": {
                "type": "object",
                "properties": {
                    "command": {"type": "string", "description": "The bash command to run."},
                    "timeout": {
                        "type": "number",
                        "description": "Seconds the command may run before it is killed.",
                    },
                },
                "required": ["command"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": SUBMIT,
            "description": "Say that the task is done. Your work is then checked; "
            "no further commands run.",
            "parameters": {"type": "object", "properties": {}},
        },
    },
]

_INTRO = """\
You are an agent working in a Linux terminal to complete a task. The task is in the next message.

You have two tools:
- shell: run a bash command and see its exit code and output. Arguments: "command" \
(a string, required) and "timeout" (seconds, optional; default {command_timeout:g}, \
at most {max_command_timeout:g}).
- submit: say that the task is done. Your work is then checked; no further commands run. \
No arguments.
"""

_TEXT_FORMAT = """
Call a tool by writing the call in your reply, as JSON inside <tool_call> tags:
<tool_call>{{"name": "shell", "arguments": {{"command": "ls -la"}}}}</tool_call>
<tool_call>{{"name": "submit", "arguments": {{}}}}</tool_call>
Several calls in one reply run in order. Each result comes back in <tool_response> tags.
"""

_RULES = """
Rules:
- Each command runs in a new bash shell in {workdir}, the working directory: `cd` and \
exported variables do not carry over to the next command, so use absolute paths or chain \
commands with &&.
- Commands get no input: do not start programs that wait for it (editors, pagers, prompts).
- Output longer than {output_limit} bytes is shortened to its first and last \
{half_limit} bytes.
- You have at most {max_turns} replies. Every reply must call a tool; when the task is \
done, call submit.
"""

#: The observation after ``submit`` (text format) or the ``submit`` call's tool message.
SUBMITTED_TEXT = "Submitted. The task is now checked."

#: The observation when a ``text`` reply has no call.
NO_CALL_TEXT = (
    "No tool call found. Call a tool as JSON inside <tool_call> tags: "
    '<tool_call>{"name": "shell", "arguments": {"command": "..."}}</tool_call> '
    'to run a command, or <tool_call>{"name": "submit", "arguments": {}}</tool_call> '
    "when the task is done."
)

#: The observation when a ``tools`` reply has no tool call.
NO_CALL_TOOLS = (
    "No tool call found. Call the shell tool to run a command, or the submit tool "
    "when the task is done."
)


def system_prompt(
    action_format: ActionFormat,
    *,
    workdir: str,
    max_turns: int,
    command_timeout: float,
    max_command_timeout: float,
    output_limit: int,
) -> str:
    """The system prompt for ``action_format``, filled in with the episode's settings."""
    values = {
        "workdir": workdir,
        "max_turns": max_turns,
        "command_timeout": command_timeout,
        "max_command_timeout": max_command_timeout,
        "output_limit": output_limit,
        "half_limit": output_limit // 2,
    }
    parts = [_INTRO.format(**values)]
    if action_format == "text":
        parts.append(_TEXT_FORMAT.format(**values))
    parts.append(_RULES.format(**values))
    return "".join(parts).rstrip("\n")
