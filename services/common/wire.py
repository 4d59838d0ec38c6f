"""Domain types <-> protobuf messages (``rampart.*.v1``): the only place that knows both shapes.

Every ``*_from_pb`` validates like the HTTP API does (the pydantic models), so a bad value sent over
gRPC is an ``INVALID_ARGUMENT`` naming the field and the value, never a crash further in. Vectors travel
as packed little-endian float32 bytes (4 bytes a value, no per-float framing).
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt
from pydantic import BaseModel, ValidationError
from rampart.common.v1 import types_pb2 as pb
from rampart.retrieval.v1 import index_pb2, retrieval_pb2

from services.common.errors import invalid
from services.common.query_text import check_query
from services.common.types import (
    Acl,
    Chunk,
    CopyEdit,
    Document,
    DocumentState,
    DocumentStatus,
    FusionMethod,
    MetadataValue,
    Principal,
    ScoredChunk,
    SearchFilters,
)
from services.common.verdicts import Judgement, Verdict
from services.retrieval.capabilities import Copies
from services.retrieval.doc_store import ChunkWrite, DocumentWrite
from services.retrieval.fusion import Bounds, weights_problem
from services.retrieval.graph.config import MAX_GRAPH_DEPTH
from services.retrieval.graph.entities import MAX_KEY_CHARS
from services.retrieval.graph.stream import GraphResult, GraphStatus
from services.retrieval.hybrid import SearchOutcome, SearchParams
from services.retrieval.links import wire as link_wire

M = TypeVar("M", bound=BaseModel)

_FLOAT32 = np.dtype("<f4")
_STATES = {
    DocumentState.PENDING: pb.DOCUMENT_STATE_PENDING,
    DocumentState.INDEXED: pb.DOCUMENT_STATE_INDEXED,
    DocumentState.FAILED: pb.DOCUMENT_STATE_FAILED,
    DocumentState.DELETED: pb.DOCUMENT_STATE_DELETED,
}
_VERDICTS = {
    Verdict.RELEVANT: pb.VERDICT_RELEVANT,
    Verdict.IRRELEVANT: pb.VERDICT_IRRELEVANT,
    Verdict.ADVERSARIAL: pb.VERDICT_ADVERSARIAL,
    Verdict.COUNTERFACTUAL: pb.VERDICT_COUNTERFACTUAL,
}
_METHODS = {
    FusionMethod.MINMAX: retrieval_pb2.FUSION_METHOD_MINMAX,
    FusionMethod.ZSCORE: retrieval_pb2.FUSION_METHOD_ZSCORE,
    FusionMethod.RRF: retrieval_pb2.FUSION_METHOD_RRF,
}


def _validated(model: type[M], what: str, data: dict[str, Any]) -> M:
    """``model(**data)``; a validation failure becomes INVALID_ARGUMENT naming field and value."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(p) for p in first["loc"]) or what
        value = first.get("input")
        raise invalid(
            f"{what}.{field} = {value!r} is invalid: {first['msg']}",
            field=f"{what}.{field}",
            value=repr(value)[:200],
        ) from None


def _reverse(table: Mapping[Any, int], value: int, what: str) -> Any:
    for key, number in table.items():
        if number == value:
            return key
    raise invalid(
        f"{what} = {value} is not set or unknown; send one of {sorted(str(k) for k in table)}",
        field=what,
        value=value,
    )


# ---- vectors ---------------------------------------------------------------------------------------
def vector_to_bytes(vector: npt.ArrayLike) -> bytes:
    """Packed little-endian float32."""
    return np.ascontiguousarray(vector, dtype=_FLOAT32).tobytes()


def vector_from_bytes(
    data: bytes, *, dim: int | None = None, what: str = "vector"
) -> npt.NDArray[np.float32]:
    """A float32 array (native order, writable) from packed bytes; checks length against ``dim``."""
    if len(data) % 4:
        raise invalid(f"{what} has {len(data)} bytes, not a multiple of 4 (packed float32)", field=what)
    array = np.frombuffer(data, dtype=_FLOAT32).astype(np.float32)
    if dim is not None and array.shape[0] != dim:
        raise invalid(
            f"{what} has {array.shape[0]} values but the index stores {dim}-dimensional vectors; "
            "embed with the index's model",
            field=what,
            value=int(array.shape[0]),
            dim=dim,
        )
    return array


# ---- identity and access ---------------------------------------------------------------------------
def principal_to_pb(p: Principal) -> pb.Principal:
    return pb.Principal(tenant=p.tenant, user=p.user, groups=p.groups, scopes=p.scopes)


