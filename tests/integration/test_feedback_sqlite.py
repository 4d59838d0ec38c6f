"""``SqliteFeedbackStore`` (embedded: ``<data_dir>/feedback.sqlite3``) under the ``FeedbackStore``
contract, and what only it does: exports in pages, a reader beside the writer, a 503 for a folder it
cannot write."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from services.common.errors import ErrorCode, RampartError
from services.learning import feedback_sqlite
from services.learning.feedback_sqlite import SqliteFeedbackStore
from services.learning.feedback_store import FeedbackStore
from tests.contracts.feedback_store import MAKE_STORE, FeedbackStoreContract, event, impression


class TestSqliteFeedbackStore(FeedbackStoreContract):
    @pytest.fixture()
    def make_store(self, tmp_path: Path) -> Iterator[MAKE_STORE]:
        stores: list[FeedbackStore] = []

        def make(retention_s: float = 86400.0) -> FeedbackStore:
            stores.append(SqliteFeedbackStore(tmp_path / "feedback.sqlite3", retention_s=retention_s))
            return stores[-1]

        yield make
        for store in stores:
            store.close()


def test_an_export_larger_than_a_page_is_read_in_pages_while_the_writer_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(feedback_sqlite, "PAGE", 7)
    writer = SqliteFeedbackStore(tmp_path / "f.sqlite3", retention_s=60)
    t0 = time.time()
    writer.append([event("acme", f"u{n:02d}", at=t0 + n // 3) for n in range(20)])  # ties in time
    reader = SqliteFeedbackStore(tmp_path / "f.sqlite3", retention_s=60)
    got = reader.export("acme")
    first = [next(got).user for _ in range(8)]
    writer.append([event("acme", "late", at=t0 + 100)])  # the reader holds no lock between pages
    assert first + [e.user for e in got] == [f"u{n:02d}" for n in range(20)] + ["late"]
    writer.remember(impression("acme", "alice", "req-0001"))
    writer.close()
    reader.close()


def test_a_folder_it_cannot_write_is_unavailable_naming_the_file(tmp_path: Path) -> None:
    blocked = tmp_path / "file"
    blocked.write_text("not a folder")
    store = SqliteFeedbackStore(blocked / "feedback.sqlite3", retention_s=60)
    with pytest.raises(RampartError) as exc:
        store.check()
    assert exc.value.code is ErrorCode.UNAVAILABLE and "feedback.sqlite3" in exc.value.message
