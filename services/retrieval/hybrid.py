"""Hybrid retrieval: BM25 + dense candidates, missing scores filled in, fused, top-k chunks.

Both searches run with the principal's tenant + ACL filter inside the index. See fusion.py for the
rule on chunks found by only one retriever.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from services.common.errors import invalid
from services.common.query_text import check_query
from services.common.types import Chunk, FusionMethod, Principal, Retriever, ScoredChunk, SearchFilters
from services.common.verdicts import Judgement
from services.retrieval.capabilities import check_reads
from services.retrieval.config import FusionSettings
from services.retrieval.copy_overlap import copy_texts
from services.retrieval.embedder import Embedder
from services.retrieval.fusion import Bounds, Fused, fuse, weights_problem
from services.retrieval.graph.config import MAX_GRAPH_DEPTH
from services.retrieval.graph.stream import GraphResult, GraphStatus, GraphStream
from services.retrieval.index import SearchIndex
from services.retrieval.links.leads import copy_leads
from services.retrieval.links.options import NO_LINKS, LinkOptions
from services.retrieval.links.stream import LINK_SCORES, LinkStream

# the graph's scores are already 0..1 (walk.MASS_FLOOR): min-max over its own list would put its last
# passage at 0 however close it is to the seeds
GRAPH_BOUNDS = {Retriever.GRAPH.value: Bounds(0.0, 1.0)}
# other documents whose claim-vector cosine is reported per result (the fact-check counts those above
# its threshold; more than a handful of copies adds nothing to the decision)
COPY_LIMIT = 8


@dataclass(frozen=True)
class SearchParams:
    """Per-request knobs. Build with :meth:`from_settings` so defaults have one home (FusionSettings)."""

    top_k: int
    method: FusionMethod
    weights: dict[str, float]
    rrf_k: int
    candidates: int
    fill_missing: bool
    bounds: dict[str, Bounds] = field(default_factory=dict)
    filters: SearchFilters | None = None
    # attach each result's stored embedding (the fact-check's near-duplicate clustering reads them)
    vectors: bool = False
    # the top ``copy_depth`` results get ``copy_cosines`` (claim-vector cosines to the closest other
    # documents): the fact-check's planted-copies signal; 0 = none
    copy_depth: int = 0
    # > 0: their closest other documents at this cosine or above also get their own copy cosines
    # (``copy_neighbors``: the planted-copies rule's border members)
    copy_expand: float = 0.0
    # > 0: their closest other documents at this cosine or above also get the word overlap of their
    # text with the result's (``copy_overlaps``: an edited copy of an older passage shares most words)
    copy_overlap: float = 0.0
    # the linked corpus profile's extension (link stream, back-links, copy leads); none by default
    links: LinkOptions = NO_LINKS
    # entity -> passage hops of the graph stream (weights["graph"] > 0); None: graph.depth
    graph_depth: int | None = None

    @classmethod
    def from_settings(
        cls,
        s: FusionSettings,
        *,
        top_k: int,
        method: FusionMethod | None = None,
        weights: dict[str, float] | None = None,
        rrf_k: int | None = None,
        candidates: int | None = None,
        fill_missing: bool | None = None,
        bounds: dict[str, Bounds] | None = None,
        filters: SearchFilters | None = None,
        link_seeds: int | None = None,
        backlinks: int | None = None,
        graph_depth: int | None = None,
    ) -> SearchParams:
        """Settings' defaults, overridden by whatever the request gives (``None`` = not given)."""
        return cls(
            top_k=top_k,
            method=method if method is not None else s.method,
            weights=weights
            if weights is not None
            else {Retriever.BM25.value: s.bm25_weight, Retriever.DENSE.value: s.dense_weight},
            rrf_k=rrf_k if rrf_k is not None else s.rrf_k,
            candidates=candidates if candidates is not None else s.candidates,
            fill_missing=fill_missing if fill_missing is not None else s.fill_missing,
            bounds=bounds or {},
            filters=filters,
            links=LinkOptions(
                seeds=link_seeds if link_seeds is not None else s.link_seeds,
                backlinks=backlinks if backlinks is not None else s.backlinks,
            ),
            graph_depth=graph_depth,
        )


