"""The worker's request metrics label a task by what its caller got: ok, or the error it got."""

from __future__ import annotations

from services.factcheck.celery_app import _code

REFUSED = {"error": {"code": "failed_precondition", "message": "another model"}}


def test_a_batch_of_only_errors_counts_as_that_error() -> None:
    assert _code([REFUSED, REFUSED]) == "failed_precondition"
    assert _code(REFUSED) == "failed_precondition"


def test_a_batch_with_any_evidence_is_ok() -> None:
    assert _code([REFUSED, {"chunk_id": "c", "signals": {}}]) == "ok"
    assert _code([]) == "ok"
