"""What one command's result looks like to the policy: its output capped, then the text.

:func:`cap_output` keeps the first and the last half of ``limit`` bytes of
the output (UTF-8; a character cut at either edge is dropped) with a marker
line between them saying how many bytes were left out. :func:`result_text`
is the observation for one ``shell`` call::

    Exit code: 0
    Output:
    hello

``Output: (none)`` when there was none, and ``The command timed out after
60 s and was killed.`` in place of the exit code when it ran past its
timeout (its output so far follows). One line end at the very end of the
output is left out.
"""

from __future__ import annotations

import attrs

__all__ = ["CommandResult", "cap_output", "omitted_marker", "result_text"]


def omitted_marker(omitted: int) -> str:
    """The line that stands for the ``omitted`` bytes cut out of the middle of an output."""
    return f"\n[... {omitted} bytes of output omitted ...]\n"


def cap_output(text: str, limit: int) -> tuple[str, int]:
    """``(text, omitted)``: ``text`` when it is at most ``limit`` bytes (UTF-8), else its
    first ``limit // 2`` and last ``limit - limit // 2`` bytes around
    :func:`omitted_marker`; ``omitted`` is the number of bytes left out."""
    data = text.encode("utf-8", "replace")
    if len(data) <= limit:
        return text, 0
    head_bytes = limit // 2
    tail_bytes = limit - head_bytes
    head = data[:head_bytes].decode("utf-8", "ignore")
    tail = data[len(data) - tail_bytes :].decode("utf-8", "ignore") if tail_bytes else ""
    omitted = len(data) - head_bytes - tail_bytes
    return head + omitted_marker(omitted) + tail, omitted


@attrs.frozen(kw_only=True)
class CommandResult:
    """One ``shell`` call's outcome: exit code (None when it timed out), capped output,
    how many output bytes were cut, the timeout it ran with, and its duration."""

    exit_code: int | None
    output: str
    omitted_bytes: int = 0
    timed_out: bool = False
    timeout: float = 0.0
    duration_s: float = 0.0

    def to_json(self) -> dict[str, object]:
        """The record kept in step metadata and ``tool.result`` events (output left out)."""
        return {
            "exit_code": self.exit_code,
            "timed_out": self.timed_out,
            "timeout": self.timeout,
            "omitted_bytes": self.omitted_bytes,
            "duration_s": round(self.duration_s, 6),
        }


def result_text(result: CommandResult) -> str:
    """The observation for one ``shell`` call (see the module doc)."""
    if result.timed_out:
        head = f"The command timed out after {result.timeout:g} s and was killed."
    else:
        head = f"Exit code: {result.exit_code}"
    output = result.output.removesuffix("\n")
    if not output:
        return f"{head}\nOutput: (none)"
    return f"{head}\nOutput:\n{output}"
