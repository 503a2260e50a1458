"""Errors the sandboxes raise for users."""

from __future__ import annotations

from agentkit._errors import AgentkitError

__all__ = [
    "SandboxDiedError",
    "SandboxError",
    "SandboxForkError",
    "SandboxPathError",
    "SandboxUnavailableError",
]


class SandboxError(AgentkitError):
    """A sandbox could not start, or a command could not be run in it."""


class SandboxUnavailableError(SandboxError):
    """The sandbox's isolation tool (bubblewrap) is missing or does not work here."""


class SandboxPathError(SandboxError, ValueError):
    """A path given for the sandbox escapes it, or names a read-only location."""


class SandboxForkError(SandboxError):
    """A sandbox cannot fork (its kind has no ``fork``, or not in its present state),
    or a fork failed; the message names the sandbox. The parent is left as it was."""


class SandboxDiedError(SandboxError):
    """The sandbox stopped running while in use: every process in it, its own keepers
    included, was killed (by a command inside, or by the system), so nothing can run
    in it any more. Its files may still be on disk."""
