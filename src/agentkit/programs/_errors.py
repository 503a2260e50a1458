"""The ``error_kind`` of an agent program's failure."""

from __future__ import annotations

from agentkit._errors import status_error_kind

__all__ = ["http_error_kind"]


def http_error_kind(status: int) -> str:
    """The ``HarnessResult.error_kind`` of a failed model call that a program reports
    with its HTTP ``status``: 429 ``model_rate_limit``, 5xx ``model_server_error``,
    401 and 403 ``model_auth``, any other ``model_request_error``."""
    return status_error_kind(status, other="model_request_error")
