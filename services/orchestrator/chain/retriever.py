"""Chain-of-retrieval for Complex queries: beam search over retrieval chains (CoRAG, papers.md §5).

Step 1 searches the question; each of its best ``B`` results starts a beam (so a wrong top-1 does not
doom the chain). Every later step asks the proposer for next sub-queries of every live beam, spends
``B`` retrieval calls on the best (beam score + proposal prior), and each call extends its beam by the
best passage it found that the beam does not hold yet (the hop's *lead*). A chain's score is

    (1 - w) * coverage + w * relevance

where ``coverage`` is the share of the question's content terms the leads contain and ``relevance``
the mean cross-encoder probability (sigmoid of the rerank logit; the fused score without a reranker)
of each lead for the query that found it. Work is bounded whatever the input: at most
``1 + B * (max_steps - 1)`` calls. The search stops early when step 1's top two already cover the
question's terms (``stop_score``; single-fact and comparison questions usually do), its top two stand apart from the
rest (``apart_ratio``) or it holds the two documents the question names by title, when the best
chain reaches ``stop_score``, when a step raises no chain's coverage (it found nothing the question
asked for), when no beam gains a new lead, or when no proposal's prior reaches ``min_prior`` (a weak
guess is not worth a retrieval call).

The result keeps step 1's ranking as its backbone: the best chain's leads that add question terms
(greedily, by the terms each adds) and that the cross-encoder backs for the sub-query that found them
come first, then step 1's results in their order, then the other leads, then the hops' other results
round-robin, deduplicated by chunk. A question routed Complex that one search answers (a long question
of any corpus) so loses at most the few backed leads' places, never step 1's order to a hop's context
(issue 34, point 6: on CISI and CACM the old merge, hops' context before step 1's rest, cost 0.06–0.07
nDCG@10; docs/journal/2026-11-27-routed-merge-and-plans.md). Then titles reorder it
(``named_titles``): two documents the question names ("Were Skin Yard and Ostava …") go first, a page
linked by title to the top one comes second when the top two are not linked, and the pages the top two
name come right behind them.

The title rules (that reordering, and the ``named`` stop) are for corpora whose documents name each
other by title: the orchestrator turns them off (``titles=False``) for a tenant of the generic corpus
profile, where a title a passage spells says nothing about which page comes next
(docs/corpus-profiles.md). The proposer's ``link`` sub-queries stay either way: they only propose a
search, and a title no passage spells proposes none.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from services.common.query_text import check_query, has_words
from services.common.tracing import content_attributes, stage_span
from services.common.types import ScoredChunk
from services.common.words import terms
from services.orchestrator.chain.config import ChainSettings
from services.orchestrator.chain.named_titles import linked_next, linked_second, named_first, named_pair
from services.orchestrator.chain.subqueries import (
    HeuristicProposer,
    Proposal,
    Proposer,
    coverage,
    passage_text,
)
from services.orchestrator.plan import Searcher
from services.retrieval.hybrid import SearchOutcome

POOL_DEPTH = 30  # step-1 results whose titles count as link targets (the reranked head)
# a later hop's lead moves step 1's results down only when the cross-encoder gives it at least this
# probability for the sub-query that found it (the same bar at which a lead counts fully in a chain's score)
BACKED = 0.5
APART_DEPTH = 5  # results whose score spread the "stand apart" stop compares the top two's lead with


@dataclass(frozen=True)
class Hop:
    """One retrieval of a chain: its sub-query, where it sits, what it found, the chain's score after it."""

    sub_query: str
    step: int
    beam: int
    chunk_ids: list[str]
    score: float
    kind: str = "question"  # question | link | span | question-entity | terms | llm


@dataclass
class ChainResult:
    hits: list[ScoredChunk]
    hops: list[Hop]  # the best chain's hops, in order
    score: float
    calls: int  # retrieval calls spent, over all beams
    steps: int
    # covered | apart | named | score | max_steps | no_gain | no_new_evidence | no_proposals | empty
    stopped: str
    explored: list[Hop] = field(default_factory=list)  # every hop tried, for the trace and debugging
    degraded: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class _Beam:
    index: int
    hops: tuple[Hop, ...]
    hop_hits: tuple[tuple[ScoredChunk, ...], ...]
    leads: tuple[ScoredChunk, ...]
    relevances: tuple[float, ...]
    coverage: float
    score: float
    origin: int  # step-1 rank of the first lead

    @property
    def asked(self) -> list[str]:
        return [h.sub_query for h in self.hops] + [h.chunk.title for h in self.leads]