def principal_from_pb(m: pb.Principal) -> Principal:
    return _validated(
        Principal,
        "principal",
        {"tenant": m.tenant, "user": m.user, "groups": list(m.groups), "scopes": list(m.scopes)},
    )


def acl_to_pb(a: Acl) -> pb.Acl:
    return pb.Acl(users=a.users, groups=a.groups)


def acl_from_pb(m: pb.Acl) -> Acl:
    return _validated(Acl, "acl", {"users": list(m.users), "groups": list(m.groups)})


def metadata_to_pb(values: Mapping[str, object]) -> dict[str, pb.MetadataValue]:
    out: dict[str, pb.MetadataValue] = {}
    for key, v in values.items():
        if isinstance(v, bool):
            out[key] = pb.MetadataValue(bool_value=v)
        elif isinstance(v, int):
            out[key] = pb.MetadataValue(int_value=v)
        elif isinstance(v, float):
            out[key] = pb.MetadataValue(double_value=v)
        elif isinstance(v, str):
            out[key] = pb.MetadataValue(string_value=v)
        else:
            raise invalid(
                f"metadata[{key!r}] is a {type(v).__name__}; only str, int, float and bool travel",
                field=f"metadata.{key}",
            )
    return out


def metadata_from_pb(values: Mapping[str, pb.MetadataValue]) -> dict[str, MetadataValue]:
    out: dict[str, MetadataValue] = {}
    for key, v in values.items():
        kind = v.WhichOneof("kind")
        if kind is None:
            raise invalid(f"metadata[{key!r}] has no value; set one of its fields", field=f"metadata.{key}")
        out[key] = getattr(v, kind)
    return out


# ---- documents and chunks --------------------------------------------------------------------------
def document_to_pb(d: Document) -> pb.Document:
    m = pb.Document(
        id=d.id,
        version=d.version,
        tenant=d.tenant,
        acl=acl_to_pb(d.acl),
        source=d.source,
        title=d.title,
        metadata=metadata_to_pb(d.metadata),
    )
    if d.text is not None:
        m.text = d.text
    else:
        payload = d.payload()
        m.content = payload if isinstance(payload, bytes) else payload.encode()
    if d.content_type is not None:
        m.content_type = d.content_type
    return m


def document_from_pb(m: pb.Document) -> Document:
    kind = m.WhichOneof("payload")
    return _validated(
        Document,
        "document",
        {
            "id": m.id,
            "version": m.version,
            "tenant": m.tenant,
            "acl": {"users": list(m.acl.users), "groups": list(m.acl.groups)},
            "source": m.source,
            "title": m.title,
            "text": m.text if kind == "text" else None,
            "content_base64": base64.b64encode(m.content).decode() if kind == "content" else None,
            "content_type": m.content_type if m.HasField("content_type") else None,
            "metadata": metadata_from_pb(m.metadata),
        },
    )


def chunk_to_pb(c: Chunk) -> pb.Chunk:
    return pb.Chunk(
        chunk_id=c.chunk_id,
        doc_id=c.doc_id,
        tenant=c.tenant,
        ordinal=c.ordinal,
        title=c.title,
        section_path=c.section_path,
        header=c.header,
        text=c.text,
        source=c.source,
        version=c.version,
        trust=c.trust,
    )


def chunk_from_pb(m: pb.Chunk) -> Chunk:
    return Chunk(
        chunk_id=m.chunk_id,
        doc_id=m.doc_id,
        tenant=m.tenant,
        ordinal=m.ordinal,
        title=m.title,
        section_path=list(m.section_path),
        header=m.header,
        text=m.text,
        source=m.source,
        version=m.version,
        trust=m.trust,
    )


def state_to_pb(s: DocumentState) -> pb.DocumentState.ValueType:
    return _STATES[s]


def state_from_pb(v: int, what: str = "state") -> DocumentState:
    state: DocumentState = _reverse(_STATES, v, what)
    return state


def status_to_pb(s: DocumentStatus) -> pb.DocumentStatus:
    m = pb.DocumentStatus(
        id=s.id,
        tenant=s.tenant,
        version=s.version,
        state=state_to_pb(s.state),
        chunks=s.chunks,
        updated_at=s.updated_at,
        readers=s.readers,
    )
    if s.error is not None:
        m.error = s.error
    return m


def status_from_pb(m: pb.DocumentStatus) -> DocumentStatus:
    return DocumentStatus(
        id=m.id,
        tenant=m.tenant,
        version=m.version,
        state=state_from_pb(m.state),
        chunks=m.chunks,
        error=m.error if m.HasField("error") else None,
        updated_at=m.updated_at,
        readers=list(m.readers),
    )


