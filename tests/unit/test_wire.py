"""Domain types survive the trip through their protobuf messages (bytes included), and bad values
arriving over the wire are INVALID_ARGUMENT naming the value."""

from __future__ import annotations

import base64
from dataclasses import replace

import numpy as np
import pytest
from rampart.common.v1 import types_pb2 as pb
from rampart.retrieval.v1 import index_pb2, retrieval_pb2

from services.common import wire
from services.common.errors import ErrorCode, RampartError
from services.common.types import (
    Acl,
    Chunk,
    CopyEdit,
    Document,
    DocumentState,
    DocumentStatus,
    FusionMethod,
    Principal,
    ScoredChunk,
    SearchFilters,
)
from services.common.verdicts import Judgement, Verdict
from services.retrieval.capabilities import Copies
from services.retrieval.config import FusionSettings
from services.retrieval.doc_store import ChunkWrite, DocumentWrite
from services.retrieval.fusion import Bounds
from services.retrieval.graph.stream import GraphResult, GraphStatus
from services.retrieval.hybrid import SearchOutcome, SearchParams
from services.retrieval.links.options import NO_LINKS, LinkOptions

CHUNK = Chunk(
    chunk_id="d1#0",
    doc_id="d1",
    tenant="acme",
    ordinal=3,
    title="Leave",
    section_path=["HR", "Leave"],
    header="leave weeks",
    text="Parental leave is sixteen weeks.",
    source="wiki/leave",
    version=7,
    trust="untrusted",
)


def bytes_trip(message: object) -> object:
    """Serialise and parse again, as the network does."""
    data = message.SerializeToString()  # type: ignore[attr-defined]
    fresh = type(message)()
    fresh.ParseFromString(data)  # type: ignore[attr-defined]
    return fresh


def test_principal_acl_chunk_round_trip() -> None:
    p = Principal(tenant="acme", user="alice", groups=["eng", "hr"], scopes=["search", "ingest"])
    assert wire.principal_from_pb(bytes_trip(wire.principal_to_pb(p))) == p  # type: ignore[arg-type]
    a = Acl(users=["bob"], groups=["*"])
    assert wire.acl_from_pb(bytes_trip(wire.acl_to_pb(a))) == a  # type: ignore[arg-type]
    assert wire.chunk_from_pb(bytes_trip(wire.chunk_to_pb(CHUNK))) == CHUNK  # type: ignore[arg-type]


def test_document_text_and_binary_round_trip() -> None:
    meta = {"dept": "hr", "year": 2024, "score": 0.5, "public": True}
    text_doc = Document(id="d1", version=3, tenant="acme", acl=Acl(groups=["*"]), text="hello", metadata=meta)
    back = wire.document_from_pb(bytes_trip(wire.document_to_pb(text_doc)))  # type: ignore[arg-type]
    assert back == text_doc
    assert type(back.metadata["year"]) is int and type(back.metadata["public"]) is bool
    raw = b"%PDF-1.4 \x00\xff binary"
    file_doc = Document(
        id="d2",
        tenant="acme",
        acl=Acl(users=["alice"]),
        content_base64=base64.b64encode(raw).decode(),
        content_type="application/pdf",
        source="x.pdf",
    )
    m = wire.document_to_pb(file_doc)
    assert m.content == raw  # raw bytes on the wire, not base64 text
    assert wire.document_from_pb(bytes_trip(m)) == file_doc  # type: ignore[arg-type]


def test_status_and_state_round_trip() -> None:
    for state in DocumentState:
        s = DocumentStatus(id="d", tenant="t", version=2, state=state, chunks=4, updated_at=1700000000.25)
        assert wire.status_from_pb(bytes_trip(wire.status_to_pb(s))) == s  # type: ignore[arg-type]
    failed = DocumentStatus(
        id="d", tenant="t", version=1, state=DocumentState.FAILED, error="parse failed", updated_at=1.0
    )
    assert wire.status_from_pb(bytes_trip(wire.status_to_pb(failed))) == failed  # type: ignore[arg-type]


def test_vectors_are_packed_float32_exactly() -> None:
    v = np.array([0.1, -2.5, 3.25e-8, 1e30], dtype=np.float32)
    data = wire.vector_to_bytes(v)
    assert len(data) == 16
    back = wire.vector_from_bytes(data, dim=4)
    assert back.dtype == np.float32 and np.array_equal(back, v)
    back[0] = 9.0  # writable (callers may normalise in place)
    with pytest.raises(RampartError) as err:
        wire.vector_from_bytes(data, dim=8)
    assert err.value.code is ErrorCode.INVALID_ARGUMENT and err.value.details["value"] == 4
    with pytest.raises(RampartError, match="multiple of 4"):
        wire.vector_from_bytes(b"\x00\x01\x02")


