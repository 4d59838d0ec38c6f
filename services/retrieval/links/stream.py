"""The link stream: pages the top results name by title, and pages that name them, join the head.

A two-hop question's second page is named by its first ("… signed to Sub Pop", and a page is titled
*Sub Pop*), or names it; neither retriever may rank it high, since it shares few words with the
question. The stream puts such pages where the reranker reads them, as candidates, never as a
replacement for what both retrievers found (docs/retrieval.md, "Pages the top results name").
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from services.common.titles import name_key, names, spelled
from services.common.types import Chunk, Principal, SearchFilters
from services.retrieval.fusion import Fused
from services.retrieval.index import SearchIndex
from services.retrieval.links.options import LinkOptions
from services.retrieval.links.reads import link_reads

# Pages named by the seeds take at most this share of the head: they are candidates for the reranker,
# not a replacement for what both retrievers found.
LINK_SHARE = 0.25
LINK_SCORE = "link"  # ``ScoredChunk.scores`` key of a page that joined the head by being named
BACKLINK_SCORE = "backlink"  # ... and of a page that joined it by naming a seed
LINK_SCORES = (LINK_SCORE, BACKLINK_SCORE)
# Chunks read per seed when looking for pages that name it: its name's words (twice) and the query's
# ranked by BM25, then only those that spell the name are kept.
BACKLINK_POOL = 50


class LinkStream:
    """The stream over one index: its BM25 and chunk reads, and linking's ``named`` read."""

    def __init__(self, index: SearchIndex) -> None:
        self.index = index

    def apply(
        self,
        query: str,
        fused: list[Fused],
        chunks: dict[int, Chunk],
        principal: Principal,
        options: LinkOptions,
        *,
        top_k: int,
        filters: SearchFilters | None,
        lists: dict[str, list[tuple[int, float]]],
        fill: Callable[[Sequence[int]], None] | None,
    ) -> list[Fused]:
        """``fused`` with the pages its top ``options.seeds`` name and its head lacks placed at the end
        of the head (the first ``options.head`` results, default ``top_k``), then at most
        ``options.backlinks`` pages that name those seeds, pushing the rest down; ``chunks``
        (``fused``'s chunks) gains theirs.

        A page ranked below the head moves up; each joins with the fused score of the place it takes,
        ``LINK_SCORE`` (or ``BACKLINK_SCORE``) = 1.0 in ``lists`` and, with ``fill`` (the search's
        fill-in of missing scores), its exact scores from the retrievers in ``lists``: the reranker,
        which reads the head, decides where it belongs. Together they take at most ``LINK_SHARE`` of
        the head; a page naming a seed keeps its place before the seeds' named pages fill the rest.
        """
        n = min(len(fused), options.head or top_k)
        room = max(1, int(n * LINK_SHARE)) if n > 1 else 0
        seeds = [chunks[f.key] for f in fused[: min(options.seeds, n)] if f.key in chunks]
        if not room or not seeds:
            return fused
        have = {chunks[f.key].doc_id for f in fused[:n] if f.key in chunks}
        back = self._naming(query, seeds, principal, options, filters, have)[: min(options.backlinks, room)]
        taken = have | {c.doc_id for _, c in back}
        named = link_reads(self.index).named(
            [c.text for c in seeds], principal, room + len(have), filters=filters
        )
        docs = self.index.chunks([cid for cid, _ in named], principal)
        forward = [cid for cid, _ in named if cid in docs and docs[cid].doc_id not in taken][
            : room - len(back)
        ]
        new = forward + [cid for cid, _ in back]
        if not new:
            return fused
        chunks.update((cid, docs[cid]) for cid in forward)
        chunks.update(back)
        at = n - len(new)
        if fill is not None:
            fill(new)
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
        options: LinkOptions,
        filters: SearchFilters | None,
        skip: set[str],
    ) -> list[tuple[int, Chunk]]:
        """Readable chunks, one per document not in ``skip``, whose text spells a seed's title (see
        ``titles.names``), best for ``query`` by BM25 first: the pages that link *to* the seeds.

        A seed whose title the query spells out is not followed (every page retrieved for that name
        mentions it). Per seed, one BM25 search for its name's words (counted twice) and the query's
        words reads ``BACKLINK_POOL`` chunks; only those spelling the name are kept. Bounded: at most
        ``options.seeds`` searches, one read of their chunks, then one BM25 scoring of the kept ones."""
        if options.backlinks <= 0:
            return []
        asked = spelled(query)
        pools: dict[str, tuple[Chunk, list[int]]] = {}  # name -> (its seed, chunks read for it)
        for seed in seeds:
            key = name_key(seed.title)
            if key is None or key in pools or names(asked, seed.title):
                continue
            pool = self.index.bm25(f"{key} {key} {query}", principal, BACKLINK_POOL, filters=filters)
            pools[key] = (seed, [cid for cid, _ in pool])
        got = self.index.chunks(
            list(dict.fromkeys(cid for _, cids in pools.values() for cid in cids)), principal
        )
        spelt = {cid: spelled(c.text) for cid, c in got.items() if c.doc_id not in skip}
        found = {
            cid: got[cid]
            for seed, cids in pools.values()
            for cid in cids
            if cid in spelt and got[cid].doc_id != seed.doc_id and names(spelt[cid], seed.title)
        }
        if not found:
            return []
        scored = dict(self.index.bm25(query, principal, len(found), filters=filters, restrict=list(found)))
        order = sorted(found, key=lambda cid: -scored.get(cid, 0.0))  # stable: pool order breaks ties
        out: list[tuple[int, Chunk]] = []
        docs: set[str] = set()
        for cid in order:
            if found[cid].doc_id not in docs:
                docs.add(found[cid].doc_id)
                out.append((cid, found[cid]))
        return out
