"""The exceptions agentkit raises on purpose, and the message for a missing
optional dependency (:func:`missing_extra`), and what a wrong value is, for a message
(:func:`kind_of`) or an HTTP status is (:func:`status_error_kind`).

Every error meant for a user derives from :class:`AgentkitError`; the CLI
prints its message (no traceback unless ``--debug``) and exits with status 2.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "AgentkitError",
    "ComposeFileError",
    "HarnessError",
    "OptionError",
    "PluginError",
    "RunDirError",
    "SandboxDiedError",
    "SandboxError",
    "SandboxForkError",
    "SandboxPathError",
    "SandboxUnavailableError",
    "SpecError",
    "TaskReferenceError",
    "UnknownNameError",
    "ValidationError",
    "kind_of",
    "missing_extra",
    "status_error_kind",
]


class AgentkitError(Exception):
    """Base class of every error agentkit reports to users with a clear message."""


class ValidationError(AgentkitError, ValueError):
    """Data did not match its schema.

    ``path`` locates the bad value (``tasks[3].metadata.model``), ``reason``
    says what was expected, and ``source`` names the file or spec it came from.
    """

    def __init__(self, path: str, reason: str, source: str | None = None) -> None:
        self.path = path
        self.reason = reason
        self.source = source
        super().__init__(self._render())

    def _render(self) -> str:
        where = f"{self.path}: " if self.path else ""
        prefix = f"{self.source}: " if self.source else ""
        return f"{prefix}{where}{self.reason}"

    def with_prefix(self, prefix: str) -> ValidationError:
        """Return the same error located under ``prefix`` (``tasks[3]``)."""
        if not prefix:
            return self
        if not self.path:
            path = prefix
        elif self.path.startswith("["):
            path = prefix + self.path
        else:
            path = f"{prefix}.{self.path}"
        return ValidationError(path, self.reason, self.source)

    def with_source(self, source: str) -> ValidationError:
        """Return the same error attributed to ``source`` (a file or spec)."""
        return ValidationError(self.path, self.reason, source)


class SpecError(AgentkitError, ValueError):
    """A taskset, harness or sandbox spec could not be understood."""


class UnknownNameError(SpecError, LookupError):
    """No plugin registers the requested name."""


class OptionError(SpecError):
    """An option given to a plugin is unknown or has the wrong type."""


class PluginError(AgentkitError):
    """A plugin is broken: it failed to import, or registered something invalid."""


class TaskReferenceError(AgentkitError):
    """A bare task reference (no payload) was given where a loaded task is needed."""


class HarnessError(AgentkitError):
    """A harness could not run (missing binary, bad configuration)."""


class RunDirError(AgentkitError):
    """A run directory is unusable: corrupt files, or already in use.

    Public as :class:`agentkit.rundir.RunDirError` (and ``agentkit.env.RunDirError``);
    defined here, on the ground floor, because the calls file's parser
    (:mod:`agentkit._calls`) raises it too.
    """


# The sandboxes' errors (public from agentkit.sandbox): beside the contract, so that
# the task images the local sandbox runs on (agentkit.images, below the sandboxes)
# raise them too.


class SandboxError(AgentkitError):
    """A sandbox could not start, or a command could not be run in it."""


class SandboxUnavailableError(SandboxError):
    """The sandbox's isolation tool (bubblewrap) is missing or does not work here."""


class ComposeFileError(SandboxUnavailableError):
    """A task's compose file a sandbox refuses: the file (``path``) and every reason
    (``problems``), one per line, under ``why``."""

    def __init__(self, path: str, problems: list[str], why: str) -> None:
        self.path = path
        self.problems = tuple(problems)
        lines = "\n".join(f"  - {p}" for p in problems)
        super().__init__(f"{path}: {why}:\n{lines}")


class SandboxPathError(SandboxError, ValueError):
    """A path given for the sandbox escapes it, or names a read-only location."""


class SandboxForkError(SandboxError):
    """A sandbox cannot fork (its kind has no ``fork``, or not in its present state),
    or a fork failed; the message names the sandbox. The parent is left as it was."""


class SandboxDiedError(SandboxError):
    """The sandbox stopped running while in use: every process in it, its own keepers
    included, was killed (by a command inside, or by the system), so nothing can run
    in it any more. Its files may still be on disk."""


def kind_of(value: Any) -> str:
    """What ``value`` is, for a message: ``the string 'x'``, ``a table``, ``int 5``."""
    if isinstance(value, bool):
        return f"{str(value).lower()} (a boolean)"
    if isinstance(value, dict):
        return "a table"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, str):
        return f"the string {value!r}"
    return f"{type(value).__name__} {value!r}"


def missing_extra(
    feature: str,
    package: str,
    extra: str | None = None,
    *,
    dist: str = "agentkit",
    note: str | None = None,
) -> str:
    """The message for an optional dependency that is not installed: what needs it,
    the package, and the command that installs it.

    ``feature`` is what needs the package (``"writing parquet"``,
    ``"--tokenizer"``); ``package`` the distribution to install (``"pyarrow"``);
    ``extra`` the extra of ``dist`` that adds it (the command installs
    ``'dist[extra]'``), or None to install the package itself; ``note`` is added
    in parentheses::

        >>> missing_extra("writing parquet", "pyarrow", "parquet")
        "writing parquet needs the 'pyarrow' package: pip install 'agentkit[parquet]'"
        >>> missing_extra("reading from S3", "boto3")
        "reading from S3 needs the 'boto3' package: pip install boto3"

    The caller raises its own error with it (an :class:`AgentkitError`, which the
    command line prints without a traceback).
    """
    command = f"pip install '{dist}[{extra}]'" if extra else f"pip install {package}"
    message = f"{feature} needs the {package!r} package: {command}"
    return f"{message} ({note})" if note else message


def status_error_kind(status: int, *, other: str = "model_bad_request") -> str:
    """The ``error_kind`` of a model call answered with HTTP ``status``: 429
    ``model_rate_limit``, 5xx ``model_server_error``, 401 and 403 ``model_auth``,
    any other ``other``."""
    if status == 429:
        return "model_rate_limit"
    if status >= 500:
        return "model_server_error"
    if status in (401, 403):
        return "model_auth"
    return other
