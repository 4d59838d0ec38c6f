"""Which HTTP failures are worth another try, for every outbound client (LLM endpoints, federated
search): connection errors and HTTP 5xx/429 only. A timeout already spent the caller's budget and a
4xx will not change on a retry."""

from __future__ import annotations

import httpx


class RetryableStatusError(Exception):
    """HTTP 5xx or 429: the endpoint may answer the same request on another try."""

    def __init__(self, status: int) -> None:
        super().__init__(f"HTTP {status}")
        self.status = status


def retryable(exc: BaseException) -> bool:
    """For tenacity's ``retry_if_exception``."""
    return isinstance(exc, RetryableStatusError | httpx.NetworkError | httpx.RemoteProtocolError)


def raise_for_retryable(response: httpx.Response) -> None:
    """Raise :class:`RetryableStatusError` for 5xx/429 (retried), ``HTTPStatusError`` for other 4xx."""
    if response.status_code == 429 or response.status_code >= 500:
        raise RetryableStatusError(response.status_code)
    response.raise_for_status()
