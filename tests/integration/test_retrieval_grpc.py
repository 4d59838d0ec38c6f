"""The retrieval service over real gRPC on 127.0.0.1: the retriever contract (remote == local),
ACL/tenant scoping, errors, health, reflection, deadlines, and graceful stop on SIGTERM."""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import grpc
import numpy as np
import pytest
from google.rpc import error_details_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc
from grpc_status import rpc_status
from rampart.retrieval.v1 import index_pb2, index_pb2_grpc, retrieval_pb2_grpc

from services.common import wire
from services.common.config import GrpcServerSettings, RemoteSettings, RetrievalServiceSettings
from services.common.errors import ErrorCode, RampartError
from services.common.grpc_client import Caller, open_channel
from services.common.grpc_server import GrpcServer, remaining_s, set_deadline
from services.common.net import free_port
from services.common.types import Acl, Chunk, FusionMethod, Principal, SearchFilters
from services.retrieval.capabilities import Copies
from services.retrieval.config import FusionSettings
from services.retrieval.doc_store import ChunkWrite, DocumentWrite
from services.retrieval.embedded_index import EmbeddedIndex
from services.retrieval.embedder import Embedder
from services.retrieval.hybrid import HybridRetriever, SearchParams
from services.retrieval.read_scope import readable_ids
from services.retrieval.remote_index import RemoteIndex
from services.retrieval.remote_retriever import RemoteRetriever
from services.retrieval.server import RetrievalApp
from tests.contracts.retriever import ALICE, BOB, DOCS, EVE, RetrieverContract
from tests.integration.grpc_servers import BackgroundLoop, RetrievalServiceProcess

NO_CLAIM = "vpn"  # written without a claim vector: absent from copy cosines, never a copy of anything


def writes(embedder: Embedder, index: RemoteIndex) -> list[DocumentWrite]:
    texts = [t for *_, t in DOCS]
    vectors = embedder.embed(texts)
    lengths = index.token_lengths(texts)
    return [
        DocumentWrite(
            tenant=tenant,
            doc_id=doc_id,
            version=1,
            content_hash="h",
            title=doc_id,
            source=f"wiki/{doc_id}",
            acl=Acl(groups=groups),
            metadata={"kind": "policy" if doc_id != "laptop" else "memo"},
            chunks=[
                ChunkWrite(
                    Chunk(chunk_id=f"{doc_id}#0", doc_id=doc_id, tenant=tenant, ordinal=0, text=text),
                    lengths[i],
                    vectors[i],
                    claim_vector=None if doc_id == NO_CLAIM else vectors[i],  # no header: text alone
                )
            ],
        )
        for i, (doc_id, tenant, groups, text) in enumerate(DOCS)
    ]


class Served:
    def __init__(self, loop: BackgroundLoop, root: Path, embedder: Embedder) -> None:
        self.loop = loop
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        loop.run(self._start(root, embedder))

    async def _start(self, root: Path, embedder: Embedder) -> None:
        self.index = EmbeddedIndex.open(root, dim=embedder.dim)  # opened and closed on the loop's thread
        # reflection on: test_health_and_reflection reads it (off by default: test_service_auth.py)
        self.app = RetrievalApp(
            RetrievalServiceSettings(port=self.port, reflection=True), self.index, embedder
        )
        await self.app.start()


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory, embedder: Embedder) -> Iterator[Served]:
    loop = BackgroundLoop()
    s = Served(loop, tmp_path_factory.mktemp("retrieval") / "index", embedder)
    client = RemoteIndex.connect(s.address, RemoteSettings())
    client.write(writes(embedder, client))
    client.close()
    yield s
    loop.run(s.app.stop(grace_s=1.0))
    loop.close()


@pytest.fixture()
def remote(served: Served) -> Iterator[RemoteRetriever]:
    r = RemoteRetriever.connect(served.address, RemoteSettings())
    yield r
    r.close()


