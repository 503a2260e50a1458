"""The one error a model call raises."""

from __future__ import annotations

__all__ = ["ModelCallError"]


class ModelCallError(Exception):
    """A model call failed; ``kind`` is the ``HarnessResult.error_kind`` it gives.

    ``kind`` is one of ``model_rate_limit`` (HTTP 429), ``model_server_error``
    (5xx), ``model_connection`` (refused, dropped, or no complete answer within
    the request timeout), ``model_auth`` (401, 403), ``model_bad_request``
    (other 4xx, or a base URL that is not http(s)), ``model_bad_response`` (a
    reply that is not JSON, nested too deep, of the wrong shape, or too large)
    and ``model_error`` (an error event in a stream, or anything else).
    ``status`` is the HTTP status when the server answered with an error;
    ``retry_after`` the seconds its ``Retry-After`` asked to wait, if any. The
    message never contains the API key, even when the server echoes it.
    """

    def __init__(
        self,
        kind: str,
        message: str,
        *,
        status: int | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.kind = kind
        self.status = status
        self.retry_after = retry_after
