"""The OpenSearch index's request policy (services/retrieval/opensearch_transport.py), on requests that fail as OpenSearch fails them: idempotent ones
are retried on 429/5xx and lost connections with back-off, others are sent once, and a search with
failed shards or a timeout is an error, never a complete-looking answer. (The index itself runs
against a real node: tests/integration/test_opensearch_index.py.)"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from opensearchpy import OpenSearch
from opensearchpy.exceptions import ConnectionError as ClientConnectionError
from opensearchpy.exceptions import TransportError

from services.common.errors import ErrorCode, RampartError
from services.retrieval.config import OpenSearchSettings
from services.retrieval.opensearch_transport import Transport, complete

URL = "http://127.0.0.1:9"


def index(retries: int = 2) -> Transport:
    settings = OpenSearchSettings(url=URL, retries=retries, backoff_s=0.0)
    return Transport(OpenSearch(hosts=[URL]), URL, settings)


def failing(*errors: Exception) -> tuple[Callable[[], str], list[int]]:
    calls: list[int] = []

    def call() -> str:
        calls.append(1)
        if len(calls) <= len(errors):
            raise errors[len(calls) - 1]
        return "ok"

    return call, calls


def busy(status: int) -> TransportError:
    return TransportError(status, "busy", {"error": {"type": "busy", "reason": "try later"}})


def test_idempotent_requests_are_retried_on_429_and_5xx() -> None:
    call, calls = failing(busy(429), busy(503))
    assert index().call("search", call, idempotent=True) == "ok"
    assert len(calls) == 3


def test_other_requests_are_sent_once() -> None:
    call, calls = failing(busy(503))
    with pytest.raises(RampartError, match=r"refused allocate \(HTTP 503\): busy: try later") as caught:
        index().call("allocate", call, idempotent=False)
    assert caught.value.code is ErrorCode.UNAVAILABLE and len(calls) == 1


def test_client_errors_are_not_retried() -> None:
    call, calls = failing(TransportError(400, "bad", {"error": {"type": "parsing", "reason": "no"}}))
    with pytest.raises(RampartError, match="HTTP 400") as caught:
        index().call("search", call, idempotent=True)
    assert caught.value.code is ErrorCode.INTERNAL and len(calls) == 1


def test_lost_connection_after_the_retries_names_the_url_and_the_fix() -> None:
    call, calls = failing(*(ClientConnectionError("N/A", "refused", OSError()) for _ in range(3)))
    with pytest.raises(RampartError, match="rampart opensearch up") as caught:
        index(retries=2).call("search", call, idempotent=True)
    assert URL in caught.value.message and len(calls) == 3


def test_partial_results_are_refused() -> None:
    complete({"timed_out": False, "_shards": {"total": 2, "failed": 0}}, "x-chunks", URL)
    with pytest.raises(RampartError, match="1 of 2 shards failed"):
        complete({"timed_out": False, "_shards": {"total": 2, "failed": 1}}, "x-chunks", URL)
    with pytest.raises(RampartError, match="timed out: True"):
        complete({"timed_out": True, "_shards": {"total": 1, "failed": 0}}, "x-chunks", URL)