class TestHybridRetriever(RetrieverContract):
    @pytest.fixture()
    def retriever(self, served: Served, embedder: Embedder) -> Iterator[HybridRetriever]:
        r = HybridRetriever(served.index, embedder)
        yield r
        r.close()


class TestRemoteRetriever(RetrieverContract):
    @pytest.fixture()
    def retriever(self, remote: RemoteRetriever) -> RemoteRetriever:
        return remote


PARAMS = [
    SearchParams.from_settings(FusionSettings(), top_k=3),
    SearchParams.from_settings(FusionSettings(), top_k=5, method=FusionMethod.RRF, rrf_k=10),
    SearchParams.from_settings(FusionSettings(), top_k=5, method=FusionMethod.ZSCORE, fill_missing=False),
    SearchParams.from_settings(FusionSettings(), top_k=4, weights={"bm25": 1.0, "dense": 0.0}),
    SearchParams.from_settings(
        FusionSettings(), top_k=4, filters=SearchFilters(metadata={"kind": "policy"}), candidates=3
    ),
]


@pytest.mark.parametrize("params", PARAMS, ids=["minmax", "rrf", "zscore-nofill", "bm25-only", "filtered"])
@pytest.mark.parametrize("principal", [ALICE, BOB, EVE], ids=["alice", "bob", "eve"])
def test_remote_retriever_equals_local(
    served: Served, embedder: Embedder, remote: RemoteRetriever, params: SearchParams, principal: Principal
) -> None:
    local = HybridRetriever(served.index, embedder)
    query = "how many weeks of parental leave"
    want = local.search(query, principal, params)
    got = remote.search(query, principal, params)
    assert [h.model_dump() for h in got.hits] == [h.model_dump() for h in want.hits]
    assert got.candidates == want.candidates
    assert set(got.timings_ms) == set(want.timings_ms)
    assert got.hits, "the query matches readable documents for everyone"


def test_vectors_travel_when_asked(served: Served, embedder: Embedder, remote: RemoteRetriever) -> None:
    params = replace(SearchParams.from_settings(FusionSettings(), top_k=2), vectors=True)
    want = HybridRetriever(served.index, embedder).search("vpn token", ALICE, params)
    got = remote.search("vpn token", ALICE, params)
    assert [h.vector for h in got.hits] == [h.vector for h in want.hits]
    assert got.hits[0].vector is not None and len(got.hits[0].vector) == embedder.dim