def test_document_write_round_trip() -> None:
    vec = (np.arange(4) / 10).astype(np.float32)
    d = DocumentWrite(
        tenant="acme",
        doc_id="d1",
        version=2,
        content_hash="abc",
        title="T",
        source="s",
        acl=Acl(groups=["eng"]),
        metadata={"dept": "hr", "n": 3},
        chunks=[ChunkWrite(CHUNK, 6, vec)],
    )
    back = wire.document_write_from_pb(bytes_trip(wire.document_write_to_pb(d)), dim=4)  # type: ignore[arg-type]
    assert (back.tenant, back.doc_id, back.version, back.content_hash, back.acl, back.metadata) == (
        "acme",
        "d1",
        2,
        "abc",
        Acl(groups=["eng"]),
        {"dept": "hr", "n": 3},
    )
    assert back.chunks[0].chunk == CHUNK and back.chunks[0].token_len == 6
    assert np.array_equal(back.chunks[0].vector, vec)
    assert back.chunks[0].claim_vector is None  # unset stays "not computed"


def test_chunk_write_entities_round_trip_and_bounds() -> None:
    vec = (np.arange(4) / 10).astype(np.float32)
    m = wire.chunk_write_to_pb(ChunkWrite(CHUNK, 6, vec, entities=("adrian powers", "melbourne")))
    assert wire.chunk_write_from_pb(bytes_trip(m), dim=4).entities == ("adrian powers", "melbourne")  # type: ignore[arg-type]
    too_many = wire.chunk_write_to_pb(ChunkWrite(CHUNK, 6, vec, entities=tuple(f"e{i}" for i in range(1025))))
    with pytest.raises(RampartError, match="at most 1024"):
        wire.chunk_write_from_pb(too_many, dim=4)
    too_long = wire.chunk_write_to_pb(ChunkWrite(CHUNK, 6, vec, entities=("x" * 121,)))
    with pytest.raises(RampartError, match="121 characters"):
        wire.chunk_write_from_pb(too_long, dim=4)


def test_chunk_write_claim_vector_round_trip_and_dim_check() -> None:
    vec = (np.arange(4) / 10).astype(np.float32)
    claim = np.array([0.5, -0.25, 0.0, 1e-7], dtype=np.float32)
    m = wire.chunk_write_to_pb(ChunkWrite(CHUNK, 6, vec, claim_vector=claim))
    assert m.HasField("claim_vector") and len(m.claim_vector) == 16  # packed float32
    back = wire.chunk_write_from_pb(bytes_trip(m), dim=4)  # type: ignore[arg-type]
    assert back.claim_vector is not None and back.claim_vector.dtype == np.float32
    assert np.array_equal(back.claim_vector, claim) and np.array_equal(back.vector, vec)
    bare = wire.chunk_write_to_pb(ChunkWrite(CHUNK, 6, vec))
    assert not bare.HasField("claim_vector")
    assert wire.chunk_write_from_pb(bytes_trip(bare), dim=4).claim_vector is None  # type: ignore[arg-type]
    d = DocumentWrite(
        tenant="acme",
        doc_id="d1",
        version=1,
        content_hash="h",
        title="",
        source="",
        acl=Acl(groups=["*"]),
        metadata={},
        chunks=[ChunkWrite(CHUNK, 6, vec), ChunkWrite(CHUNK, 6, vec, claim_vector=claim[:3])],
    )
    with pytest.raises(RampartError) as err:
        wire.document_write_from_pb(wire.document_write_to_pb(d), dim=4)
    assert err.value.code is ErrorCode.INVALID_ARGUMENT
    assert err.value.details["field"] == "d1.chunks[1].claim_vector" and err.value.details["value"] == 3