def relevance(hit: ScoredChunk) -> float:
    """The cross-encoder's probability that ``hit`` answers the query that found it, in [0, 1]."""
    logit = hit.scores.get("rerank")
    if logit is not None and math.isfinite(logit):
        return 1.0 / (1.0 + math.exp(-max(-50.0, min(50.0, logit))))
    return max(0.0, min(1.0, hit.fused))


def stand_apart(hits: Sequence[ScoredChunk], ratio: float) -> bool:
    """Whether the top two results lead the rest clearly: the 2nd-to-3rd score gap is at least ``ratio``
    of the 1st-to-5th spread. Step 1 then already holds the pair a two-passage answer needs, and a hop
    would spend a call to move nothing into the top two. A share of the spread, not a raw gap, so the
    rule reads the same on any score scale (fused blend, logits, first-stage scores)."""
    if len(hits) < APART_DEPTH:
        return False
    spread = hits[0].fused - hits[APART_DEPTH - 1].fused
    return spread > 0 and hits[1].fused - hits[2].fused >= ratio * spread


class _Calls:
    """One question's retrieval calls, memoised by normalised sub-query (a repeat costs nothing), with
    the degradations they reported, every hop tried, and the pool of results whose titles a proposer
    may link to."""

    def __init__(self, searcher: Searcher, trace_content: bool) -> None:
        self.searcher = searcher
        self.trace_content = trace_content
        self.memo: dict[str, SearchOutcome] = {}
        self.degraded: list[str] = []
        self.explored: list[Hop] = []
        self.pool: list[ScoredChunk] = []
        self.pooled: set[str] = set()

    @property
    def count(self) -> int:
        """Retrieval calls spent (distinct sub-queries)."""
        return len(self.memo)

    def search(self, query: str, step: int, beam: int) -> SearchOutcome:
        key = " ".join(query.lower().split())
        with stage_span(
            "rampart.chain.hop",
            step=step,
            beam=beam,
            cached=key in self.memo,
            **content_attributes(self.trace_content, sub_query=query),
        ) as span:
            if key not in self.memo:
                self.memo[key] = self.searcher(query)
                self.degraded.extend(d for d in self.memo[key].degraded if d not in self.degraded)
            span.set_attribute("hits", len(self.memo[key].hits))
            return self.memo[key]

    def pool_from(self, first: Sequence[ScoredChunk]) -> None:
        """Start the pool with step 1's reranked head."""
        self.pool = list(first[:POOL_DEPTH])
        self.pooled = {h.chunk.chunk_id for h in self.pool}

    def add_to_pool(self, hits: Sequence[ScoredChunk]) -> None:
        """Add a hop's head results the pool does not hold yet."""
        for h in hits[:POOL_DEPTH]:
            if h.chunk.chunk_id not in self.pooled:
                self.pooled.add(h.chunk.chunk_id)
                self.pool.append(h)


def _gained(grown: Sequence[_Beam], parents: Sequence[_Beam]) -> bool:
    """Whether some grown chain covers more of the question than the chain it grew from."""
    return any(
        c.coverage > parent.coverage + 1e-9 for c in grown for parent in parents if parent.hops == c.hops[:-1]
    )