def test_copy_cosines_rpc_equals_local_and_checks_its_input(served: Served) -> None:
    index = RemoteIndex.connect(served.address, RemoteSettings())
    every = {cid for p in (ALICE, BOB, EVE) for cid, _ in index.bm25("salary laptop leave vpn weeks", p, 10)}
    cid_of = {c.doc_id: cid for cid, c in served.index.chunks(sorted(every)).items()}  # every tenant's
    cids = [cid_of[d] for d in ("leave", "vpn", "salary", "laptop", "globex-leave")]
    for principal in (ALICE, BOB, EVE):
        for limit in (1, 2, 64):
            for expand in (0.0, 0.1):
                got = index.copy_cosines(cids, principal, limit, expand=expand)
                mine = readable_ids(served.index, cids, principal)  # the others are not looked up
                assert got == served.index.copy_cosines(mine, principal, limit, expand=expand)
                assert cid_of[NO_CLAIM] not in got and set(got) == set(mine) - {cid_of[NO_CLAIM]}
                assert all(
                    len(c.cosines) <= limit and c.cosines == sorted(c.cosines, reverse=True)
                    for c in got.values()
                )
                assert all(
                    len(c.neighbors) == sum(x >= expand for x in c.cosines) if expand else not c.neighbors
                    for c in got.values()
                )
    # alice reads leave, vpn (no claim vector) and laptop: one other document for leave
    leave, laptop = cid_of["leave"], cid_of["laptop"]
    alice = index.copy_cosines([leave], ALICE, 8)[leave].cosines
    claim_cosine = index.cosine(index.stored_vectors([laptop], ALICE)[laptop], [leave], ALICE)[
        leave
    ]  # claim = stored here
    assert len(alice) == 1 and alice[0] == pytest.approx(claim_cosine, abs=1e-5)
    assert len(index.copy_cosines([cid_of["leave"]], BOB, 8)[cid_of["leave"]].cosines) == 1  # salary
    assert index.copy_cosines([cid_of["globex-leave"]], EVE, 8) == {
        cid_of["globex-leave"]: Copies([])
    }  # set, empty
    assert index.copy_cosines([], ALICE, 8) == {}
    for limit in (0, 65, -1):
        with pytest.raises(RampartError) as err:
            index.copy_cosines(cids, ALICE, limit)
        assert err.value.code is ErrorCode.INVALID_ARGUMENT and err.value.details["value"] == limit
    with pytest.raises(RampartError) as bad_expand:
        index.copy_cosines(cids, ALICE, 8, expand=1.5)
    assert bad_expand.value.code is ErrorCode.INVALID_ARGUMENT and "expand = 1.5" in str(bad_expand.value)
    channel = open_channel(served.address)
    with pytest.raises(grpc.RpcError) as no_principal:
        index_pb2_grpc.IndexServiceStub(channel).CopyCosines(
            index_pb2.CopyCosinesRequest(cids=cids, limit=3), timeout=5
        )
    assert no_principal.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "principal is required" in no_principal.value.details()
    channel.close()
    index.close()


def test_copy_cosines_travel_when_asked(served: Served, embedder: Embedder, remote: RemoteRetriever) -> None:
    params = replace(SearchParams.from_settings(FusionSettings(), top_k=4, candidates=10), copy_depth=2)
    want = HybridRetriever(served.index, embedder).search("parental leave weeks laptop", ALICE, params)
    got = remote.search("parental leave weeks laptop", ALICE, params)
    assert [h.copy_cosines for h in got.hits] == [h.copy_cosines for h in want.hits]
    assert len(got.hits) == 3 and all(h.copy_cosines is None for h in got.hits[2:])
    assert any(h.copy_cosines for h in got.hits[:2])
    assert all(h.copy_neighbors is None for h in got.hits)  # not asked for
    # every hit's write order, and its copies', travel too (the planted-copies rule's arrival test)
    assert [(h.arrival, h.copy_arrivals) for h in got.hits] == [
        (h.arrival, h.copy_arrivals) for h in want.hits
    ]
    assert all(h.arrival is not None for h in got.hits)
    assert all(len(h.copy_arrivals or []) == len(h.copy_cosines) for h in got.hits[:2] if h.copy_cosines)
    wide = replace(params, copy_expand=0.05)
    want = HybridRetriever(served.index, embedder).search("parental leave weeks laptop", ALICE, wide)
    got = remote.search("parental leave weeks laptop", ALICE, wide)
    assert [h.copy_neighbors for h in got.hits] == [h.copy_neighbors for h in want.hits]
    assert any(h.copy_neighbors for h in got.hits[:2])
    plain = remote.search("parental leave weeks laptop", ALICE, replace(params, copy_depth=0))
    assert all(h.copy_cosines is None and h.arrival is None for h in plain.hits)


def test_remote_errors_are_the_local_ones(
    served: Served, embedder: Embedder, remote: RemoteRetriever
) -> None:
    params = SearchParams.from_settings(FusionSettings(), top_k=3, weights={"bm25": 1.0, "colbert": 1.0})
    for query in ["   ", "leave"]:
        with pytest.raises(RampartError) as local_err:
            HybridRetriever(served.index, embedder).search(query, ALICE, params)
        with pytest.raises(RampartError) as remote_err:
            remote.search(query, ALICE, params)
        assert remote_err.value.to_dict() == local_err.value.to_dict()
        assert remote_err.value.code is ErrorCode.INVALID_ARGUMENT


