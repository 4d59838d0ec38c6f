"""OpenSearch faults on a real node of the test's own (the session's node is never killed): no node at
start-up stops the retrieval service with the reason; a node killed (SIGKILL of its JVM) in the middle
of an ingest of many documents makes searches fail as UNAVAILABLE / 503 naming the index, never a
partial answer, while durable ingest retries; started again on the same data folder, it holds every
document the ingest acknowledged, and the others were reported failed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from services.common.config import RemoteSettings, RetrievalServiceSettings
from services.common.errors import ErrorCode, RampartError
from services.common.net import free_port
from services.common.settings import RampartSettings
from services.common.types import Acl, Document, Principal
from services.gateway.api_keys import ApiKeyStore
from services.gateway.app import create_app
from services.ingest.durable import DurableIngest
from services.ingest.journal import IngestJournal
from services.ingest.service import IngestResult, Outcome
from services.orchestrator.runtime import Runtime
from services.rerank.reranker import Reranker
from services.retrieval.config import IndexSettings, OpenSearchSettings
from services.retrieval.embedder import Embedder
from services.retrieval.hybrid import SearchParams
from services.retrieval.index import open_index
from services.retrieval.opensearch_node import OpenSearchNode
from services.retrieval.remote_retriever import RemoteRetriever
from services.retrieval.server import RetrievalApp
from tests.conftest import REPO
from tests.integration.grpc_servers import BackgroundLoop, hermetic_env

READER = Principal(tenant="acme", user="ops", groups=["eng"], scopes=["search", "ingest"])
DOCS = 240
BATCH = 8


def document(i: int, version: int = 1) -> Document:
    return Document(
        id=f"d{i}",
        tenant="acme",
        version=version,
        acl=Acl(groups=["eng"]),
        title=f"Note {i}",
        text=f"Maintenance note {i}: the token zq{i}x marks this note. Rotate the keys of rack {i % 7}.",
        content_type="text/plain",
    )


def test_retrieval_service_refuses_to_start_without_opensearch(tmp_path: Path, models_dir: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    env = hermetic_env(
        {
            "RAMPART_INDEX__BACKEND": "opensearch",
            "RAMPART_OPENSEARCH__URL": url,
            "RAMPART_OPENSEARCH__RETRIES": "1",
            "RAMPART_RETRIEVAL_SERVICE__PORT": str(free_port()),
            "RAMPART_DATA_DIR": str(tmp_path / "data"),
            "RAMPART_MODELS_DIR": str(models_dir),
        }
    )
    proc = subprocess.run(
        [sys.executable, "-m", "services.retrieval.server"],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    said = proc.stdout + proc.stderr
    assert f"OpenSearch at {url} is unreachable" in said and "rampart opensearch up" in said


@pytest.fixture()
def node(tmp_path: Path) -> Iterator[OpenSearchNode]:
    started = OpenSearchNode(tmp_path / "os", free_port()).start()
    yield started
    started.stop()  # the restarted JVM, when the test started it again (it sets ``proc``)


def kill(node: OpenSearchNode) -> None:
    """SIGKILL the node's JVM (its process group: the node is ours, started by the test)."""
    assert node.proc is not None
    os.killpg(node.proc.pid, signal.SIGKILL)
    node.proc.wait(30)


def ingest_until_stopped(
    runtime: Runtime, stop: threading.Event, acked: dict[str, int], failed: dict[str, str]
) -> None:
    """Batches of BATCH documents until ``stop``: acknowledged (indexed) or reported failed, each."""
    for start in range(0, DOCS, BATCH):
        if stop.is_set():
            return
        docs = [document(i) for i in range(start, start + BATCH)]
        try:
            results: list[IngestResult] = runtime.ingest.ingest(docs)
        except RampartError as exc:  # the whole batch refused before any result: reported, not lost
            failed.update({d.id: exc.message for d in docs})
            continue
        for r in results:
            if r.outcome is Outcome.INDEXED:
                acked[r.id] = r.chunks
            else:
                failed[r.id] = r.error or r.outcome.value


def found(runtime: Runtime, i: int) -> bool:
    hits = runtime.index.bm25(f"zq{i}x", READER, 3)
    return any(c.doc_id == f"d{i}" for c in runtime.index.chunks([h[0] for h in hits], READER).values())


