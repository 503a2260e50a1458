"""The bounds of one terminal episode, and the defaults of the harness's options.

An episode ends when the policy calls ``submit``, or when one of these is
reached: ``max_turns`` replies, ``max_parse_errors`` calls it could not read
(None: no such bound), or ``time_limit`` seconds since ``init()`` (None: no
bound; the caller's sampling time counts). Each command runs for at most its
``timeout`` argument, else ``command_timeout`` seconds, never more than
``max_command_timeout`` nor the time left; its output is capped to
``output_limit`` bytes (see :mod:`agentkit_terminal.output`).
"""

from __future__ import annotations

import attrs

from agentkit import OptionError
from agentkit_terminal.prompt import ActionFormat

__all__ = [
    "DEFAULT_COMMAND_TIMEOUT",
    "DEFAULT_MAX_COMMAND_TIMEOUT",
    "DEFAULT_MAX_PARSE_ERRORS",
    "DEFAULT_MAX_TURNS",
    "DEFAULT_OUTPUT_LIMIT",
    "TerminalLimits",
]

DEFAULT_MAX_TURNS = 50
DEFAULT_COMMAND_TIMEOUT = 60.0
DEFAULT_MAX_COMMAND_TIMEOUT = 600.0
#: Bytes of a command's output the policy sees: the first and last 8 KiB.
DEFAULT_OUTPUT_LIMIT = 16384
DEFAULT_MAX_PARSE_ERRORS = 5


@attrs.frozen(kw_only=True)
class TerminalLimits:
    """The settings one episode runs with (see the module doc); checked when built."""

    max_turns: int = DEFAULT_MAX_TURNS
    command_timeout: float = DEFAULT_COMMAND_TIMEOUT
    max_command_timeout: float = DEFAULT_MAX_COMMAND_TIMEOUT
    output_limit: int = DEFAULT_OUTPUT_LIMIT
    max_parse_errors: int | None = DEFAULT_MAX_PARSE_ERRORS
    time_limit: float | None = None
    action_format: ActionFormat = "text"

    def __attrs_post_init__(self) -> None:
        problems = []
        if self.max_turns < 1:
            problems.append(f"max_turns must be at least 1, got {self.max_turns}")
        if not self.command_timeout > 0:
            problems.append(f"command_timeout must be positive, got {self.command_timeout}")
        if not self.max_command_timeout >= self.command_timeout:
            problems.append(
                f"max_command_timeout ({self.max_command_timeout}) must be at least "
                f"command_timeout ({self.command_timeout})"
            )
        if self.output_limit < 2:
            problems.append(f"output_limit must be at least 2 bytes, got {self.output_limit}")
        if self.max_parse_errors is not None and self.max_parse_errors < 1:
            problems.append(f"max_parse_errors must be at least 1, got {self.max_parse_errors}")
        if self.time_limit is not None and not self.time_limit > 0:
            problems.append(f"time_limit must be positive, got {self.time_limit}")
        if self.action_format not in ("tools", "text"):
            problems.append(f"action_format must be 'tools' or 'text', got {self.action_format!r}")
        if problems:
            raise OptionError("harness 'terminal': " + "; ".join(problems))

    def command_seconds(self, requested: float | None, left: float | None) -> float:
        """The timeout of one command: ``requested`` (else the default), within the bounds."""
        seconds = min(requested or self.command_timeout, self.max_command_timeout)
        return seconds if left is None else max(0.0, min(seconds, left))