def document_write_to_pb(d: DocumentWrite) -> index_pb2.DocumentWrite:
    return index_pb2.DocumentWrite(
        tenant=d.tenant,
        doc_id=d.doc_id,
        version=d.version,
        content_hash=d.content_hash,
        title=d.title,
        source=d.source,
        acl=acl_to_pb(d.acl),
        metadata=metadata_to_pb(d.metadata),
        chunks=[chunk_write_to_pb(c) for c in d.chunks],
    )


def chunk_write_to_pb(c: ChunkWrite) -> index_pb2.ChunkWrite:
    m = index_pb2.ChunkWrite(
        chunk=chunk_to_pb(c.chunk),
        token_len=c.token_len,
        vector=vector_to_bytes(c.vector),
        entities=list(c.entities),
    )
    if c.claim_vector is not None:
        m.claim_vector = vector_to_bytes(c.claim_vector)
    return m


def chunk_write_from_pb(
    m: index_pb2.ChunkWrite, *, dim: int | None = None, what: str = "chunk"
) -> ChunkWrite:
    """Both vectors checked against ``dim``; an unset ``claim_vector`` is ``None`` (not computed)."""
    return ChunkWrite(
        chunk=chunk_from_pb(m.chunk),
        token_len=m.token_len,
        vector=vector_from_bytes(m.vector, dim=dim, what=f"{what}.vector"),
        claim_vector=(
            vector_from_bytes(m.claim_vector, dim=dim, what=f"{what}.claim_vector")
            if m.HasField("claim_vector")
            else None
        ),
        entities=_entities_from_pb(m.entities, what=f"{what}.entities"),
    )


MAX_WIRE_ENTITIES = 1_024  # per chunk: ingest keeps graph.max_entities_per_chunk (≤ 1024) of them


def _entities_from_pb(keys: Any, *, what: str) -> tuple[str, ...]:
    """A chunk's entity keys as sent, bounded: a write cannot grow the graph without limit."""
    if len(keys) > MAX_WIRE_ENTITIES:
        raise invalid(f"{what} has {len(keys)} keys; send at most {MAX_WIRE_ENTITIES}", field=what)
    for key in keys:
        if not key or len(key) > MAX_KEY_CHARS:
            raise invalid(
                f"{what} holds a key of {len(key)} characters; keys are 1..{MAX_KEY_CHARS} (entity_key)",
                field=what,
            )
    return tuple(keys)


def document_write_from_pb(m: index_pb2.DocumentWrite, *, dim: int | None = None) -> DocumentWrite:
    return DocumentWrite(
        tenant=m.tenant,
        doc_id=m.doc_id,
        version=m.version,
        content_hash=m.content_hash,
        title=m.title,
        source=m.source,
        acl=acl_from_pb(m.acl),
        metadata=dict(metadata_from_pb(m.metadata)),
        chunks=[
            chunk_write_from_pb(c, dim=dim, what=f"{m.doc_id}.chunks[{i}]") for i, c in enumerate(m.chunks)
        ],
    )


# ---- search ----------------------------------------------------------------------------------------
def filters_to_pb(f: SearchFilters | None) -> pb.SearchFilters | None:
    if f is None:
        return None
    return pb.SearchFilters(doc_ids=f.doc_ids, sources=f.sources, metadata=metadata_to_pb(f.metadata))


def filters_from_pb(m: pb.SearchFilters | None) -> SearchFilters | None:
    if m is None:
        return None
    return _validated(
        SearchFilters,
        "filters",
        {"doc_ids": list(m.doc_ids), "sources": list(m.sources), "metadata": metadata_from_pb(m.metadata)},
    )


def judgement_to_pb(j: Judgement) -> pb.Judgement:
    return pb.Judgement(
        chunk_id=j.chunk_id,
        doc_id=j.doc_id,
        verdict=_VERDICTS[j.verdict],
        score=j.score,
        reason=j.reason,
        signals=j.signals,
    )


def judgement_from_pb(m: pb.Judgement) -> Judgement:
    return Judgement(
        chunk_id=m.chunk_id,
        doc_id=m.doc_id,
        verdict=_reverse(_VERDICTS, m.verdict, "judgement.verdict"),
        score=m.score,
        reason=m.reason,
        signals=dict(m.signals),
    )