@pytest.mark.timeout(600)
def test_a_node_killed_mid_ingest_loses_no_acknowledged_document(  # long: one kill, every check on it
    node: OpenSearchNode, tmp_path: Path, models_dir: Path, embedder: Embedder, reranker: Reranker
) -> None:
    settings = RampartSettings(
        data_dir=tmp_path / "data",
        models_dir=models_dir,
        log_level="WARNING",
        index=IndexSettings(backend="opensearch"),
        opensearch=OpenSearchSettings(
            url=node.url, index_prefix="faults", timeout_s=10, retries=2, backoff_s=0.2
        ),
    )
    runtime = Runtime.open(settings, embedder=embedder, reranker=reranker)
    loop = BackgroundLoop()
    port = free_port()
    served = open_index(settings, embedder.dim, embedder.model_id)  # the retrieval service's own handle
    app = RetrievalApp(RetrievalServiceSettings(host="127.0.0.1", port=port), served, embedder)
    loop.run(app.start())
    remote = RemoteRetriever.connect(f"127.0.0.1:{port}", RemoteSettings())
    keys = ApiKeyStore(tmp_path / "keys.json")
    key = keys.create(READER)[0]
    client = TestClient(create_app(runtime, keys))
    journal = IngestJournal.open(
        tmp_path / "journal.db", max_batches=100, max_bytes=10_000_000, keep_done_s=60
    )
    durable = DurableIngest(runtime.ingest, journal, retry_max_s=300)
    acked: dict[str, int] = {}
    failed: dict[str, str] = {}
    stop = threading.Event()
    worker = threading.Thread(target=ingest_until_stopped, args=(runtime, stop, acked, failed))
    try:
        worker.start()
        deadline = time.monotonic() + 300
        while len(acked) < DOCS // 4 and worker.is_alive() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert DOCS // 4 <= len(acked) < DOCS, "the ingest should be under way"
        kill(node)  # in the middle of the ingest
        killed_at = len(acked)
        time.sleep(3)  # a few batches meet the dead node
        stop.set()
        worker.join(120)
        assert not worker.is_alive()
        assert failed, "some batches met the dead node"

        # searches fail, naming the index, never a partial answer: in-process, over gRPC, over HTTP
        with pytest.raises(RampartError) as direct:
            runtime.index.bm25("maintenance", READER, 10)
        assert direct.value.code is ErrorCode.UNAVAILABLE and "faults-chunks" in direct.value.message
        with pytest.raises(RampartError) as grpc_err:
            remote.search("maintenance note", READER, SearchParams.from_settings(settings.fusion, top_k=5))
        assert grpc_err.value.code is ErrorCode.UNAVAILABLE and "faults-chunks" in grpc_err.value.message
        http = client.post(
            "/v1/search", json={"query": "maintenance note"}, headers={"Authorization": f"Bearer {key}"}
        )
        assert http.status_code == 503, http.text
        assert http.json()["code"] == "unavailable" and "faults-chunks" in http.json()["message"]

        # durable ingest accepts (journal) and retries until the node is back
        durable.start()
        late = durable.submit([document(i, version=1) for i in range(DOCS, DOCS + 3)])

        restarted = OpenSearchNode(node.home, node.port).start()  # same data folder, same port
        node.proc = restarted.proc  # the fixture stops whichever runs
        late_results = durable.wait(late, timeout_s=240)
        assert [r.outcome for r in late_results] == [Outcome.INDEXED] * 3

        # every acknowledged document is searchable; each of the others was reported failed
        assert len(acked) >= killed_at
        assert set(acked).isdisjoint(failed)
        lost = [d for d in acked if not found(runtime, int(d[1:]))]
        assert lost == []
        for doc_id, why in failed.items():
            assert why, doc_id
        # sending the failed ones again indexes them; no chunk is left that no document owns
        retry = [document(int(d[1:])) for d in sorted(failed)]
        for start in range(0, len(retry), BATCH):
            for r in runtime.ingest.ingest(retry[start : start + BATCH]):
                assert r.outcome is Outcome.INDEXED, r
                acked[r.id] = r.chunks
        stats = runtime.index.stats()
        done = set(acked) | {f"d{i}" for i in range(DOCS, DOCS + 3)}
        assert stats.get("documents_indexed") == len(done), stats
        assert stats["chunks"] == sum(acked.values()) + sum(r.chunks for r in late_results), stats
        ok = client.post(
            "/v1/search",
            json={"query": "Maintenance note 3: the token zq3x", "factcheck": {"enabled": False}},
            headers={"Authorization": f"Bearer {key}"},
        )
        assert ok.status_code == 200 and "d3" in [r["doc_id"] for r in ok.json()["results"]], ok.text
    finally:
        stop.set()
        worker.join(60)
        durable.close()
        client.close()
        remote.close()
        loop.run(app.stop(grace_s=1.0))
        loop.close()
        runtime.close()
