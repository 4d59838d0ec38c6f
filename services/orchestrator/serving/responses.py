"""Orchestrator results in the wire form of the public HTTP contract (``services.api.schemas``).

One place for every producer of a response: the pipeline service (plain and adaptive search, answers;
in-process and inside a Serve replica) and the CLI, which prints what the HTTP API would return.
"""

from __future__ import annotations

from services.api.schemas import (
    AdaptiveOut,
    ChainOut,
    CitationOut,
    FilteredHit,
    GradeOut,
    GraphOut,
    HopOut,
    RouteOut,
    SearchHit,
    SearchResponse,
    VerdictOut,
)
from services.common.types import ScoredChunk
from services.common.verdicts import Judgement
from services.orchestrator.answer import Answer
from services.orchestrator.orchestrator import Orchestrated
from services.retrieval.hybrid import SearchOutcome


def public_scores(scored: list[ScoredChunk]) -> list[dict[str, float | None]]:
    """Each hit's per-retriever scores as the API shows them: BM25 relative to the best BM25 score
    among these hits (0-1], the others as they are.

    Why not the raw BM25: its scale is the IDF of the query's words, and on a shared OpenSearch
    index that IDF counts every tenant's documents, so a tenant could tell from one score whether
    another tenant wrote a rare word (issue 36, point 5; docs/security.md). The ratio cancels the
    IDF of a one-word query; the embedded index keeps BM25 statistics per tenant besides."""
    best = max((s for h in scored if (s := h.scores.get("bm25")) is not None and s > 0), default=None)
    out: list[dict[str, float | None]] = []
    for h in scored:
        scores = dict(h.scores)
        raw = scores.get("bm25")
        if raw is not None:
            scores["bm25"] = round(raw / best, 6) if best else 0.0
        out.append(scores)
    return out


def to_hits(scored: list[ScoredChunk]) -> list[SearchHit]:
    """The wire form of fused results (shared by the HTTP API and the CLI)."""
    shown = public_scores(scored)
    return [
        SearchHit(
            rank=i + 1,
            chunk_id=h.chunk.chunk_id,
            doc_id=h.chunk.doc_id,
            title=h.chunk.title,
            section_path=h.chunk.section_path,
            header=h.chunk.header,
            text=h.chunk.text,
            source=h.chunk.source,
            version=h.chunk.version,
            scores=shown[i],
            ranks=h.ranks,
            fused=h.fused,
            verdict=VerdictOut(
                verdict=h.judgement.verdict, score=h.judgement.score, reason=h.judgement.reason
            )
            if h.judgement
            else None,
        )
        for i, h in enumerate(scored)
    ]


def to_filtered(judgements: list[Judgement]) -> list[FilteredHit]:
    return [
        FilteredHit(chunk_id=j.chunk_id, doc_id=j.doc_id, verdict=j.verdict, score=j.score, reason=j.reason)
        for j in judgements
    ]


def to_adaptive(o: Orchestrated) -> AdaptiveOut:
    """The wire form of what the orchestrator did (shared by /v1/search and /v1/answer)."""
    c = o.corrective
    return AdaptiveOut(
        route=RouteOut(
            type=o.route.type.value,
            complexity=o.route.complexity.value,
            confidence=round(o.route.confidence, 4),
            reason=o.route.reason,
        ),
        searched_query=o.searched,
        rewrite=o.rewrite.method,
        grade=GradeOut(
            grade=c.grade.value,
            score=c.score,
            action=c.action,
            secondary=c.secondary,
            rewritten_query=c.rewritten_query,
        )
        if c is not None
        else None,
        chain=ChainOut(
            hops=[
                HopOut(step=h.step, sub_query=h.sub_query, score=round(h.score, 4), chunk_ids=h.chunk_ids)
                for h in o.chain.hops
            ],
            score=round(o.chain.score, 4),
            stopped=o.chain.stopped,
        )
        if o.chain is not None
        else None,
        retrieval_calls=o.calls,
        session_id=o.session_id,
    )


def to_citations(answer: Answer) -> list[CitationOut]:
    return [CitationOut(**c.model_dump()) for c in answer.citations]


def to_search_response(
    query: str,
    outcome: SearchOutcome,
    *,
    timings_ms: dict[str, float] | None = None,
    adaptive: AdaptiveOut | None = None,
    request_id: str = "",
    trace_id: str | None = None,
) -> SearchResponse:
    """The wire form of a search outcome: one place for the server (plain and adaptive) and the CLI."""
    return SearchResponse(
        query=query,
        results=to_hits(outcome.hits),
        candidates=outcome.candidates,
        timings_ms={k: round(v, 2) for k, v in (timings_ms or outcome.timings_ms).items()},
        degraded=outcome.degraded,
        filtered=to_filtered(outcome.filtered),
        factcheck_fallback=outcome.fallback,
        adaptive=adaptive,
        graph=GraphOut(status=outcome.graph.status.value, linked=outcome.graph.linked)
        if outcome.graph is not None
        else None,
        request_id=request_id,
        trace_id=trace_id,
    )