def scored_chunk_to_pb(s: ScoredChunk) -> pb.ScoredChunk:
    m = pb.ScoredChunk(
        chunk=chunk_to_pb(s.chunk),
        scores=[pb.RetrieverScore(retriever=k, score=v) for k, v in s.scores.items()],
        ranks=[pb.RetrieverRank(retriever=k, rank=v) for k, v in s.ranks.items()],
        fused=s.fused,
    )
    if s.judgement is not None:
        m.judgement.CopyFrom(judgement_to_pb(s.judgement))
    if s.vector is not None:
        m.vector = vector_to_bytes(s.vector)
    if s.copy_cosines is not None:
        m.copy_cosines.CopyFrom(
            pb.CopyCosines(
                values=s.copy_cosines,
                neighbors=[pb.CopyCosines(values=n) for n in s.copy_neighbors or []],
                arrivals=s.copy_arrivals or [],
                overlaps=s.copy_overlaps or [],
                edits=[
                    pb.CopyEdit(
                        doc_id=e.doc_id,
                        old=[o for o, _ in e.replaced],
                        new=[n for _, n in e.replaced],
                        heading=e.heading,
                        one_sided=e.one_sided,
                    )
                    for e in s.copy_edits or []
                ],
            )
        )
    if s.arrival is not None:
        m.arrival = s.arrival
    return m


def scored_chunk_from_pb(m: pb.ScoredChunk, copy_leads: list[str] | None = None) -> ScoredChunk:
    """``copy_leads``: the hit's entry of ``SearchResponse.copy_leads`` (the linked extension's)."""
    return ScoredChunk(
        chunk=chunk_from_pb(m.chunk),
        scores={s.retriever: (s.score if s.HasField("score") else None) for s in m.scores},
        ranks={r.retriever: (r.rank if r.HasField("rank") else None) for r in m.ranks},
        fused=m.fused,
        judgement=judgement_from_pb(m.judgement) if m.HasField("judgement") else None,
        vector=vector_from_bytes(m.vector).tolist() if m.HasField("vector") else None,
        copy_cosines=list(m.copy_cosines.values) if m.HasField("copy_cosines") else None,
        copy_neighbors=[list(n.values) for n in m.copy_cosines.neighbors]
        if m.HasField("copy_cosines") and m.copy_cosines.neighbors
        else None,
        copy_leads=copy_leads,
        arrival=m.arrival if m.HasField("arrival") else None,
        copy_arrivals=list(m.copy_cosines.arrivals)
        if m.HasField("copy_cosines") and m.copy_cosines.arrivals
        else None,
        copy_overlaps=list(m.copy_cosines.overlaps)
        if m.HasField("copy_cosines") and m.copy_cosines.overlaps
        else None,
        copy_edits=[
            CopyEdit(
                doc_id=e.doc_id,
                replaced=list(zip(e.old, e.new, strict=True)),
                heading=e.heading,
                one_sided=list(e.one_sided),
            )
            for e in m.copy_cosines.edits
        ]
        if m.HasField("copy_cosines") and m.copy_cosines.edits
        else None,
    )


def copy_cosines_to_pb(cosines: Mapping[int, Copies]) -> dict[int, pb.CopyCosines]:
    """``CheckReads.copy_cosines``' answer as the ``CopyCosinesResponse.cosines`` map."""
    return {
        cid: pb.CopyCosines(
            values=c.cosines,
            neighbors=[pb.CopyCosines(values=n) for n in c.neighbors],
            arrivals=c.arrivals,
            others=c.others,
        )
        for cid, c in cosines.items()
    }


def copy_cosines_from_pb(cosines: Mapping[int, pb.CopyCosines]) -> dict[int, Copies]:
    return {
        int(cid): Copies(
            list(c.values), [list(n.values) for n in c.neighbors], list(c.arrivals), list(c.others)
        )
        for cid, c in cosines.items()
    }


def search_request_to_pb(query: str, principal: Principal, p: SearchParams) -> retrieval_pb2.SearchRequest:
    m = retrieval_pb2.SearchRequest(
        query=query,
        principal=principal_to_pb(principal),
        top_k=p.top_k,
        method=_METHODS[p.method],
        weights=p.weights,
        rrf_k=p.rrf_k,
        candidates=p.candidates,
        fill_missing=p.fill_missing,
        bounds={k: retrieval_pb2.Bounds(low=b.low, high=b.high) for k, b in p.bounds.items()},
        vectors=p.vectors,
        copy_depth=p.copy_depth,
        copy_expand=p.copy_expand,
        copy_overlap=p.copy_overlap,
    )
    filters = filters_to_pb(p.filters)
    if filters is not None:
        m.filters.CopyFrom(filters)
    links = link_wire.options_to_pb(p.links)
    if links is not None:
        m.links.CopyFrom(links)
    if p.graph_depth is not None:
        m.graph_depth = p.graph_depth
    return m


