"""The graph stream: a query's entities linked to the graph, a walk, its passages as a third list
for fusion beside BM25 and dense (HyPA-RAG).

A search that asks for the graph always gets an answer: when the index stores no graph, or the query
names nothing the graph knows, the stream is empty and :attr:`GraphResult.status` says why, so the
response can flag it and the other streams carry the search.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from services.common.types import Principal, SearchFilters
from services.retrieval.graph.config import GraphSettings
from services.retrieval.graph.entities import EntityExtractor
from services.retrieval.graph.reads import graph_reads
from services.retrieval.graph.walk import Walk, walk


class GraphStatus(StrEnum):
    USED = "used"
    NO_GRAPH = "no_graph"  # the index stores no graph (a backend without mentions, extractor none)
    NO_ENTITY = "no_entity"  # the query names nothing the graph knows (or only hubs)


@dataclass(frozen=True)
class GraphResult:
    hits: list[tuple[int, float]]
    status: GraphStatus
    walk: Walk | None = None
    linked: list[str] = field(default_factory=list)


class GraphStream:
    """Links a query and walks the graph of ``index`` (when it serves :class:`GraphReads`)."""

    def __init__(self, index: object, extractor: EntityExtractor, settings: GraphSettings) -> None:
        self.index = index
        self.extractor = extractor
        self.settings = settings

    def search(
        self, query: str, principal: Principal, depth: int, *, filters: SearchFilters | None = None
    ) -> GraphResult:
        reads = graph_reads(self.index)
        if reads is None:
            return GraphResult([], GraphStatus.NO_GRAPH)
        candidates = self.extractor.query_candidates(query)
        if not candidates:
            return GraphResult([], GraphStatus.NO_ENTITY)
        limit = self.settings.hub_postings + 1  # one more than a hub may have: tells a hub
        found = reads.entity_postings(candidates, principal, limit, filters=filters)
        seeds = {k: v for k, v in found.items() if k in _outermost(found)}
        result = walk(
            seeds,
            lambda keys: reads.entity_postings(keys, principal, limit, filters=filters),
            reads.chunk_entities,
            depth,
            self.settings,
        )
        if not result.scores:
            return GraphResult([], GraphStatus.NO_ENTITY, result, linked=result.seeds)
        return GraphResult(result.scores, GraphStatus.USED, result, linked=result.seeds)


def _outermost(keys: dict[str, list[int]]) -> set[str]:
    """The keys not inside a longer key the query also names: 'forbidden ground' is the film, and
    'ground' alone would seed every passage about soil."""
    padded = {k: f" {k} " for k in keys}
    return {k for k in keys if not any(k != o and padded[k] in padded[o] for o in keys)}
