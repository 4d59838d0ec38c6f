"""``admit``: the rule that takes feedback only on results the caller's own impression lists, and the
404s that refuse the rest, each naming the value and the fix (services/learning/feedback_store.py)."""

from __future__ import annotations

import pytest

from services.common.errors import ErrorCode, RampartError
from services.learning.feedback_store import FeedbackItem, Impression, Shown, admit, unknown_request

SHOWN = Impression(
    "acme", "alice", "req-0001", "answer", "parental leave", (Shown("c1", "leave", 1), Shown("c2", "hr", 2)),
    created=1000.0, expires=1600.0,
)  # fmt: skip


def refused(imp: Impression | None, *items: FeedbackItem, now: float = 1100.0) -> RampartError:
    with pytest.raises(RampartError) as exc:
        admit(imp, "req-0001", items, credential="key:1", feedback_request_id="fb-0001", now=now)
    assert exc.value.code is ErrorCode.NOT_FOUND
    return exc.value


def test_labels_on_shown_results_become_events_with_rank_document_and_query() -> None:
    items = [FeedbackItem("c2", "relevant", "yes"), FeedbackItem("c1", "clicked")]
    events = admit(SHOWN, "req-0001", items, credential="key:1", feedback_request_id="fb-0001", now=1100.0)
    assert [(e.chunk_id, e.doc_id, e.rank, e.label, e.comment) for e in events] == [
        ("c2", "hr", 2, "relevant", "yes"), ("c1", "leave", 1, "clicked", None),
    ]  # fmt: skip
    assert {(e.tenant, e.user, e.action, e.query, e.time) for e in events} == {
        ("acme", "alice", "answer", "parental leave", 1100.0)
    }


def test_no_impression_is_the_one_unknown_message() -> None:
    exc = refused(None, FeedbackItem("c1", "relevant"))
    assert exc.message == unknown_request("req-0001").message and "/v1/search" in exc.message


def test_past_expiry_says_when_and_what_to_do() -> None:
    exc = refused(SHOWN, FeedbackItem("c1", "relevant"), now=1600.0)
    assert "expired at 1970-01-01T00:26:40Z" in exc.message and "600 s" in exc.message
    assert "search again" in exc.message


def test_one_result_not_shown_refuses_the_whole_call_naming_it() -> None:
    exc = refused(SHOWN, FeedbackItem("c1", "relevant"), FeedbackItem("c9", "clicked"))
    assert exc.details["field"] == "feedback[1].chunk_id" and "'c9'" in exc.message
