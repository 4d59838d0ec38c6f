"""The ingest service: ``python -m services.ingest.server`` (settings: ``RAMPART_INGEST_SERVICE__*``).

Parse → chunk → embed here (its own embedder), write through a ``RemoteIndex`` to the retrieval
service (``RAMPART_REMOTE__RETRIEVAL_ADDRESS``, required), or, with ``RAMPART_INDEX__BACKEND=opensearch``,
straight to OpenSearch (any number of such workers, each with its own journal: docs/opensearch.md,
"Replicas"), durably: batches are journaled in
``settings.ingest_journal_dir()`` before they are acknowledged and replayed after a restart. Health
turns SERVING only once the retrieval service answers; until then batches are accepted (journaled)
but not processed. SIGTERM: NOT_SERVING, in-flight RPCs drain for ``grace_s``, the worker stops after
its current batch (queued ones stay journaled for the next start).
"""

from __future__ import annotations

import asyncio
import logging
import sys
import time
from concurrent.futures import ThreadPoolExecutor

from rampart.ingest.v1 import ingest_pb2, ingest_pb2_grpc

from services.common.errors import ErrorCode, RampartError
from services.common.grpc_server import GrpcServer, run_blocking
from services.common.service_auth import ServiceAuth
from services.common.service_telemetry import run_service
from services.common.settings import RampartSettings
from services.ingest.durable import DurableIngest
from services.ingest.journal import IngestJournal
from services.ingest.service import IngestService
from services.ingest.servicer import IngestServicer
from services.retrieval.embedder import Embedder, build_embedder
from services.retrieval.index import SearchIndex

log = logging.getLogger(__name__)

INGEST_SERVICE = ingest_pb2.DESCRIPTOR.services_by_name["IngestService"]
JOURNAL_FILE = "journal.sqlite3"


def retrieval_address(settings: RampartSettings) -> str:
    address = settings.remote.retrieval_address
    if not address:
        raise RampartError(
            ErrorCode.FAILED_PRECONDITION,
            "the ingest service writes to the retrieval service, but RAMPART_REMOTE__RETRIEVAL_ADDRESS is "
            "unset; set it to the retrieval service's host:port (e.g. 127.0.0.1:50051)",
        )
    return address


def open_journal(settings: RampartSettings) -> IngestJournal:
    cfg = settings.ingest_service
    return IngestJournal.open(
        settings.ingest_journal_dir() / JOURNAL_FILE,
        max_batches=cfg.journal_max_batches,
        max_bytes=cfg.journal_max_bytes,
        keep_done_s=cfg.journal_keep_done_s,
    )


class IngestApp:
    """The gRPC server over a :class:`DurableIngest` built from ``index`` (a ``RemoteIndex`` in the
    service; any ``SearchIndex`` in tests). Handlers block (journal fsync, waiting for results), so
    they run on a pool sized ``max_concurrent_rpcs``: a waiting ``Ingest`` never starves ``Status``."""

    def __init__(self, settings: RampartSettings, index: SearchIndex, embedder: Embedder) -> None:
        cfg = settings.ingest_service
        self.index = index
        self.journal = open_journal(settings)
        self.durable = DurableIngest(
            IngestService.from_settings(
                index,
                embedder,
                settings.chunking,
                max_document_bytes=settings.gateway.max_document_bytes,
                claim_vectors=settings.index.claim_vectors,
                parsing=settings.parsing,
                graph=settings.graph,
            ),
            self.journal,
            retry_max_s=cfg.retry_max_s,
            process_delay_s=cfg.test_process_delay_s,
        )
        self.executor = ThreadPoolExecutor(
            max_workers=cfg.max_concurrent_rpcs, thread_name_prefix="ingest-rpc"
        )
        servicer = IngestServicer(
            self.durable,
            self.executor,
            max_batch_documents=settings.gateway.max_batch_documents,
            default_wait_s=settings.remote.ingest_deadline_ms / 1000,
        )
        self.server = GrpcServer(cfg, name="ingest", auth=ServiceAuth.from_settings(settings.remote))
        self.server.add(ingest_pb2_grpc.add_IngestServiceServicer_to_server, servicer, INGEST_SERVICE)
        self._ready: asyncio.Task[None] | None = None
        # first: a start-up still waiting for the index must not replay into a closing journal
        self.server.on_stop(self._cancel_ready)
        self.server.on_stop(self.durable.close)
        self.server.on_stop(self.journal.close)
        self.server.on_stop(lambda: self.executor.shutdown(wait=False, cancel_futures=True))

    async def start(self) -> int:
        """Bind and serve (NOT_SERVING); SERVING follows once the index answers. Returns the port."""
        port = await self.server.start()
        self._ready = asyncio.create_task(self._become_ready())
        return port

    async def stop(self, grace_s: float | None = None) -> None:
        self._cancel_ready()
        await self.server.stop(grace_s)

    def _cancel_ready(self) -> None:
        if self._ready is not None:
            self._ready.cancel()

    async def _become_ready(self) -> None:
        """Wait for the index, then replay the journal (start the worker) and report SERVING."""
        next_log = 0.0
        while not await run_blocking(self.executor, _answers, self.index):
            if time.monotonic() >= next_log:
                log.warning("ingest service waiting for the index (retrieval service) to answer")
                next_log = time.monotonic() + 10.0
            await asyncio.sleep(0.5)
        # replaying reads every queued batch from the journal: off the event loop, which serves Status
        await run_blocking(self.executor, self.durable.start)
        await self.server.set_serving()
        log.info("ingest service SERVING")


def _answers(index: SearchIndex) -> bool:
    try:
        index.stats()
    except Exception:
        return False
    return True


def open_ingest_index(settings: RampartSettings, embedder: Embedder) -> SearchIndex:
    """Where this worker writes. On OpenSearch, the cluster itself: every ingest worker is one more
    client of the shared index (writes are claimed per document: opensearch_claim.py), so N workers
    scale without funnelling through the retrieval service. On the embedded index, the retrieval
    service that owns it (``remote.retrieval_address``, required)."""
    from services.retrieval.index import open_index, open_stored_index

    if settings.index.backend == "opensearch":
        return open_stored_index(settings, embedder.dim, embedder.model_id)
    return open_index(settings, embedder.dim, embedder.model_id)


async def serve(settings: RampartSettings) -> None:
    """Build the embedder and the index from ``settings`` and serve until a signal."""
    if settings.index.backend != "opensearch":
        retrieval_address(settings)  # fail before loading anything: open_index is then the remote one
    embedder = build_embedder(settings.embedding, settings.models_dir)
    index = open_ingest_index(settings, embedder)
    try:
        app = IngestApp(settings, index, embedder)
    except BaseException:
        index.close()
        raise
    app.server.on_stop(index.close)
    app.server.on_stop(app.durable.service.close)  # the parser process
    await app.start()
    try:
        await app.server.serve_until_signal()
    finally:
        await app.stop()


def main() -> int:
    return run_service("ingest", lambda s: s.ingest_service, serve)


if __name__ == "__main__":
    sys.exit(main())
