"""Hybrid retrieval: BM25 + dense candidates, missing scores filled in, fused, top-k chunks.

Both searches run with the principal's tenant + ACL filter inside the index. See fusion.py for the
rule on chunks found by only one retriever.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from services.common.errors import invalid
from services.common.query_text import check_query
from services.common.titles import name_key, names, spelled
from services.common.types import Chunk, FusionMethod, Principal, Retriever, ScoredChunk, SearchFilters
from services.common.verdicts import Judgement
from services.retrieval.capabilities import Copies, check_reads, link_reads
from services.retrieval.config import FusionSettings
from services.retrieval.embedder import Embedder
from services.retrieval.fusion import Bounds, Fused, fuse
from services.retrieval.index import SearchIndex

# other documents whose claim-vector cosine is reported per result (the fact-check counts those above
# its threshold; more than a handful of copies adds nothing to the decision)
COPY_LIMIT = 8
# Pages named by the seeds take at most this share of the head: they are candidates for the reranker,
# not a replacement for what both retrievers found.
LINK_SHARE = 0.25
LINK_SCORE = "link"  # ``ScoredChunk.scores`` key of a page that joined the head by being named
BACKLINK_SCORE = "backlink"  # ... and of a page that joined it by naming a seed
# Chunks read per seed when looking for pages that name it: its name's words (twice) and the query's
# ranked by BM25, then only those that spell the name are kept.
BACKLINK_POOL = 50


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
    # > 0: their closest other documents at this cosine or above carry the name their chunk opens with
    # (``copy_leads``: the planted-copies rule does not count a copy about another subject)
    copy_leads: float = 0.0
    # > 0: the documents the top ``link_seeds`` fused results name by title join the head at its end
    # (at most ``LINK_SHARE`` of it): a two-hop question's second page is named by its first
    link_seeds: int = 0
    # the head those pages join: what the reranker reads (0 = all ``top_k``); the search pipeline sets it
    link_head: int = 0
    # with ``link_seeds``: at most this many documents that name a seed by title (the best for the
    # query by BM25) join the head too: the second page of a two-hop question may name the first
    backlinks: int = 0

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
            link_seeds=link_seeds if link_seeds is not None else s.link_seeds,
            backlinks=backlinks if backlinks is not None else s.backlinks,
        )


@dataclass
class SearchOutcome:
    hits: list[ScoredChunk]
    timings_ms: dict[str, float]
    candidates: dict[str, int]
    degraded: list[str] = field(default_factory=list)  # stages skipped (e.g. "rerank"), docs/architecture.md
    filtered: list[Judgement] = field(default_factory=list)  # judged and withheld by the fact-check
    fallback: bool = False  # fewer than factcheck.min_keep passed: non-adversarial ones re-admitted


class HybridRetriever:
    def __init__(self, index: SearchIndex, embedder: Embedder) -> None:
        self.index = index
        self.embedder = embedder

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
        depth = max(params.candidates, params.top_k)
        lists: dict[str, list[tuple[int, float]]] = {}
        timings: dict[str, float] = {}
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
        own_ranks = {name: [k for k, _ in hits] for name, hits in lists.items()}
        found = {name: len(hits) for name, hits in lists.items()}
        if params.fill_missing and len(lists) == 2:
            t0 = time.perf_counter()
            self._fill(query, vector, principal, lists, params.filters)
            timings["fill"] = (time.perf_counter() - t0) * 1000
        t0 = time.perf_counter()
        fused = fuse(
            lists,
            weights,
            method=params.method,
            rrf_k=params.rrf_k,
            bounds=params.bounds,
            rank_lists=own_ranks,
        )[: params.top_k]
        chunks = self.index.chunks([f.key for f in fused])
        if params.link_seeds > 0 and fused:
            t1 = time.perf_counter()
            fused = self._link(query, vector, fused, chunks, principal, params, lists)
            timings["link"] = (time.perf_counter() - t1) * 1000
        stored = check_reads(self.index).stored_vectors([f.key for f in fused]) if params.vectors else {}
        copies: dict[int, Copies] = {}
        if params.copy_depth > 0:
            t1 = time.perf_counter()
            head = [f.key for f in fused[: params.copy_depth] if f.key in chunks]
            copies = check_reads(self.index).copy_cosines(
                head, principal, COPY_LIMIT, expand=params.copy_expand, leads=params.copy_leads
            )
            timings["copies"] = (time.perf_counter() - t1) * 1000
        raw = {name: dict(hits) for name, hits in lists.items()}
        rank_of = {name: {k: i + 1 for i, k in enumerate(order)} for name, order in own_ranks.items()}
        hits = [
            ScoredChunk(
                chunk=chunks[f.key],
                scores={
                    name: raw[name].get(f.key)
                    for name in lists
                    if name not in (LINK_SCORE, BACKLINK_SCORE) or f.key in raw[name]
                },
                ranks={name: rank_of[name].get(f.key) for name in rank_of},
                fused=f.score,
                vector=[float(x) for x in stored[f.key]] if f.key in stored else None,
                copy_cosines=copies[f.key].cosines if f.key in copies else None,
                copy_neighbors=copies[f.key].neighbors
                if f.key in copies and params.copy_expand > 0
                else None,
                copy_leads=copies[f.key].leads if f.key in copies and params.copy_leads > 0 else None,
                arrival=f.key if params.copy_depth > 0 else None,
                copy_arrivals=copies[f.key].arrivals if f.key in copies and copies[f.key].arrivals else None,
            )
            for f in fused
            if f.key in chunks
        ]
        timings["fuse"] = (
            (time.perf_counter() - t0) * 1000 - timings.get("copies", 0.0) - timings.get("link", 0.0)
        )
        return SearchOutcome(hits=hits, timings_ms=timings, candidates=found)

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
        """``fused`` with the pages its top ``link_seeds`` name and its head lacks placed at the end of
        the head (the first ``link_head`` results, default all), then at most ``backlinks`` pages that
        name those seeds, pushing the rest down; ``chunks`` (``fused``'s chunks) gains theirs.

        A page ranked below the head moves up; each joins with the fused score of the place it takes,
        ``LINK_SCORE`` (or ``BACKLINK_SCORE``) = 1.0 in ``lists`` and, with ``fill_missing``, its exact
        scores from the retrievers in ``lists``: the reranker, which reads the head, decides where it
        belongs. Together they take at most ``LINK_SHARE`` of the head; a page naming a seed keeps its
        place before the seeds' named pages fill the rest.
        """
        n = min(len(fused), params.link_head or params.top_k)
        room = max(1, int(n * LINK_SHARE)) if n > 1 else 0
        seeds = [chunks[f.key] for f in fused[: min(params.link_seeds, n)] if f.key in chunks]
        if not room or not seeds:
            return fused
        have = {chunks[f.key].doc_id for f in fused[:n] if f.key in chunks}
        back = self._naming(query, seeds, principal, params, have)[: min(params.backlinks, room)]
        taken = have | {c.doc_id for _, c in back}
        named = link_reads(self.index).named(
            [c.text for c in seeds], principal, room + len(have), filters=params.filters
        )
        docs = self.index.chunks([cid for cid, _ in named])
        forward = [cid for cid, _ in named if cid in docs and docs[cid].doc_id not in taken][
            : room - len(back)
        ]
        new = forward + [cid for cid, _ in back]
        if not new:
            return fused
        chunks.update((cid, docs[cid]) for cid in forward)
        chunks.update(back)
        at = n - len(new)
        if params.fill_missing:
            self._fill(query, vector, principal, lists, params.filters, new)
        if forward:
            lists[LINK_SCORE] = [(cid, 1.0) for cid in forward]
        if back:
            lists[BACKLINK_SCORE] = [(cid, 1.0) for cid, _ in back]
        joined = [Fused(cid, fused[at + i].score, {}) for i, cid in enumerate(new)]
        moved = set(new)
        rest = [f for f in fused[at:] if f.key not in moved]
        return (fused[:at] + joined + rest)[: len(fused)]

    def _naming(
        self,
        query: str,
        seeds: Sequence[Chunk],
        principal: Principal,
        params: SearchParams,
        skip: set[str],
    ) -> list[tuple[int, Chunk]]:
        """Readable chunks, one per document not in ``skip``, whose text spells a seed's title (see
        ``titles.names``), best for ``query`` by BM25 first: the pages that link *to* the seeds.

        A seed whose title the query spells out is not followed (every page retrieved for that name
        mentions it). Per seed, one BM25 search for its name's words (counted twice) and the query's
        words reads ``BACKLINK_POOL`` chunks; only those spelling the name are kept. Bounded: at most
        ``link_seeds`` searches, one read of their chunks, then one BM25 scoring of the kept ones."""
        if params.backlinks <= 0:
            return []
        asked = spelled(query)
        pools: dict[str, tuple[Chunk, list[int]]] = {}  # name -> (its seed, chunks read for it)
        for seed in seeds:
            key = name_key(seed.title)
            if key is None or key in pools or names(asked, seed.title):
                continue
            pool = self.index.bm25(f"{key} {key} {query}", principal, BACKLINK_POOL, filters=params.filters)
            pools[key] = (seed, [cid for cid, _ in pool])
        got = self.index.chunks(list(dict.fromkeys(cid for _, cids in pools.values() for cid in cids)))
        spelt = {cid: spelled(c.text) for cid, c in got.items() if c.doc_id not in skip}
        found = {
            cid: got[cid]
            for seed, cids in pools.values()
            for cid in cids
            if cid in spelt and got[cid].doc_id != seed.doc_id and names(spelt[cid], seed.title)
        }
        if not found:
            return []
        scored = dict(
            self.index.bm25(query, principal, len(found), filters=params.filters, restrict=list(found))
        )
        order = sorted(found, key=lambda cid: -scored.get(cid, 0.0))  # stable: pool order breaks ties
        out: list[tuple[int, Chunk]] = []
        docs: set[str] = set()
        for cid in order:
            if found[cid].doc_id not in docs:
                docs.add(found[cid].doc_id)
                out.append((cid, found[cid]))
        return out

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
                cos = self.index.cosine(vector, need)
                lists["dense"] = lists["dense"] + [(k, cos[k]) for k in need if k in cos]


def _weights(params: SearchParams) -> dict[str, float]:
    """The retrievers to run and their fusion weights: the known ones with a weight above 0."""
    unknown = set(params.weights) - {r.value for r in Retriever}
    if unknown:
        raise invalid(f"unknown retriever(s) {sorted(unknown)} in weights; use bm25 and/or dense")
    weights = {k: w for k, w in params.weights.items() if w > 0}
    if not weights:
        raise invalid("every retriever weight is 0; give bm25 or dense a weight > 0")
    return weights
