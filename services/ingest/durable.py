"""Durable ingest: journal first, acknowledge, then process in arrival order on one worker thread.

``submit`` returns once the batch is fsync'd in the :class:`IngestJournal`; the worker runs each batch
through :meth:`IngestService.ingest` (idempotent by ``(id, version)``, failure-safe per document) and
marks it done. A crash anywhere after ``submit`` returned loses nothing: :meth:`start` replays the
queued batches first, and re-running a half-processed batch reports its finished documents
``unchanged``. A batch whose index is unreachable (``ingest`` raises, its index write included: the
worker asks it to) is retried with backoff for ``retry_max_s``, then its documents are reported failed
with the reason. Deletes go through
the same queue, so a delete is never overtaken by a batch accepted before it.

Usage::

    durable = DurableIngest(service, journal, retry_max_s=300)
    durable.start()                                  # replays what a crash left queued
    results = durable.ingest(docs, timeout_s=300)   # = wait(submit(docs))
    durable.close()
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Sequence
from concurrent.futures import CancelledError, Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass

from opentelemetry import context as otel_context
from tenacity import (
    RetryError,
    Retrying,
    retry_if_exception,
    stop_after_delay,
    wait_exponential,
)

from services.common.errors import ErrorCode, RampartError
from services.common.otel import context_from, trace_headers
from services.common.tracing import stage_span
from services.common.types import Document, DocumentState, DocumentStatus
from services.ingest.journal import IngestJournal, JournaledBatch
from services.ingest.service import IngestResult, IngestService, Outcome

log = logging.getLogger(__name__)


@dataclass
class _Delete:
    tenant: str
    doc_id: str
    future: Future[bool]


_STOP = object()
# How long a delete that started just as its caller's wait ran out may still take before it answers.
DELETE_GRACE_S = 1.0


class DurableIngest:
    """One worker thread over the journal; every public method is safe from any thread."""

    def __init__(
        self,
        service: IngestService,
        journal: IngestJournal,
        *,
        retry_max_s: float = 300.0,
        process_delay_s: float = 0.0,
    ) -> None:
        self.service = service
        self.journal = journal
        self.retry_max_s = retry_max_s
        self.process_delay_s = process_delay_s  # tests only: widens the window between ack and work
        self._queue: queue.Queue[object] = queue.Queue()
        self._lock = threading.Lock()
        self._submit_lock = threading.Lock()  # journal order == queue order, whatever the threads
        self._futures: dict[int, Future[list[IngestResult]]] = {}
        # (tenant, doc_id) -> {batch_id: (version, submitted_at)}: what status reports as pending
        self._pending: dict[tuple[str, str], dict[int, tuple[int, float]]] = {}
        self._worker: threading.Thread | None = None
        self._started = False  # before start(), submit only journals: start() queues in journal order
        self._closed = threading.Event()

    # ---- lifecycle ----
    def start(self) -> None:
        """Queue what the journal holds (a previous process's unfinished batches), start the worker."""
        if self._worker is not None:
            return
        with self._submit_lock:  # in journal order, including batches submitted before start()
            replay = self.journal.pending()
            for batch in replay:
                self._register(batch)
                self._queue.put(batch)
            self._started = True  # only now may deletes queue: they go after the replayed batches
        if replay:
            log.info(
                "replaying journaled ingest batches",
                extra={"batches": len(replay), "documents": sum(len(b.documents) for b in replay)},
            )
        self._worker = threading.Thread(target=self._run, name="durable-ingest", daemon=True)
        self._worker.start()

    def close(self, timeout_s: float = 10.0) -> None:
        """Stop after the batch in progress; queued batches stay journaled for the next start."""
        self._closed.set()
        self._queue.put(_STOP)
        if self._worker is not None:
            self._worker.join(timeout_s)
        with self._lock:
            for fut in self._futures.values():
                fut.cancel()

    # ---- API ----
    def submit(self, docs: Sequence[Document]) -> int:
        """Journal the batch (fsync) and queue it; the returned id means "accepted, will be processed"."""
        if self._closed.is_set():
            raise RampartError(ErrorCode.UNAVAILABLE, "the ingest service is shutting down; retry shortly")
        if not docs:
            raise RampartError(ErrorCode.INVALID_ARGUMENT, "the batch has no documents; send at least one")
        with self._submit_lock:
            trace = trace_headers()  # processing continues this request's trace, on the worker
            batch_id = self.journal.append(docs, trace)
            batch = JournaledBatch(batch_id, time.time(), list(docs), trace)
            self._register(batch)
            if self._started:  # else start() queues it, in journal order with the replayed ones
                self._queue.put(batch)
        return batch_id

    def wait(self, batch_id: int, timeout_s: float) -> list[IngestResult]:
        """Results of a batch, waiting up to ``timeout_s``; a timeout loses nothing (poll status)."""
        with self._lock:
            fut = self._futures.get(batch_id)
        if fut is None:
            done = self.journal.results(batch_id)
            if done is not None:
                return done
            raise RampartError(
                ErrorCode.NOT_FOUND,
                f"ingest batch {batch_id} is unknown here (never accepted, or its results were pruned "
                "after RAMPART_INGEST_SERVICE__JOURNAL_KEEP_DONE_S); check each document's status",
            )
        try:
            return fut.result(timeout=timeout_s)
        except FutureTimeout:
            raise RampartError(
                ErrorCode.DEADLINE_EXCEEDED,
                f"ingest batch {batch_id} is accepted but not processed within {timeout_s:.1f}s; it will "
                "be, so poll each document's status instead of resending",
                batch_id=batch_id,
            ) from None
        except CancelledError:
            raise RampartError(
                ErrorCode.UNAVAILABLE,
                f"ingest batch {batch_id} is journaled but the service stopped before processing it; "
                "it is processed after the restart (poll each document's status)",
                batch_id=batch_id,
            ) from None

    def ingest(self, docs: Sequence[Document], timeout_s: float) -> list[IngestResult]:
        """Submit and wait: the synchronous behaviour the gateway has in embedded mode."""
        return self.wait(self.submit(docs), timeout_s) if docs else []

    def delete(self, tenant: str, doc_id: str, timeout_s: float = 30.0) -> bool:
        """Delete after every batch accepted before it; a timed-out delete is withdrawn, not applied."""
        if self._closed.is_set():
            raise RampartError(ErrorCode.UNAVAILABLE, "the ingest service is shutting down; retry shortly")
        if not self._started:
            raise RampartError(
                ErrorCode.UNAVAILABLE, "the ingest service is starting (waiting for its index); retry shortly"
            )
        fut: Future[bool] = Future()
        self._queue.put(_Delete(tenant, doc_id, fut))
        try:
            return fut.result(timeout=timeout_s)
        except FutureTimeout:
            if fut.cancel():
                raise RampartError(
                    ErrorCode.DEADLINE_EXCEEDED,
                    f"delete of {doc_id!r} waited {timeout_s:.1f}s behind queued ingest batches and was "
                    "withdrawn (not applied); retry it",
                ) from None
            try:
                return fut.result(timeout=DELETE_GRACE_S)  # it started just now: its result follows shortly
            except FutureTimeout:
                raise RampartError(
                    ErrorCode.DEADLINE_EXCEEDED,
                    f"delete of {doc_id!r} started after waiting {timeout_s:.1f}s and is still running; "
                    "check the document's status before retrying",
                ) from None

    def status(self, tenant: str, doc_id: str) -> DocumentStatus | None:
        """The index's status, except that a journaled-but-unprocessed version reports ``pending``."""
        with self._lock:
            queued = self._pending.get((tenant, doc_id))
            latest = max(queued.values()) if queued else None
        stored = self.service.index.status(tenant, doc_id)
        if latest is None:
            return stored
        version, submitted_at = latest
        return DocumentStatus(
            id=doc_id,
            tenant=tenant,
            version=version,
            state=DocumentState.PENDING,
            chunks=stored.chunks if stored is not None else 0,
            updated_at=submitted_at,
            readers=stored.readers if stored is not None else [],
        )

    # ---- worker ----
    def _register(self, batch: JournaledBatch) -> None:
        """Its future (kept if submitted before start) and its documents' pending status."""
        with self._lock:
            self._futures.setdefault(batch.id, Future())
            for d in batch.documents:
                self._pending.setdefault((d.tenant, d.id), {})[batch.id] = (d.version, batch.created_at)

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is _STOP or self._closed.is_set():
                return
            if isinstance(item, _Delete):
                if item.future.set_running_or_notify_cancel():
                    try:
                        item.future.set_result(self.service.delete(item.tenant, item.doc_id))
                    except Exception as exc:
                        item.future.set_exception(exc)
            elif isinstance(item, JournaledBatch):
                self._process(item)

    def _process(self, batch: JournaledBatch) -> None:
        if self.process_delay_s and self._closed.wait(self.process_delay_s):
            return  # closing: the batch stays queued in the journal
        token = otel_context.attach(context_from(batch.trace))
        try:
            with stage_span("rampart.ingest.batch", documents=len(batch.documents), batch=batch.id):
                self._finish(batch)
        finally:
            otel_context.detach(token)

    def _finish(self, batch: JournaledBatch) -> None:
        results = self._ingest_with_retry(batch)
        if results is None:  # closing mid-retry: the batch stays queued in the journal
            return
        try:
            self.journal.mark_done(batch.id, results)
        except Exception:  # the batch stays queued in the journal: the next start replays it (unchanged)
            log.exception("could not mark ingest batch done", extra={"batch_id": batch.id})
        # the index has the results either way: answer the waiters and stop reporting them pending
        with self._lock:
            fut = self._futures.pop(batch.id, None)
            for d in batch.documents:
                entries = self._pending.get((d.tenant, d.id))
                if entries is not None:
                    entries.pop(batch.id, None)
                    if not entries:
                        del self._pending[(d.tenant, d.id)]
        if fut is not None and fut.set_running_or_notify_cancel():
            fut.set_result(results)

    def _ingest_with_retry(self, batch: JournaledBatch) -> list[IngestResult] | None:
        """Retry the whole batch while it raises (index unreachable): safe, ingest is idempotent."""
        retrying = Retrying(
            stop=stop_after_delay(self.retry_max_s),
            wait=wait_exponential(multiplier=0.2, max=10.0),
            retry=retry_if_exception(lambda _exc: not self._closed.is_set()),
            before_sleep=lambda state: log.warning(
                "ingest batch failed as a whole; retrying",
                extra={
                    "batch_id": batch.id,
                    "attempt": state.attempt_number,
                    "error": repr(state.outcome.exception()) if state.outcome else "",
                },
            ),
            sleep=self._sleep,
        )
        try:
            return retrying(self.service.ingest, batch.documents, raise_unavailable=True)
        except RetryError as exc:
            last = exc.last_attempt.exception()
            reason = last.message if isinstance(last, RampartError) else f"{type(last).__name__}: {last}"
        except Exception as exc:
            if self._closed.is_set():
                return None
            reason = exc.message if isinstance(exc, RampartError) else f"{type(exc).__name__}: {exc}"
        if self._closed.is_set():
            return None
        log.error("ingest batch failed after retries", extra={"batch_id": batch.id, "error": reason})
        message = (
            f"index unreachable for {self.retry_max_s:.0f}s (RAMPART_INGEST_SERVICE__RETRY_MAX_S): {reason}"
        )
        for d in batch.documents:
            self._mark_failed(d, message)
        return [
            IngestResult(
                id=d.id,
                version=d.version,
                outcome=Outcome.FAILED,
                error=message,
                code=ErrorCode.UNAVAILABLE.value,
            )
            for d in batch.documents
        ]

    def _mark_failed(self, doc: Document, message: str) -> None:
        """Best effort: record the failure in the index too, if it is back and still shows this
        version pending (never over a newer or finished version)."""
        try:
            current = self.service.index.current(doc.tenant, doc.id)
            if current is not None and current[0] == doc.version and current[2] is DocumentState.PENDING:
                self.service.index.mark(doc.tenant, doc.id, doc.version, DocumentState.FAILED, error=message)
        except Exception:
            log.warning("could not record the failure in the index", extra={"doc_id": doc.id})

    def _sleep(self, seconds: float) -> None:
        self._closed.wait(seconds)
