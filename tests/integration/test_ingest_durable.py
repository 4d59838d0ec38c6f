"""Durable ingest in-process (journal + worker over the real embedded index and embedder): order,
pending status, per-document failures, idempotent resends, and a SIGKILL between ack and work."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from services.common.errors import ErrorCode, RampartError
from services.common.settings import RampartSettings
from services.common.types import Acl, Document, DocumentState, Principal
from services.ingest.durable import DurableIngest
from services.ingest.journal import IngestJournal
from services.ingest.service import IngestService, Outcome
from services.retrieval.embedder import Embedder
from services.retrieval.index import SearchIndex, open_index

REPO = Path(__file__).resolve().parents[2]


def doc(doc_id: str, text: str, version: int = 1) -> Document:
    return Document(id=doc_id, tenant="acme", acl=Acl(groups=["*"]), text=text, version=version)


def open_journal(settings: RampartSettings) -> IngestJournal:
    return IngestJournal.open(
        settings.ingest_journal_dir() / "journal.sqlite3",
        max_batches=50,
        max_bytes=10_000_000,
        keep_done_s=3600,
    )


@pytest.fixture()
def index(settings: RampartSettings, embedder: Embedder) -> Iterator[SearchIndex]:
    idx = open_index(settings, embedder.dim, embedder.model_id)
    yield idx
    idx.close()


def durable(settings: RampartSettings, index: SearchIndex, embedder: Embedder, **kw: float) -> DurableIngest:
    d = DurableIngest(
        IngestService.from_settings(
            index,
            embedder,
            settings.chunking,
            max_document_bytes=settings.gateway.max_document_bytes,
            claim_vectors=settings.index.claim_vectors,
        ),
        open_journal(settings),
        **kw,
    )
    d.start()
    return d


def test_batches_in_order_with_per_document_failures_and_idempotent_resend(
    settings: RampartSettings, index: SearchIndex, embedder: Embedder
) -> None:
    d = durable(settings, index, embedder)
    try:
        bad = Document(
            id="broken",
            tenant="acme",
            acl=Acl(groups=["*"]),
            content_base64="AAEC",
            content_type="application/pdf",
        )
        first = d.submit([doc("a", "Parental leave is sixteen weeks for every parent."), bad])
        second = d.submit([doc("a", "Parental leave is twenty weeks for every parent.", version=2)])
        r1, r2 = d.wait(first, 60), d.wait(second, 60)
        assert [r.outcome for r in r1] == [Outcome.INDEXED, Outcome.FAILED]
        assert r1[1].error  # the failure reason is kept, per document
        assert r2[0].outcome is Outcome.INDEXED
        assert d.status("acme", "a").version == 2  # type: ignore[union-attr]
        failed = d.status("acme", "broken")
        assert failed is not None and failed.state is DocumentState.FAILED and failed.error

        again = d.ingest([doc("a", "Parental leave is twenty weeks for every parent.", version=2)], 60)
        assert again[0].outcome is Outcome.UNCHANGED
        hits = index.bm25("twenty weeks", Principal(tenant="acme", user="u"), 5)
        assert len(hits) == 1

        assert d.delete("acme", "a") is True
        assert d.status("acme", "a").state is DocumentState.DELETED  # type: ignore[union-attr]
        assert d.delete("acme", "a") is False
        assert d.wait(first, 1)[0].outcome is Outcome.INDEXED  # results stay readable from the journal
    finally:
        d.close()


def test_queued_documents_report_pending_and_wait_times_out_without_loss(
    settings: RampartSettings, index: SearchIndex, embedder: Embedder
) -> None:
    d = durable(settings, index, embedder, process_delay_s=1.5)
    try:
        batch = d.submit([doc("slow", "Expense reports are due by the fifth of each month.")])
        st = d.status("acme", "slow")
        assert st is not None and st.state is DocumentState.PENDING
        with pytest.raises(RampartError) as exc:
            d.wait(batch, 0.1)
        assert exc.value.code is ErrorCode.DEADLINE_EXCEEDED
        assert d.wait(batch, 30)[0].outcome is Outcome.INDEXED
        assert d.status("acme", "slow").state is DocumentState.INDEXED  # type: ignore[union-attr]
    finally:
        d.close()
    with pytest.raises(RampartError) as exc:
        d.submit([doc("late", "after close")])
    assert exc.value.code is ErrorCode.UNAVAILABLE


SUBMIT_THEN_HANG = textwrap.dedent(
    """
    import sys, time
    from services.common.settings import RampartSettings
    from services.common.types import Acl, Document
    from services.ingest.durable import DurableIngest
    from services.ingest.journal import IngestJournal

    settings = RampartSettings()
    journal = IngestJournal.open(settings.ingest_journal_dir() / "journal.sqlite3",
                                 max_batches=50, max_bytes=10_000_000, keep_done_s=3600)
    # No index or embedder: this process only accepts; it is killed before any processing.
    durable = DurableIngest(None, journal)  # type: ignore[arg-type]
    docs = [Document(id=f"k{i}", tenant="acme", acl=Acl(groups=["*"]),
                     text=f"Killed process document {i} about badge access rules.") for i in range(3)]
    print(durable.submit(docs), flush=True)
    time.sleep(600)
    """
)


def test_acknowledged_batch_survives_sigkill(
    settings: RampartSettings, index: SearchIndex, embedder: Embedder
) -> None:
    env = {**os.environ, "RAMPART_DATA_DIR": str(settings.data_dir), "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(
        [sys.executable, "-c", SUBMIT_THEN_HANG],
        stdout=subprocess.PIPE,
        env=env,
        cwd=REPO,
        start_new_session=True,
    )
    try:
        assert proc.stdout is not None
        ack = proc.stdout.readline().strip()  # the batch id: acknowledged
        assert ack.isdigit(), ack
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)

    d = durable(settings, index, embedder)
    try:
        results = d.wait(int(ack), 60)  # replayed at start, under the same batch id
        assert [r.outcome for r in results] == [Outcome.INDEXED] * 3
        for i in range(3):
            assert d.status("acme", f"k{i}").state is DocumentState.INDEXED  # type: ignore[union-attr]
    finally:
        d.close()


def test_batch_failing_as_a_whole_is_retried_then_failed_with_a_reason(
    settings: RampartSettings, embedder: Embedder
) -> None:
    """An index that is closed underneath the service raises on every call: the batch is retried for
    retry_max_s, then each document is reported failed with the reason (never silently dropped)."""
    idx = open_index(settings, embedder.dim, embedder.model_id)
    idx.close()
    d = durable(settings, idx, embedder, retry_max_s=1.0)
    try:
        started = time.monotonic()
        results = d.ingest([doc("x", "Badge access is revoked on the last working day.")], 30)
        assert time.monotonic() - started >= 1.0
        assert results[0].outcome is Outcome.FAILED
        assert results[0].code == ErrorCode.UNAVAILABLE.value
        assert "RETRY_MAX_S" in (results[0].error or "")
        assert d.journal.pending() == []  # finished (as failed), not replayed forever
    finally:
        d.close()


def test_batches_accepted_before_start_run_after_the_replay_in_journal_order(
    settings: RampartSettings, index: SearchIndex, embedder: Embedder
) -> None:
    """The service accepts batches while it waits for its index: they must not overtake the batches a
    previous process left queued (v1 journaled earlier, v2 accepted now: v2 must win)."""
    earlier = open_journal(settings)
    old = earlier.append([doc("o", "Office hours are nine to five.", version=1)])
    earlier.close()

    d = DurableIngest(
        IngestService.from_settings(
            index,
            embedder,
            settings.chunking,
            max_document_bytes=settings.gateway.max_document_bytes,
            claim_vectors=settings.index.claim_vectors,
        ),
        open_journal(settings),
    )
    try:
        new = d.submit([doc("o", "Office hours are eight to four.", version=2)])
        assert d.status("acme", "o").state is DocumentState.PENDING  # type: ignore[union-attr]
        with pytest.raises(RampartError) as exc:
            d.delete("acme", "o")
        assert exc.value.code is ErrorCode.UNAVAILABLE  # not before the replay
        d.start()
        assert d.wait(new, 60)[0].outcome is Outcome.INDEXED
        assert d.wait(old, 60)[0].outcome is Outcome.INDEXED
        assert d.status("acme", "o").version == 2  # type: ignore[union-attr]
    finally:
        d.close()


class WriteFailsTwice:
    """The real index, whose first two writes fail as a restarting remote index's would (the rest of
    the index answers): fault injection around the real thing."""

    def __init__(self, index: SearchIndex) -> None:
        self._index = index
        self.failed = 0

    def write(self, *args: object, **kwargs: object) -> object:
        if self.failed < 2:
            self.failed += 1
            raise RampartError(ErrorCode.UNAVAILABLE, "retrieval service restarting")
        return self._index.write(*args, **kwargs)  # type: ignore[arg-type]

    def __getattr__(self, name: str) -> object:
        return getattr(self._index, name)


def test_a_failed_index_write_is_retried_not_reported_failed(
    settings: RampartSettings, index: SearchIndex, embedder: Embedder
) -> None:
    """Durable ingest retries a batch whose index *write* failed transiently (the rest of the index
    answered); the same failure through plain IngestService marks the documents failed."""
    flaky = WriteFailsTwice(index)
    d = durable(settings, flaky, embedder, retry_max_s=30.0)  # type: ignore[arg-type]
    try:
        results = d.ingest([doc("w", "Visitors sign in at the front desk and wear a badge.")], 60)
        assert flaky.failed == 2
        assert results[0].outcome is Outcome.INDEXED
        status = index.status("acme", "w")
        assert status is not None and status.state is DocumentState.INDEXED
    finally:
        d.close()
    plain = IngestService.from_settings(
        WriteFailsTwice(index),  # type: ignore[arg-type]
        embedder,
        settings.chunking,
        max_document_bytes=settings.gateway.max_document_bytes,
        claim_vectors=settings.index.claim_vectors,
    )
    failed = plain.ingest([doc("w2", "Visitors return their badge when they leave.")])
    assert failed[0].outcome is Outcome.FAILED and failed[0].code == ErrorCode.UNAVAILABLE.value