class ChainRetriever:
    """Beam search over retrieval chains; one instance serves many queries (it keeps no state)."""

    def __init__(
        self,
        searcher: Searcher,
        settings: ChainSettings,
        proposer: Proposer | None = None,
        *,
        trace_content: bool = False,
        titles: bool = True,
    ) -> None:
        """``titles``: order by the documents the question and the passages name, and stop when the
        question's two named pages are in (the linked corpus profile; the orchestrator decides)."""
        self.searcher = searcher
        self.settings = settings
        self.proposer = proposer or HeuristicProposer()
        self.trace_content = trace_content
        self.titles = titles

    def max_calls(self) -> int:
        s = self.settings
        return 1 + s.beam_width * (s.max_steps - 1)

    def run(self, question: str) -> ChainResult:
        check_query(question)
        with stage_span(
            "rampart.chain",
            beam_width=self.settings.beam_width,
            max_steps=self.settings.max_steps,
            **content_attributes(self.trace_content, query=question),
        ) as span:
            result = self._run(question)
            span.set_attributes(
                {
                    "calls": result.calls,
                    "steps": result.steps,
                    "stopped": result.stopped,
                    "score": result.score,
                }
            )
            return result

    # ---- the search ------------------------------------------------------------------------------
    def _run(self, question: str) -> ChainResult:
        s = self.settings
        calls = _Calls(self.searcher, self.trace_content)
        first = calls.search(question, 1, 0).hits
        if not first:
            return ChainResult([], [], 0.0, calls.count, 1, "empty", calls.explored, calls.degraded)
        calls.pool_from(first)
        beams = self._first_beams(question, first)
        calls.explored += [b.hops[-1] for b in beams]
        finished: list[_Beam] = []
        step = 1
        stopped = self._settled_at_step_one(question, first) or "max_steps"
        if stopped != "max_steps":
            beams = beams[:1]
        while stopped == "max_steps":
            best = max(beams + finished, key=lambda b: b.score)
            if best.score >= s.stop_score:
                stopped = "score"
                break
            if step >= s.max_steps:
                break
            step += 1
            candidates = self._candidates(question, beams, calls.pool)
            if not candidates:
                stopped = "no_proposals"
                break
            grown = self._grow(question, candidates, step, calls)
            if not grown:
                stopped = "no_new_evidence"
                break
            gained = _gained(grown, beams)
            finished = sorted(finished + beams, key=lambda b: -b.score)[: s.beam_width]
            beams = sorted(grown, key=lambda b: -b.score)[: s.beam_width]
            if not gained:
                stopped = "no_gain"
                break
        # ties: the chain that starts from the better step-1 result, then the longer one
        best = max(beams + finished, key=lambda b: (b.score, -b.origin, len(b.leads)))
        return ChainResult(
            hits=_ranked(question, best, first, titles=self.titles),
            hops=list(best.hops),
            score=best.score,
            calls=calls.count,
            steps=step,
            stopped=stopped,
            explored=calls.explored,
            degraded=calls.degraded,
        )

    def _first_beams(self, question: str, first: Sequence[ScoredChunk]) -> list[_Beam]:
        """Step 1: each of the best ``beam_width`` results leads a beam of its own, with the rest of the
        top ``hop_k`` as its context (so a wrong top-1 does not doom the chain)."""
        s = self.settings
        beams: list[_Beam] = []
        for i, lead in enumerate(first[: s.beam_width]):
            hits = (lead, *[h for h in first[: s.hop_k] if h.chunk.chunk_id != lead.chunk.chunk_id])
            hop = Hop(question, 1, i, [h.chunk.chunk_id for h in hits], 0.0)
            beams.append(self._extend(None, i, question, hop, hits, relevance(lead)))
        return beams

    def _settled_at_step_one(self, question: str, first: Sequence[ScoredChunk]) -> str | None:
        """Why step 1 already holds the answer (``covered``, ``apart``, ``named``), or None to go on."""
        s = self.settings
        # The top two hold every question term and both look relevant: a two-passage answer is there.
        if coverage(question, first[:2]) >= s.stop_score and all(relevance(h) >= 0.5 for h in first[:2]):
            return "covered"
        if s.apart_ratio is not None and stand_apart(first, s.apart_ratio):
            return "apart"
        if self.titles and named_pair(question, first) is not None:
            return "named"
        return None

    def _candidates(
        self, question: str, beams: Sequence[_Beam], pool: Sequence[ScoredChunk]
    ) -> list[tuple[float, _Beam, Proposal]]:
        """Every live beam's proposals worth a call (prior at least ``min_prior``, words to search),
        best first by beam score + proposal prior."""
        s = self.settings
        candidates: list[tuple[float, _Beam, Proposal]] = []
        for beam in beams:
            proposals = self.proposer.propose(
                question, beam.leads, pool, limit=s.beam_width, exclude=beam.asked
            )
            candidates += [
                (beam.score + p.prior, beam, p)
                for p in proposals
                if p.prior >= s.min_prior and has_words(p.text)  # a wordless one cannot be searched
            ]
        candidates.sort(key=lambda c: -c[0])
        return candidates

    def _grow(
        self, question: str, candidates: Sequence[tuple[float, _Beam, Proposal]], step: int, calls: _Calls
    ) -> list[_Beam]:
        """One call for each of the best ``beam_width`` candidates; each call extends its beam by the
        best passage it found that is not a lead yet (none found: that beam does not grow)."""
        s = self.settings
        grown: list[_Beam] = []
        for _, beam, p in candidates[: s.beam_width]:
            outcome = calls.search(p.text, step, beam.index)
            # The hop's lead is its best passage that is not a lead yet (it may have been a lower
            # result of an earlier hop: the sub-query promotes it); the rest is context.
            leads = {h.chunk.chunk_id for h in beam.leads}
            new = tuple(h for h in outcome.hits if h.chunk.chunk_id not in leads)[: s.hop_k]
            calls.add_to_pool(outcome.hits)
            if not new:
                continue
            hop = Hop(p.text, step, len(grown), [h.chunk.chunk_id for h in new], 0.0, p.kind)
            child = self._extend(beam, len(grown), question, hop, new, relevance(new[0]))
            calls.explored.append(child.hops[-1])
            grown.append(child)
        return grown

    def _extend(
        self,
        parent: _Beam | None,
        index: int,
        question: str,
        hop: Hop,
        hits: Sequence[ScoredChunk],
        rel: float,
    ) -> _Beam:
        leads = (*(parent.leads if parent else ()), hits[0])
        relevances = (*(parent.relevances if parent else ()), rel)
        cov = coverage(question, leads)
        w = self.settings.relevance_weight
        # A lead the cross-encoder finds relevant (p >= 0.5) counts fully: a useful extra hop must not
        # lower the chain's score, an off-topic one does.
        support = sum(min(1.0, r / BACKED) for r in relevances) / len(relevances)
        score = round((1.0 - w) * cov + w * support, 6)
        done = Hop(hop.sub_query, hop.step, index, hop.chunk_ids, score, hop.kind)
        return _Beam(
            index=index,
            hops=(*(parent.hops if parent else ()), done),
            hop_hits=(*(parent.hop_hits if parent else ()), tuple(hits)),
            leads=leads,
            relevances=relevances,
            coverage=cov,
            score=score,
            origin=parent.origin if parent else index,
        )