def test_bad_input_is_invalid_argument_naming_the_value(served: Served) -> None:
    channel = open_channel(served.address)
    stub = retrieval_pb2_grpc.RetrievalServiceStub(channel)
    request = wire.search_request_to_pb("leave", ALICE, SearchParams.from_settings(FusionSettings(), top_k=3))
    request.top_k = -4
    with pytest.raises(grpc.RpcError) as err:
        stub.Search(request, timeout=5)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "top_k = -4" in err.value.details()
    status = rpc_status.from_call(err.value)
    info = error_details_pb2.ErrorInfo()
    assert status is not None and status.details[0].Unpack(info)
    assert (info.reason, info.domain, info.metadata["field"], info.metadata["value"]) == (
        "invalid_argument",
        "rampart",
        '"top_k"',
        "-4",
    )
    index = RemoteIndex.connect(served.address, RemoteSettings())
    with pytest.raises(RampartError) as dim_err:
        index.dense(np.ones(7, dtype=np.float32), ALICE, 3)
    assert dim_err.value.code is ErrorCode.INVALID_ARGUMENT and dim_err.value.details["value"] == 7
    with pytest.raises(grpc.RpcError) as no_principal:
        index_pb2_grpc.IndexServiceStub(channel).Bm25(index_pb2.Bm25Request(query="x", limit=3), timeout=5)
    assert no_principal.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "principal is required" in no_principal.value.details()
    index.close()
    channel.close()


def test_health_and_reflection(served: Served) -> None:
    channel = open_channel(served.address)
    health = health_pb2_grpc.HealthStub(channel)
    for name in ["", "rampart.retrieval.v1.RetrievalService", "rampart.retrieval.v1.IndexService"]:
        reply = health.Check(health_pb2.HealthCheckRequest(service=name), timeout=5)
        assert reply.status == health_pb2.HealthCheckResponse.SERVING
    with pytest.raises(grpc.RpcError) as err:
        health.Check(health_pb2.HealthCheckRequest(service="rampart.nope.v1.Nope"), timeout=5)
    assert err.value.code() == grpc.StatusCode.NOT_FOUND
    watch = health.Watch(health_pb2.HealthCheckRequest(service=""), timeout=5)  # a streaming RPC
    assert next(watch).status == health_pb2.HealthCheckResponse.SERVING
    watch.cancel()
    stub = reflection_pb2_grpc.ServerReflectionStub(channel)
    replies = stub.ServerReflectionInfo(
        iter([reflection_pb2.ServerReflectionRequest(list_services="")]), timeout=5
    )
    names = {s.name for r in replies for s in r.list_services_response.service}
    assert {
        "rampart.retrieval.v1.RetrievalService",
        "rampart.retrieval.v1.IndexService",
        "grpc.health.v1.Health",
    } <= names
    assert RemoteRetriever.connect(served.address, RemoteSettings()).check_ready()
    channel.close()


def test_deadlines(served: Served) -> None:
    params = SearchParams.from_settings(FusionSettings(), top_k=3)
    tight = RemoteRetriever(open_channel(served.address), served.address, deadline_ms=1)
    with pytest.raises(RampartError) as err:
        tight.search("parental leave weeks", ALICE, params)
    assert err.value.code is ErrorCode.DEADLINE_EXCEEDED
    tight.close()
    # A caller's own (propagated) deadline caps every outgoing call.
    roomy = RemoteRetriever.connect(served.address, RemoteSettings(deadline_ms=60_000))
    token = set_deadline(-0.001)
    try:
        with pytest.raises(RampartError, match="no time left") as err:
            roomy.search("leave", ALICE, params)
        assert err.value.code is ErrorCode.DEADLINE_EXCEEDED
        set_deadline(0.25)
        assert Caller(roomy._channel, served.address, deadline_ms=60_000).timeout_s() <= 0.25
    finally:
        set_deadline(None)
        del token
    assert remaining_s() is None
    assert roomy.search("leave", ALICE, params).hits
    roomy.close()


