"""The ``error_kind`` of an agent program's failure."""

from __future__ import annotations

__all__ = ["http_error_kind"]


def http_error_kind(status: int) -> str:
    """The ``HarnessResult.error_kind`` of a failed model call that a program reports
    with its HTTP ``status``: 429 ``model_rate_limit``, 5xx ``model_server_error``,
    401 and 403 ``model_auth``, any other ``model_request_error``."""
    if status == 429:
        return "model_rate_limit"
    if status >= 500:
        return "model_server_error"
    if status in (401, 403):
        return "model_auth"
    return "model_request_error"
