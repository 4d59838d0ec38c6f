"""N ingest workers on one OpenSearch index (docs/opensearch.md, "Replicas"): two real ingest service
processes, each with its own journal, writing straight to the session's node; the client spreads
batches over both by gRPC round robin; one worker is SIGKILLed while it still holds acknowledged
batches, started again on its journal, and every acknowledged document ends indexed and searchable —
including a document that every batch carries at a new version, which ends at the newest one."""

from __future__ import annotations

import os
import signal
import sqlite3
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from opensearchpy import OpenSearch

from services.common.errors import RampartError
from services.common.types import Acl, Document, DocumentState, Principal
from services.ingest.remote_ingest import RemoteIngest
from services.retrieval.config import OpenSearchSettings
from services.retrieval.opensearch_index import OpenSearchIndex
from services.retrieval.opensearch_node import OpenSearchNode
from tests.integration.ingest_servers import IngestServiceProcess

BATCHES, PER_BATCH = 10, 3
READER = Principal(tenant="acme", user="reader", groups=["eng"])


@pytest.fixture()
def prefix(opensearch: OpenSearchNode) -> Iterator[str]:
    name = f"iw{uuid.uuid4().hex[:12]}"
    yield name
    client = OpenSearch(hosts=[opensearch.url])
    try:
        client.indices.delete(index=f"{name}-*")
    finally:
        client.close()


def batch(k: int) -> list[Document]:
    """Distinct documents (each with a token of its own: ``b3n1token``) and ``shared`` at version k+1."""
    docs = [
        Document(
            id=f"b{k}n{n}",
            tenant="acme",
            acl=Acl(groups=["*"]),
            title=f"Badge rule {k}.{n}",
            text=f"b{k}n{n}token: badges of floor {k} are renewed every {n + 2} months at the front desk.",
        )
        for n in range(PER_BATCH)
    ]
    shared = Document(
        id="shared",
        tenant="acme",
        acl=Acl(groups=["*"]),
        version=k + 1,
        text=f"sharedtoken revision {k + 1}: the visitor policy was last changed in round {k + 1}.",
    )
    return [*docs, shared]


def queued(journal: Path) -> int:
    db = sqlite3.connect(f"file:{journal}?mode=ro", uri=True)
    try:
        return int(db.execute("SELECT COUNT(*) FROM batches WHERE state='queued'").fetchone()[0])
    finally:
        db.close()


def test_a_sigkilled_ingest_worker_loses_no_acknowledged_document(
    opensearch: OpenSearchNode, prefix: str, tmp_path: Path, models_dir: Path
) -> None:
    env = {
        "RAMPART_INDEX__BACKEND": "opensearch",
        "RAMPART_OPENSEARCH__URL": opensearch.url,
        "RAMPART_OPENSEARCH__INDEX_PREFIX": prefix,
        # widen the window between acknowledgement and work, so the killed worker still holds batches
        "RAMPART_INGEST_SERVICE__TEST_PROCESS_DELAY_S": "1.0",
        "RAMPART_PARSING__TIMEOUT_S": "0",
    }
    workers = [IngestServiceProcess(tmp_path / f"w{i}" / "data", models_dir, "", **env) for i in range(2)]
    for w in workers:
        w.start()
    client = RemoteIngest(
        ",".join(w.address for w in workers),
        deadline_ms=10_000,
        ingest_deadline_ms=60_000,
        max_message_bytes=32 * 1024 * 1024,
    )
    acked: list[int] = []
    try:
        for k in range(BATCHES):
            client.submit(batch(k))  # returns once journaled (fsync'd) by whichever worker got it
            acked.append(k)
        journal = tmp_path / "w0" / "data" / "ingest-journal" / "journal.sqlite3"
        held = queued(journal)
        assert held > 0, "worker 0 finished everything before the kill: widen the delay"
        killed = workers[0].proc
        assert killed is not None
        os.killpg(killed.pid, signal.SIGKILL)
        killed.wait(10)
        for k in range(BATCHES, BATCHES + 4):  # the balancer skips the dead worker
            try:
                client.submit(batch(k))
                acked.append(k)
            except RampartError:  # a call that met the dead worker was not acknowledged: not counted
                continue
        assert len(acked) >= BATCHES + 2
        workers[0] = IngestServiceProcess(
            tmp_path / "w0" / "data", models_dir, "", port=workers[0].port, **env
        )
        workers[0].start()  # replays its journal

        ix = OpenSearchIndex.open(OpenSearchSettings(url=opensearch.url, index_prefix=prefix), dim=384)
        try:
            wanted = [d for k in acked for d in batch(k) if d.id != "shared"]
            deadline = time.monotonic() + 240
            while time.monotonic() < deadline:
                states = [ix.status("acme", d.id) for d in wanted]
                if all(s is not None and s.state is DocumentState.INDEXED for s in states):
                    shared = ix.status("acme", "shared")
                    newest = shared is not None and shared.version == max(acked) + 1
                    if newest and shared is not None and shared.state is DocumentState.INDEXED:
                        break
                time.sleep(1.0)
            missing = [
                d.id
                for d in wanted
                if (s := ix.status("acme", d.id)) is None or s.state is not DocumentState.INDEXED
            ]
            assert missing == [], f"acknowledged but not indexed: {missing}\n{workers[0].log()}"
            shared = ix.status("acme", "shared")
            assert shared is not None and shared.state is DocumentState.INDEXED
            assert shared.version == max(acked) + 1  # the newest acknowledged version, whatever the order
            for d in wanted:
                assert ix.bm25(f"{d.id}token", READER, 5), d.id
            hits = ix.bm25("sharedtoken", READER, 20)
            assert {c.version for c in ix.chunks([c for c, _ in hits], READER).values()} == {shared.version}
            ix.client.indices.refresh(index=ix.chunks_alias)
            total = ix.client.count(index=ix.chunks_alias)["count"]
            owned = sum(s.chunks for d in [*wanted, batch(0)[-1]] if (s := ix.status("acme", d.id)))
            assert total == owned  # no chunk that no document owns
        finally:
            ix.close()
        assert queued(journal) == 0
    finally:
        client.close()
        for w in workers:
            w.stop()