MAX_TOP_K = 1000
MAX_CANDIDATES = 2000  # per retriever, as FusionOptions.candidates (HTTP) and FusionSettings.candidates


def search_request_from_pb(m: retrieval_pb2.SearchRequest) -> tuple[str, Principal, SearchParams]:
    """``(query, principal, params)``; a missing principal, a query without words or an out-of-range
    number is INVALID_ARGUMENT naming the value (bounds as the HTTP API's and FusionSettings')."""
    if not m.HasField("principal"):
        raise invalid("principal is required: every search is evaluated as a caller", field="principal")
    check_query(m.query)  # as the HTTP API and HybridRetriever: blank or wordless is refused here
    for name, value, low, high in (
        ("top_k", m.top_k, 1, MAX_TOP_K),
        ("candidates", m.candidates, 1, MAX_CANDIDATES),
        ("rrf_k", m.rrf_k, 1, None),
        ("copy_depth", m.copy_depth, 0, MAX_TOP_K),
    ):
        if value < low or (high is not None and value > high):
            bound = f">= {low}" if high is None else f"within {low}..{high}"
            raise invalid(f"{name} = {value} must be {bound}", field=name, value=value)
    if m.HasField("graph_depth") and not 1 <= m.graph_depth <= MAX_GRAPH_DEPTH:
        raise invalid(
            f"graph_depth = {m.graph_depth} must be within 1..{MAX_GRAPH_DEPTH}", field="graph_depth"
        )
    for name, cosine in (("copy_expand", m.copy_expand), ("copy_overlap", m.copy_overlap)):
        if not 0.0 <= cosine <= 1.0:
            raise invalid(f"{name} = {cosine} must be within 0..1 (0 = none)", field=name, value=cosine)
    problem = weights_problem(dict(m.weights))
    if problem is not None:
        raise invalid(problem[1], field=problem[0])
    params = SearchParams(
        top_k=m.top_k,
        method=_reverse(_METHODS, m.method, "method"),
        weights=dict(m.weights),
        rrf_k=m.rrf_k,
        candidates=m.candidates,
        fill_missing=m.fill_missing,
        bounds={
            k: Bounds(low=b.low if b.HasField("low") else None, high=b.high if b.HasField("high") else None)
            for k, b in m.bounds.items()
        },
        filters=filters_from_pb(m.filters) if m.HasField("filters") else None,
        vectors=m.vectors,
        copy_depth=m.copy_depth,
        copy_expand=m.copy_expand,
        copy_overlap=m.copy_overlap,
        links=link_wire.options_from_pb(m.links if m.HasField("links") else None),
        graph_depth=m.graph_depth if m.HasField("graph_depth") else None,
    )
    return m.query, principal_from_pb(m.principal), params


def outcome_to_pb(o: SearchOutcome) -> retrieval_pb2.SearchResponse:
    return retrieval_pb2.SearchResponse(
        hits=[scored_chunk_to_pb(h) for h in o.hits],
        timings_ms=o.timings_ms,
        candidates=o.candidates,
        degraded=o.degraded,
        filtered=[judgement_to_pb(j) for j in o.filtered],
        fallback=o.fallback,
        copy_leads=link_wire.leads_to_pb(
            {h.chunk.chunk_id: h.copy_leads for h in o.hits if h.copy_leads is not None}
        ),
        graph=retrieval_pb2.GraphOutcome(status=o.graph.status.value, linked=o.graph.linked)
        if o.graph is not None
        else None,
    )


def outcome_from_pb(m: retrieval_pb2.SearchResponse) -> SearchOutcome:
    leads = link_wire.leads_from_pb(m.copy_leads)
    return SearchOutcome(
        hits=[scored_chunk_from_pb(h, leads.get(h.chunk.chunk_id)) for h in m.hits],
        timings_ms=dict(m.timings_ms),
        candidates=dict(m.candidates),
        degraded=list(m.degraded),
        filtered=[judgement_from_pb(j) for j in m.filtered],
        fallback=m.fallback,
        graph=GraphResult([], _reverse_status(m.graph.status), linked=list(m.graph.linked))
        if m.HasField("graph")
        else None,
    )


def _reverse_status(status: str) -> GraphStatus:
    """A ``GraphOutcome.status`` string as the enum (an unknown one, from a newer server, as
    ``no_graph``: the search says it went without the graph rather than failing)."""
    try:
        return GraphStatus(status)
    except ValueError:
        return GraphStatus.NO_GRAPH