def _cover_order(question: str, leads: Sequence[ScoredChunk]) -> tuple[list[ScoredChunk], list[ScoredChunk]]:
    """Leads greedily by how many still-uncovered question terms each adds (ties: hop order), and the
    leads that add none (a near-miss of step 1 that a later hop made redundant, or a hop that found
    nothing the question asks), in hop order."""
    wanted = set(terms(question))
    have: set[str] = set()
    left = list(leads)
    out: list[ScoredChunk] = []
    while left:
        gains = [len((wanted & set(terms(passage_text(h)))) - have) for h in left]
        i = max(range(len(left)), key=lambda j: (gains[j], -j))
        if gains[i] == 0:
            break
        have |= wanted & set(terms(passage_text(left[i])))
        out.append(left.pop(i))
    return out, left


def _ranked(
    question: str, beam: _Beam, first: Sequence[ScoredChunk], *, titles: bool = True
) -> list[ScoredChunk]:
    """The leads that add question terms, in greedy coverage order, except later leads the
    cross-encoder finds weak (:data:`BACKED`; without a reranker nothing says so, and leads keep their
    place); then step 1's results; then the other leads and the hops' other results round-robin; one
    entry per chunk; then, with ``titles``, titles decide (``named_titles``): the two documents the
    question names go first, if it names two; else a page linked by title to the top one goes second,
    if the top two are not linked; then the pages the top two name come right behind them.

    ``fused`` is rewritten to a descending rank score so consumers that sort by it keep this order.
    """
    weak = {
        h.chunk.chunk_id
        for h, r in zip(beam.leads[1:], beam.relevances[1:], strict=True)
        if "rerank" in h.scores and r < BACKED
    }
    gainers, idle = _cover_order(question, beam.leads)
    order = [h for h in gainers if h.chunk.chunk_id not in weak]
    order += list(first)
    order += [h for h in gainers if h.chunk.chunk_id in weak] + idle
    depth = max(len(h) for h in beam.hop_hits)
    order += [hits[r] for r in range(1, depth) for hits in beam.hop_hits if r < len(hits)]
    seen: set[str] = set()
    out: list[ScoredChunk] = []
    for hit in order:
        if hit.chunk.chunk_id in seen:
            continue
        seen.add(hit.chunk.chunk_id)
        out.append(hit)
    if titles:
        out = linked_next(question, linked_second(question, named_first(question, out)))
    n = len(out)
    return [h.model_copy(update={"fused": float(n - i)}) for i, h in enumerate(out)]
