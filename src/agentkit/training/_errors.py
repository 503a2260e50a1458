"""The error of training export: a run directory that cannot be read, a file not written."""

from __future__ import annotations

from agentkit._errors import AgentkitError

__all__ = ["ExportError"]


class ExportError(AgentkitError):
    """A run directory could not be read, or records could not be written."""