def test_scored_chunk_keeps_missing_scores_judgement_and_vector() -> None:
    s = ScoredChunk(
        chunk=CHUNK,
        scores={"bm25": 3.5, "dense": None},
        ranks={"bm25": 1, "dense": None},
        fused=0.75,
        judgement=Judgement(
            chunk_id="d1#0",
            doc_id="d1",
            verdict=Verdict.ADVERSARIAL,
            score=0.9,
            reason="x",
            signals={"a": 1.0},
        ),
        vector=[0.5, 0.25],
    )
    back = wire.scored_chunk_from_pb(bytes_trip(wire.scored_chunk_to_pb(s)))  # type: ignore[arg-type]
    assert back == s and back.vector == [0.5, 0.25]
    bare = ScoredChunk(chunk=CHUNK, scores={"dense": 0.3}, fused=0.3)
    back = wire.scored_chunk_from_pb(bytes_trip(wire.scored_chunk_to_pb(bare)))  # type: ignore[arg-type]
    assert back == bare and back.judgement is None and back.vector is None and back.copy_cosines is None


@pytest.mark.parametrize("cosines", [None, [], [0.9731, 0.5, -0.125]], ids=["unset", "empty", "values"])
def test_scored_chunk_copy_cosines_none_empty_and_values_differ(cosines: list[float] | None) -> None:
    s = ScoredChunk(chunk=CHUNK, scores={"dense": 0.3}, fused=0.3, copy_cosines=cosines)
    m = wire.scored_chunk_to_pb(s)
    assert m.HasField("copy_cosines") is (cosines is not None)
    back = wire.scored_chunk_from_pb(bytes_trip(m))  # type: ignore[arg-type]
    assert back.copy_cosines == cosines  # exactly: cosines travel as doubles
    assert back == s


def test_scored_chunk_copy_neighbors_round_trip() -> None:
    s = ScoredChunk(
        chunk=CHUNK,
        scores={"dense": 0.3},
        fused=0.3,
        copy_cosines=[0.9, 0.2],
        copy_neighbors=[[0.9, 0.85, 0.1]],
        arrival=2**40,
        copy_arrivals=[3, 2**41],
        copy_overlaps=[0.875],
        copy_edits=[
            CopyEdit(
                doc_id="d1",
                replaced=[("tampa florida", "glendale arizona")],
                heading=False,
                one_sided=["tampa"],
            )
        ],
    )
    back = wire.scored_chunk_from_pb(bytes_trip(wire.scored_chunk_to_pb(s)))  # type: ignore[arg-type]
    assert back.copy_neighbors == [[0.9, 0.85, 0.1]] and back == s and back.copy_overlaps == [0.875]
    assert back.copy_edits == s.copy_edits  # the altered-copies rule reads them behind the gRPC hop
    assert (back.arrival, back.copy_arrivals) == (2**40, [3, 2**41])
    plain = wire.scored_chunk_from_pb(
        bytes_trip(wire.scored_chunk_to_pb(ScoredChunk(chunk=CHUNK, scores={}, fused=0.1)))
    )  # type: ignore[arg-type]
    assert (plain.arrival, plain.copy_arrivals) == (None, None)  # arrival 0 is a place, unset is unknown


def test_copy_cosines_map_round_trip() -> None:
    cosines = {
        7: Copies([0.91, 0.4], [[0.91, 0.8]], [31, 2], [31, 2]),
        12: Copies([]),
        2**40: Copies([1.0]),
    }
    m = index_pb2.CopyCosinesResponse(cosines=wire.copy_cosines_to_pb(cosines))
    assert wire.copy_cosines_from_pb(bytes_trip(m).cosines) == cosines  # type: ignore[attr-defined]


def test_search_request_round_trip_every_param() -> None:
    params = SearchParams.from_settings(
        FusionSettings(),
        top_k=7,
        method=FusionMethod.RRF,
        weights={"bm25": 0.3, "dense": 0.0},
        rrf_k=20,
        candidates=50,
        fill_missing=False,
        bounds={"dense": Bounds(low=0.0, high=None)},
        filters=SearchFilters(doc_ids=["a"], sources=["wiki"], metadata={"dept": "hr", "n": 2}),
    )
    params = SearchParams(
        **{
            **params.__dict__,
            "vectors": True,
            "copy_depth": 5,
            "copy_expand": 0.7,
            "copy_overlap": 0.8,
            "links": LinkOptions(seeds=3, head=30, backlinks=2, copy_leads=0.8),
            "graph_depth": 2,
        }
    )
    p = Principal(tenant="acme", user="alice", groups=["eng"])
    query, principal, back = wire.search_request_from_pb(
        bytes_trip(wire.search_request_to_pb("leave policy", p, params))  # type: ignore[arg-type]
    )
    assert (query, principal, back) == ("leave policy", p, params)
    no_filters = SearchParams.from_settings(FusionSettings(), top_k=3)
    _, _, back = wire.search_request_from_pb(wire.search_request_to_pb("q", p, no_filters))
    assert back == no_filters and back.filters is None and back.copy_depth == 0 and back.links.head == 0
    generic = replace(no_filters, links=NO_LINKS)
    m = wire.search_request_to_pb("q", p, generic)
    assert not m.HasField("links")  # a generic tenant's search carries nothing of the extension
    assert wire.search_request_from_pb(m)[2] == generic


