"""Errors the sandboxes raise for users."""

from __future__ import annotations

from agentkit._errors import AgentkitError

__all__ = ["SandboxError", "SandboxForkError", "SandboxPathError", "SandboxUnavailableError"]


class SandboxError(AgentkitError):
    """A sandbox could not start, or a command could not be run in it."""


class SandboxUnavailableError(SandboxError):
    """The sandbox's isolation tool (bubblewrap) is missing or does not work here."""


class SandboxPathError(SandboxError, ValueError):
    """A path given for the sandbox escapes it, or names a read-only location."""


class SandboxForkError(SandboxError):
    """A sandbox cannot fork (its kind has no ``fork``, or not in its present state),
    or a fork failed; the message names the sandbox. The parent is left as it was."""