@dataclass
class SearchOutcome:
    hits: list[ScoredChunk]
    timings_ms: dict[str, float]
    candidates: dict[str, int]
    degraded: list[str] = field(default_factory=list)  # stages skipped (e.g. "rerank"), docs/architecture.md
    filtered: list[Judgement] = field(default_factory=list)  # judged and withheld by the fact-check
    fallback: bool = False  # fewer than factcheck.min_keep passed: non-adversarial ones re-admitted
    graph: GraphResult | None = None  # the graph stream's outcome, when the search asked for it


class HybridRetriever:
    def __init__(self, index: SearchIndex, embedder: Embedder, graph: GraphStream | None = None) -> None:
        """``graph``: the knowledge graph's stream (``None``: a search asking for it is flagged
        degraded and carried by BM25 and dense)."""
        self.index = index
        self.embedder = embedder
        self.links = LinkStream(index)
        self.graph = graph

    def close(self) -> None:
        """Nothing of its own to release: the index belongs to whoever opened it."""

    def stats(self) -> dict[str, int]:
        return self.index.stats()

    def search(self, query: str, principal: Principal, params: SearchParams) -> SearchOutcome:
        vector = None
        timings: dict[str, float] = {}
        if params.weights.get(Retriever.DENSE.value, 0.0) > 0:
            t0 = time.perf_counter()
            vector = self.embedder.embed([query])[0]
            timings["embed"] = (time.perf_counter() - t0) * 1000
        outcome = self.search_with_vector(query, vector, principal, params)
        outcome.timings_ms = {**timings, **outcome.timings_ms}
        return outcome

    def search_with_vector(
        self, query: str, vector: npt.NDArray[np.float32] | None, principal: Principal, params: SearchParams
    ) -> SearchOutcome:
        """Search with a precomputed query vector (batch evaluation embeds all queries at once)."""
        check_query(query)
        weights = _weights(params)
        lists: dict[str, list[tuple[int, float]]] = {}
        timings: dict[str, float] = {}
        graph = self._graph(query, principal, params, weights, lists, timings)
        if graph is not None and not weights:
            return _graph_found_nothing(graph, timings)
        self._text_lists(query, vector, principal, params, weights, lists, timings)
        own_ranks = {name: [k for k, _ in hits] for name, hits in lists.items()}
        found = {name: len(hits) for name, hits in lists.items()}
        if params.fill_missing and Retriever.BM25.value in lists and Retriever.DENSE.value in lists:
            t0 = time.perf_counter()
            self._fill(query, vector, principal, lists, params.filters)
            timings["fill"] = (time.perf_counter() - t0) * 1000
        if Retriever.GRAPH.value in lists:
            _unreached(lists)
        t0 = time.perf_counter()
        fused = fuse(
            lists,
            weights,
            method=params.method,
            rrf_k=params.rrf_k,
            bounds={**GRAPH_BOUNDS, **params.bounds},
            rank_lists=own_ranks,
        )[: params.top_k]
        chunks = self.index.chunks([f.key for f in fused], principal)
        if params.links.seeds > 0 and fused:
            t1 = time.perf_counter()
            fused = self._link(query, vector, fused, chunks, principal, params, lists)
            timings["link"] = (time.perf_counter() - t1) * 1000
        stored = (
            check_reads(self.index).stored_vectors([f.key for f in fused], principal)
            if params.vectors
            else {}
        )
        copied: dict[int, dict[str, Any]] = {}
        if params.copy_depth > 0:
            t1 = time.perf_counter()
            head = [f.key for f in fused[: params.copy_depth] if f.key in chunks]
            copied = self._copy_fields(head, principal, params, chunks)
            timings["copies"] = (time.perf_counter() - t1) * 1000
        raw = {name: dict(hits) for name, hits in lists.items()}
        rank_of = {name: {k: i + 1 for i, k in enumerate(order)} for name, order in own_ranks.items()}
        hits = [
            ScoredChunk(
                chunk=chunks[f.key],
                scores={
                    name: raw[name].get(f.key)
                    for name in lists
                    if name not in LINK_SCORES or f.key in raw[name]
                },
                ranks={name: rank_of[name].get(f.key) for name in rank_of},
                fused=f.score,
                vector=[float(x) for x in stored[f.key]] if f.key in stored else None,
                arrival=f.key if params.copy_depth > 0 else None,
                **copied.get(f.key, {}),
            )
            for f in fused
            if f.key in chunks
        ]
        timings["fuse"] = (
            (time.perf_counter() - t0) * 1000 - timings.get("copies", 0.0) - timings.get("link", 0.0)
        )
        outcome = SearchOutcome(hits=hits, timings_ms=timings, candidates=found, graph=graph)
        if graph is not None and graph.status is GraphStatus.NO_GRAPH:
            outcome.degraded.append("graph")
        return outcome

    def _text_lists(
        self,
        query: str,
        vector: npt.NDArray[np.float32] | None,
        principal: Principal,
        params: SearchParams,
        weights: dict[str, float],
        lists: dict[str, list[tuple[int, float]]],
        timings: dict[str, float],
    ) -> None:
        """BM25's and dense's lists into ``lists``, for those ``weights`` gives a share."""
        depth = max(params.candidates, params.top_k)
        if Retriever.BM25.value in weights:
            t0 = time.perf_counter()
            lists["bm25"] = self.index.bm25(query, principal, depth, filters=params.filters)
            timings["bm25"] = (time.perf_counter() - t0) * 1000
        if Retriever.DENSE.value in weights:
            if vector is None:
                raise invalid("dense retrieval needs the query vector")
            t0 = time.perf_counter()
            lists["dense"] = self.index.dense(vector, principal, depth, filters=params.filters)
            timings["dense"] = (time.perf_counter() - t0) * 1000

    def _graph(
        self,
        query: str,
        principal: Principal,
        params: SearchParams,
        weights: dict[str, float],
        lists: dict[str, list[tuple[int, float]]],
        timings: dict[str, float],
    ) -> GraphResult | None:
        """The graph stream's list into ``lists`` when ``weights`` asks for it. Without a graph (no
        stream, or an index that stores none) or an entity the query names, its weight is dropped, so
        BM25 and dense carry the search; the outcome says why (:class:`GraphStatus`). When the graph was
        the only retriever asked for, nothing is left: the search has no results (a state of the
        index, not a fault of the request, which the OpenAPI document admits)."""
        if Retriever.GRAPH.value not in weights:
            return None
        t0 = time.perf_counter()
        if self.graph is None:
            result = GraphResult([], GraphStatus.NO_GRAPH)
        else:
            hops = params.graph_depth or self.graph.settings.depth
            result = self.graph.search(query, principal, hops, filters=params.filters)
        timings["graph"] = (time.perf_counter() - t0) * 1000
        if result.hits:
            lists[Retriever.GRAPH.value] = result.hits
        else:
            del weights[Retriever.GRAPH.value]
        return result

    def _link(
        self,
        query: str,
        vector: npt.NDArray[np.float32] | None,
        fused: list[Fused],
        chunks: dict[int, Chunk],
        principal: Principal,
        params: SearchParams,
        lists: dict[str, list[tuple[int, float]]],
    ) -> list[Fused]:
        """The linked profile's link stream over ``fused`` (:class:`LinkStream`), pages joining the head
        scored like every candidate when the search fills missing scores."""
        return self.links.apply(
            query,
            fused,
            chunks,
            principal,
            params.links,
            top_k=params.top_k,
            filters=params.filters,
            lists=lists,
            fill=(lambda new: self._fill(query, vector, principal, lists, params.filters, new))
            if params.fill_missing
            else None,
        )

    def _copy_fields(
        self, head: list[int], principal: Principal, params: SearchParams, chunks: dict[int, Chunk]
    ) -> dict[int, dict[str, Any]]:
        """The ``ScoredChunk`` fields of each of ``head``'s chunks that has a claim vector: its copy cosines
        and, as ``params`` asks, their neighbors, the copies' write order, how many words each copy shares
        with the chunk (``chunks`` holds the head's) and, for a linked tenant, the names they open with
        (the fact-check's planted-copies signal)."""
        copies = check_reads(self.index).copy_cosines(head, principal, COPY_LIMIT, expand=params.copy_expand)
        read = functools.partial(self.index.chunks, principal=principal)
        leads = copy_leads(copies, params.links.copy_leads, read)
        texts = copy_texts(copies, params.copy_overlap, chunks, read)
        return {
            cid: {
                "copy_cosines": c.cosines,
                "copy_neighbors": c.neighbors if params.copy_expand > 0 else None,
                "copy_leads": leads.get(cid),
                "copy_arrivals": c.arrivals or None,
                "copy_overlaps": texts.overlaps.get(cid),
                "copy_edits": texts.edits.get(cid) if params.copy_overlap > 0 else None,
            }
            for cid, c in copies.items()
        }

    def _fill(
        self,
        query: str,
        vector: npt.NDArray[np.float32] | None,
        principal: Principal,
        lists: dict[str, list[tuple[int, float]]],
        filters: SearchFilters | None,
        keys: Sequence[int] | None = None,
    ) -> None:
        """Score ``keys`` (default: every candidate) with each retriever in ``lists`` that lacks them
        (exact scores), so a chunk one retriever found gets the other's score too."""
        if keys is None:
            keys = sorted({k for hits in lists.values() for k, _ in hits})
        if "bm25" in lists:
            known = {k for k, _ in lists["bm25"]}
            need = [k for k in keys if k not in known]
            if need:
                got = dict(self.index.bm25(query, principal, len(need), filters=filters, restrict=need))
                # A chunk with none of the query's terms has BM25 0: a real score, not a missing one.
                lists["bm25"] = lists["bm25"] + [(k, got.get(k, 0.0)) for k in need]
        if "dense" in lists and vector is not None:
            known = {k for k, _ in lists["dense"]}
            need = [k for k in keys if k not in known]
            if need:
                cos = self.index.cosine(vector, need, principal)
                lists["dense"] = lists["dense"] + [(k, cos[k]) for k in need if k in cos]