def test_outcome_round_trip() -> None:
    led = ScoredChunk(
        chunk=CHUNK.model_copy(update={"chunk_id": "d1#1"}),
        scores={},
        fused=0.5,
        copy_cosines=[0.9, 0.85, 0.2],
        copy_leads=["2011 Colorado Buffaloes", ""],
    )
    o = SearchOutcome(
        hits=[ScoredChunk(chunk=CHUNK, scores={"bm25": 1.0}, ranks={"bm25": 1}, fused=1.0), led],
        timings_ms={"bm25": 1.5},
        candidates={"bm25": 1, "dense": 0},
        degraded=["rerank"],
        fallback=True,
        graph=GraphResult([], GraphStatus.USED, linked=["forbidden ground"]),
    )
    m = wire.outcome_to_pb(o)
    assert set(m.copy_leads) == {"d1#1"}  # the extension's map, keyed by chunk id
    assert wire.outcome_from_pb(bytes_trip(m)) == o  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("mutate", "field", "needle"),
    [
        (lambda m: setattr(m, "top_k", 0), "top_k", "top_k = 0"),
        (lambda m: setattr(m, "copy_depth", -1), "copy_depth", "copy_depth = -1"),
        (lambda m: setattr(m, "copy_depth", 1001), "copy_depth", "copy_depth = 1001"),
        (lambda m: setattr(m, "copy_expand", 1.2), "copy_expand", "copy_expand = 1.2"),
        (lambda m: setattr(m, "copy_overlap", -0.1), "copy_overlap", "copy_overlap = -0.1"),
        (lambda m: setattr(m, "graph_depth", 4), "graph_depth", "graph_depth = 4"),
        (lambda m: setattr(m.links, "copy_leads", -0.5), "copy_leads", "copy_leads = -0.5"),
        (lambda m: setattr(m.links, "seeds", -1), "link_seeds", "link_seeds = -1"),
        (lambda m: setattr(m.links, "seeds", 21), "link_seeds", "link_seeds = 21"),
        (lambda m: setattr(m.links, "head", -2), "link_head", "link_head = -2"),
        (lambda m: setattr(m.links, "backlinks", 11), "backlinks", "backlinks = 11"),
        (lambda m: setattr(m, "method", retrieval_pb2.FUSION_METHOD_UNSPECIFIED), "method", "method = 0"),
        (lambda m: m.weights.__setitem__("dense", -1.0), "weights.dense", "-1.0"),
        (lambda m: setattr(m.principal, "tenant", "bad tenant!"), "principal.tenant", "bad tenant!"),
        (lambda m: m.filters.doc_ids.append("bad id with spaces"), "filters.doc_ids.0", "bad id with spaces"),
    ],
)
def test_bad_values_name_themselves(mutate: object, field: str, needle: str) -> None:
    p = Principal(tenant="acme", user="alice")
    m = wire.search_request_to_pb("q", p, SearchParams.from_settings(FusionSettings(), top_k=3))
    mutate(m)  # type: ignore[operator]
    with pytest.raises(RampartError) as err:
        wire.search_request_from_pb(m)
    assert err.value.code is ErrorCode.INVALID_ARGUMENT
    assert err.value.details["field"] == field
    assert needle in err.value.message


def test_unset_enums_and_metadata_are_refused() -> None:
    with pytest.raises(RampartError, match="state = 0"):
        wire.state_from_pb(pb.DOCUMENT_STATE_UNSPECIFIED)
    with pytest.raises(RampartError, match="has no value"):
        wire.metadata_from_pb({"k": pb.MetadataValue()})
    with pytest.raises(RampartError, match="acl"):
        wire.acl_from_pb(pb.Acl())  # empty ACL: nobody could read it
    assert index_pb2.Bm25Request().HasField("restrict") is False