def test_unreachable_service_is_unavailable_after_retries() -> None:
    address = f"127.0.0.1:{free_port()}"
    r = RemoteRetriever.connect(address, RemoteSettings(deadline_ms=6000, retry_window_ms=1000))
    assert r.check_ready(timeout_s=0.2) is False
    t0 = time.monotonic()
    with pytest.raises(RampartError) as err:
        r.stats()
    assert err.value.code is ErrorCode.UNAVAILABLE and address in err.value.message
    # retried for the window (1 s), then gave up well before the deadline (6 s)
    assert 1.0 <= time.monotonic() - t0 < 4.0
    r.close()


def test_sigterm_lets_in_flight_rpc_finish() -> None:
    """A real SIGTERM to this process (the server's loop runs on the main thread, as in production)."""
    started = threading.Event()
    results: list[object] = []

    async def slow(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        started.set()
        await asyncio.sleep(0.6)
        return b"done:" + request

    handler = grpc.method_handlers_generic_handler(
        "rampart.test.Slow", {"Call": grpc.unary_unary_rpc_method_handler(slow)}
    )

    async def main() -> None:
        port = free_port()
        server = GrpcServer(GrpcServerSettings(port=port, grace_s=5.0), name="test")
        server.add(lambda h, s: s.add_generic_rpc_handlers((h,)), handler, "rampart.test.Slow")
        await server.start()
        await server.set_serving()

        def client() -> None:
            channel = open_channel(f"127.0.0.1:{port}")
            call = channel.unary_unary("/rampart.test.Slow/Call")
            try:
                results.append(call(b"x", timeout=10))
            except grpc.RpcError as exc:
                results.append(exc.code())
            try:
                call(b"y", timeout=2)  # after the stop: refused
                results.append("served")
            except grpc.RpcError as exc:
                results.append(exc.code())
            channel.close()

        thread = threading.Thread(target=client)
        thread.start()
        serving = asyncio.create_task(server.serve_until_signal())
        await asyncio.get_running_loop().run_in_executor(None, started.wait, 10)
        os.kill(os.getpid(), signal.SIGTERM)
        await asyncio.wait_for(serving, 10)
        await asyncio.get_running_loop().run_in_executor(None, thread.join, 10)

    asyncio.run(main())
    assert results[0] == b"done:x"
    assert results[1] == grpc.StatusCode.UNAVAILABLE


def test_python_m_server_serves_and_stops_cleanly(
    tmp_path: Path, models_dir: Path, embedder: Embedder
) -> None:
    data = tmp_path / "data"
    proc = RetrievalServiceProcess(data, models_dir).start()
    try:
        index = RemoteIndex.connect(proc.address, RemoteSettings())
        assert index.dim == embedder.dim and index.check_ready()
        index.write(writes(embedder, index)[:2])
        index.close()
        assert proc.proc is not None
        popen = proc.proc
        popen.send_signal(signal.SIGTERM)
        assert popen.wait(20) == 0, proc.log()
    finally:
        proc.stop()
    again = RetrievalServiceProcess(data, models_dir).start()  # the index lock was released
    try:
        r = RemoteRetriever.connect(again.address, RemoteSettings())
        hits = r.search("hardware token", ALICE, SearchParams.from_settings(FusionSettings(), top_k=1)).hits
        assert [h.chunk.doc_id for h in hits] == ["vpn"]
        r.close()
    finally:
        again.stop()


@pytest.fixture(scope="module")
def toy() -> Iterator[str]:
    """A GrpcServer with generic handlers that fail, sleep, or report their deadline."""

    async def boom(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        raise ValueError("secret internals /etc/passwd")

    async def rampart(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        raise RampartError(ErrorCode.NOT_FOUND, "document x not found", doc_id="x", n=3, tags=["a", "b"])

    async def deadline(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        return repr(remaining_s()).encode()

    async def slow(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        await asyncio.sleep(0.5)
        return b"ok"

    handler = grpc.method_handlers_generic_handler(
        "rampart.test.Toy",
        {
            name: grpc.unary_unary_rpc_method_handler(fn)
            for name, fn in {"Boom": boom, "Rampart": rampart, "Deadline": deadline, "Slow": slow}.items()
        },
    )
    loop = BackgroundLoop()
    port = free_port()
    server = GrpcServer(GrpcServerSettings(port=port, max_concurrent_rpcs=1), name="toy")
    server.add(lambda h, s: s.add_generic_rpc_handlers((h,)), handler, "rampart.test.Toy")
    loop.run(server.start())
    yield f"127.0.0.1:{port}"
    loop.run(server.stop(0.5))
    loop.close()


def test_errors_cross_the_wire_exactly_and_internals_do_not(toy: str) -> None:
    channel = open_channel(toy)
    caller = Caller(channel, toy, deadline_ms=5000)
    with pytest.raises(RampartError) as err:
        caller.call(channel.unary_unary("/rampart.test.Toy/Rampart"), b"", idempotent=True)
    assert err.value.to_dict() == {
        "code": "not_found",
        "message": "document x not found",
        "details": {"doc_id": "x", "n": 3, "tags": ["a", "b"]},
    }
    with pytest.raises(RampartError) as err:
        caller.call(channel.unary_unary("/rampart.test.Toy/Boom"), b"", idempotent=True)
    assert err.value.code is ErrorCode.INTERNAL
    assert "secret" not in err.value.message and "ValueError" not in err.value.message
    channel.close()


def test_handler_sees_the_callers_deadline(toy: str) -> None:
    channel = open_channel(toy)
    call = channel.unary_unary("/rampart.test.Toy/Deadline")
    left = float(call(b"", timeout=2.0))
    assert 1.0 < left <= 2.05  # gRPC rounds deadlines on the wire
    assert call(b"") == b"None"  # no deadline sent: none propagated
    channel.close()


def test_over_max_concurrent_rpcs_is_rate_limited(toy: str) -> None:
    channel = open_channel(toy)
    slow = channel.unary_unary("/rampart.test.Toy/Slow")
    first = slow.future(b"", timeout=5)
    time.sleep(0.1)
    with pytest.raises(RampartError) as err:
        Caller(channel, toy, deadline_ms=5000).call(slow, b"", idempotent=True)
    assert err.value.code is ErrorCode.RATE_LIMITED
    assert first.result() == b"ok"
    channel.close()


def test_the_graph_model_is_loaded_before_the_service_serves(tmp_path: Path, embedder: Embedder) -> None:
    """The stack's API conformance run (tests/e2e/test_stack_conformance.py) found the first adaptive
    search of a fresh stack answered 504: the retrieval service loaded spaCy for the query's entities
    inside the 5 s RPC deadline (12 s on a loaded 2-core machine). It loads it before serving now."""
    from services.retrieval.graph import entities
    from services.retrieval.graph.config import GraphSettings

    async def serve_once(graph: GraphSettings, root: Path) -> int:
        """How many models were loaded by the time the app was built (then it starts and stops)."""
        entities._pipeline.cache_clear()
        app = RetrievalApp(
            RetrievalServiceSettings(port=free_port()),
            EmbeddedIndex.open(root, dim=embedder.dim),
            embedder,
            graph,
        )
        loaded = entities._pipeline.cache_info().currsize
        await app.start()
        await app.stop(0)
        return loaded

    assert asyncio.run(serve_once(GraphSettings(), tmp_path / "spacy")) == 1
    assert asyncio.run(serve_once(GraphSettings(extractor="none"), tmp_path / "none")) == 0