def _unreached(lists: dict[str, list[tuple[int, float]]]) -> None:
    """Every candidate the walk did not reach gets graph score 0, a real score: fusion's rule for a
    missing score (the list's worst, for a retriever that stopped at its depth) would credit it with
    the walk's farthest passage."""
    graph = lists[Retriever.GRAPH.value]
    reached = {k for k, _ in graph}
    others = {k for name, hits in lists.items() if name != Retriever.GRAPH.value for k, _ in hits}
    lists[Retriever.GRAPH.value] = graph + [(k, 0.0) for k in sorted(others - reached)]


def _graph_found_nothing(graph: GraphResult, timings: dict[str, float]) -> SearchOutcome:
    """The outcome of a search that asked the graph alone, which found nothing: no results, and the
    graph's status saying why (``no_graph`` is degraded, as when the graph shares the search)."""
    outcome = SearchOutcome(hits=[], timings_ms=timings, candidates={Retriever.GRAPH.value: 0}, graph=graph)
    if graph.status is GraphStatus.NO_GRAPH:
        outcome.degraded.append("graph")
    return outcome


def _weights(params: SearchParams) -> dict[str, float]:
    """The retrievers to run and their fusion weights: those with a weight above 0. The weights'
    rule is :func:`weights_problem`'s, as on the gRPC wire and in the HTTP request model."""
    problem = weights_problem(params.weights)
    if problem is not None:
        raise invalid(problem[1], field=problem[0])
    weights = {k: w for k, w in params.weights.items() if w > 0}
    if params.graph_depth is not None and not 1 <= params.graph_depth <= MAX_GRAPH_DEPTH:
        raise invalid(
            f"graph_depth = {params.graph_depth} is out of range; use 1..{MAX_GRAPH_DEPTH}",
            field="graph_depth",
        )
    return weights
