"""The adaptive pipeline (issue 5): route → rewrite → retrieve (one shot or a chain) → grade and
correct → fact-check → answer, for one request of one principal.

The same object serves the embedded gateway, ``rampart eval`` (pipeline ``routed``) and the Ray Serve
deployment; it only talks to stages through their Protocols, so remote stages slot in (issue 6).
Work is bounded whatever the input: the history is cut to ``sessions.max_turns``, chains stop at
``chain.max_steps``, a slow secondary source degrades to primary results only.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace

from services.common.query_text import check_query
from services.common.settings import RampartSettings
from services.common.tracing import content_attributes, stage_span
from services.common.types import Principal, ScoredChunk, SearchFilters
from services.orchestrator.answer import Answer, ContextPassage, ExtractiveAnswerer, LlmAnswerer
from services.orchestrator.chain.config import ChainSettings
from services.orchestrator.chain.named_titles import LINK_DEPTH
from services.orchestrator.chain.pair_order import (
    PROMOTE_DEPTH,
    PairModel,
    doc_heads,
    order_pairs,
    question_logits,
)
from services.orchestrator.chain.retriever import ChainResult, ChainRetriever
from services.orchestrator.chain.subqueries import Proposer
from services.orchestrator.conversation.entities import mentions
from services.orchestrator.conversation.fact_graph import FactGraph
from services.orchestrator.conversation.rewrite import ConversationalRewriter, Rewrite
from services.orchestrator.conversation.sessions import Session, SessionStore, Turn, new_session
from services.orchestrator.corrective.retrieval import CorrectiveResult, CorrectiveRetrieval
from services.orchestrator.plan import Complexity, Grade, QueryType, Route
from services.orchestrator.routing.config import RoutePlan
from services.orchestrator.routing.router import QueryRouter
from services.orchestrator.search import SearchPipeline
from services.retrieval.hybrid import SearchOutcome, SearchParams

RESULT_ENTITY_HITS = 3  # top results whose entities join the session's fact graph


@dataclass(frozen=True)
class Ask:
    """One request to the orchestrator (the gateway's /v1/search adaptive mode and /v1/answer)."""

    query: str
    top_k: int = 10
    session_id: str | None = None
    history: tuple[str, ...] = ()
    filters: SearchFilters | None = None
    answer: bool = False
    remember: bool = True  # start a session when none is given (evaluation: no)


@dataclass
class Orchestrated:
    query: str
    route: Route
    rewrite: Rewrite
    outcome: SearchOutcome
    calls: int  # retrieval calls spent (chain hops and corrective searches included)
    session_id: str | None
    chain: ChainResult | None = None
    corrective: CorrectiveResult | None = None
    answer: Answer | None = None
    context: list[ContextPassage] = field(default_factory=list)  # what the answer was drawn from
    retrieval_skipped: bool = False
    timings_ms: dict[str, float] = field(default_factory=dict)

    @property
    def searched(self) -> str:
        """The query actually searched (rewritten for Conversational turns)."""
        return self.rewrite.query


def plan_chain(chain: ChainSettings, plan: RoutePlan) -> ChainSettings:
    """The chain settings for a Complex query of ``plan``'s complexity: its own step limit, if it has one
    and it is lower (``chain.max_steps`` bounds every chain: 1 turns hops off everywhere)."""
    if plan.chain_steps is None or plan.chain_steps >= chain.max_steps:
        return chain
    return chain.model_copy(update={"max_steps": plan.chain_steps})


def plan_weights(plan: RoutePlan) -> dict[str, float]:
    """A plan's fusion weights: BM25, dense and the knowledge graph's (HyPA's three streams). A
    search whose index stores no graph, or whose query names nothing the graph knows, drops the
    graph's share and fuses the other two (the response says which, docs/graph.md)."""
    weights = {"bm25": plan.bm25_weight, "dense": plan.dense_weight}
    if plan.kg_weight > 0:
        weights["graph"] = plan.kg_weight
    if plan.bm25_weight + plan.dense_weight <= 0:
        weights.update(bm25=0.5, dense=0.5)
    return weights


def orders_pairs(route: Route) -> bool:
    """Whether the evidence-pair stage orders this route's results: Complex questions, and any the
    router gives medium or high complexity. A two-hop question the type head calls Simple gets one
    search, and its pair is then found only by the pair model (HotpotQA train half, every question
    forced to the Simple plan: all_supporting@2/@5 0.511/0.816 unordered, 0.860/0.960 with every route
    ordered, the pair model fitted on those questions); a single-fact question (low complexity)
    keeps the reranker's top two, which the pair model would spoil (NQ-open dev, every route ordered:
    all_supporting@2 0.956 -> 0.700; medium and high only: 0.956 -> 0.954); see :func:`pair_promote`."""
    return route.type is QueryType.COMPLEX or route.complexity is not Complexity.LOW


def pair_promote(route: Route, settings: ChainSettings) -> int | None:
    """How the pair stage treats a route: ``None`` orders it whole (:func:`orders_pairs`); for the
    others, how many documents it moves to just behind the reranker's top two
    (``chain.low_pair_promote``; 0: the route keeps the reranker's order)."""
    return None if orders_pairs(route) else settings.low_pair_promote


def pair_plan(
    route: Route, settings: ChainSettings, model: PairModel | None, linked: bool
) -> tuple[PairModel | None, int | None]:
    """The pair model for a route and how it treats it (:func:`pair_promote`), or no model: for a route
    promoting nothing, and for a generic corpus (``linked`` False). The model was fitted on documents
    that name each other (its ``links`` and ``qnamed`` features read titles) and a two-hop pair is
    what it finds; a corpus whose documents do not name each other gives it neither
    (docs/corpus-profiles.md)."""
    promote = pair_promote(route, settings)
    return (model if promote != 0 and linked else None), promote


class Orchestrator:
    def __init__(
        self,
        settings: RampartSettings,
        pipeline: SearchPipeline,
        rewriter: ConversationalRewriter,
        sessions: SessionStore,
        extractive: ExtractiveAnswerer,
        *,
        router: QueryRouter | None = None,
        corrective: CorrectiveRetrieval | None = None,
        proposer: Proposer | None = None,
        llm_answerer: LlmAnswerer | None = None,
        pairs: PairModel | None = None,
    ) -> None:
        self.settings = settings
        self.pipeline = pipeline
        self.rewriter = rewriter
        self.sessions = sessions
        self.extractive = extractive
        self.router = router
        self.corrective = corrective
        self.proposer = proposer
        self.llm_answerer = llm_answerer
        self.pairs = pairs

    # ---- the request ------------------------------------------------------------------------------
    def run(self, ask: Ask, principal: Principal) -> Orchestrated:
        check_query(ask.query)
        timings: dict[str, float] = {}
        trace = self.settings.trace_content
        with stage_span(
            "rampart.orchestrate", answer=ask.answer, **content_attributes(trace, query=ask.query)
        ) as span:
            session = self._session(ask, principal)
            history = list(ask.history) if ask.history else (session.history() if session else [])
            history = history[-self.settings.sessions.max_turns :]
            graph = session.graph if session is not None else _graph_of(history)

            t0 = time.perf_counter()
            route = self._route(ask.query, history)
            timings["route"] = _ms(t0)
            span.set_attributes(
                {
                    "route.type": route.type.value,
                    "route.complexity": route.complexity.value,
                    "route.confidence": route.confidence,
                }
            )

            rewrite = Rewrite(ask.query, "none")
            if route.type is QueryType.CONVERSATIONAL:
                t0 = time.perf_counter()
                with stage_span("rampart.rewrite") as rs:
                    rewrite = self.rewriter.rewrite(ask.query, history, graph)
                    rs.set_attributes(
                        {"method": rewrite.method, **content_attributes(trace, rewritten=rewrite.query)}
                    )
                timings["rewrite"] = _ms(t0)

            if ask.answer and route.type is QueryType.SIMPLE and self.llm_answerer is not None:
                done = self._direct(ask, route, rewrite, session, timings)
                if done is not None:
                    self._remember(session, ask.query, rewrite.query, route, [])
                    return done

            result = self._retrieve(ask, principal, route, rewrite, timings)
            if ask.answer:
                t0 = time.perf_counter()
                result.answer = self._answer(rewrite.query, result, route)
                timings["answer"] = _ms(t0)
            self._remember(session, ask.query, rewrite.query, route, result.outcome.hits)
            result.session_id = session.id if session is not None else None
            result.timings_ms = {**result.outcome.timings_ms, **timings}
            span.set_attributes(
                {
                    "calls": result.calls,
                    "results": len(result.outcome.hits),
                    "degraded": ",".join(result.outcome.degraded),
                }
            )
            return result

    def close(self) -> None:
        self.sessions.close()
        if self.corrective is not None:
            self.corrective.close()

    # ---- stages -----------------------------------------------------------------------------------
    def _session(self, ask: Ask, principal: Principal) -> Session | None:
        if ask.session_id:
            return self.sessions.load(principal, ask.session_id)
        if ask.history or not ask.remember:
            return None  # the caller keeps its own history, or wants none
        return new_session(principal)

    def _route(self, query: str, history: list[str]) -> Route:
        if self.router is None:
            kind = QueryType.CONVERSATIONAL if history else QueryType.SIMPLE
            return Route(kind, Complexity.MEDIUM, 1.0, reason="routing disabled: medium plan, one search")
        return self.router.classify(query, history)

    def _plan(self, route: Route) -> RoutePlan:
        return self.settings.routing.plans[route.complexity.value]

    def _params(self, ask: Ask, plan: RoutePlan, routed: bool) -> SearchParams:
        fc = self.pipeline.factcheck_options()
        top = max(ask.top_k, plan.context_k, fc.context_depth if fc.enabled else 0)
        if not routed:
            return self.pipeline.params(top_k=top, filters=ask.filters)
        return self.pipeline.params(
            top_k=top,
            weights=plan_weights(plan),
            candidates=plan.candidates,
            filters=ask.filters,
            graph_depth=max(plan.kg_depth, 1),
        )

    def _retrieve(
        self, ask: Ask, principal: Principal, route: Route, rewrite: Rewrite, timings: dict[str, float]
    ) -> Orchestrated:
        query = rewrite.query
        plan = self._plan(route)
        params = self._params(ask, plan, self.router is not None)
        rerank = self.pipeline.rerank_options()
        if route.type is QueryType.COMPLEX:
            # the chain orders each hop's evidence by title links itself (named_titles); a lifted ranking
            # would count every link twice (HotpotQA train half: all_supporting@5 0.938 -> 0.915 with both)
            rerank = replace(rerank, link_weight=0.0)
        # the tenant's corpus profile, once for every search below and the check after them
        params, rerank, fc = self.pipeline.profiled(
            principal, params, rerank, self.pipeline.factcheck_options()
        )
        linked = self.pipeline.linked(principal)
        pairs, promote = pair_plan(route, self.settings.chain, self.pairs, linked)
        # a promoting route reorders only the first PROMOTE_DEPTH: the check judges what it would anyway
        judge = max(fc.depth, ask.top_k, self.settings.chain.pair_depth if pairs and promote is None else 0)
        # the searches skip the check (it runs once, on the merged results) but fetch what it reads
        params = self.pipeline.for_check(params, fc, rerank, judge)
        no_check = replace(fc, enabled=False)
        calls = 0

        def searcher(q: str, p: SearchParams = params) -> SearchOutcome:
            nonlocal calls
            calls += 1
            return self.pipeline.search(q, principal, p, rerank, no_check)

        chain: ChainResult | None = None
        t0 = time.perf_counter()
        if route.type is QueryType.COMPLEX:
            # The chain's title rules read LINK_DEPTH documents of each search (named_titles), however
            # few results the answer needs: without the fact-check's peers a search asked for top_k only.
            deep = replace(params, top_k=max(params.top_k, LINK_DEPTH))
            chain = ChainRetriever(
                lambda q: searcher(q, deep),
                plan_chain(self.settings.chain, plan),
                self.proposer,
                trace_content=self.settings.trace_content,
                titles=linked,
            ).run(query)
            outcome = SearchOutcome(
                hits=chain.hits,
                timings_ms={},
                candidates={"chain_hops": len(chain.hops)},
                degraded=list(chain.degraded),
            )
        else:
            outcome = searcher(query)
        timings["retrieve"] = _ms(t0)

        corrective: CorrectiveResult | None = None
        if self.corrective is not None:
            t0 = time.perf_counter()
            corrective = self.corrective.run(query, principal, outcome, searcher, refine=False)
            outcome.hits = corrective.hits
            outcome.degraded += corrective.degraded
            timings["crag"] = _ms(t0)

        if fc.enabled:
            self.pipeline.check(query, outcome, fc, judge=judge)
        if pairs is not None:
            t0 = time.perf_counter()
            outcome.hits = self._order_pairs(query, outcome.hits, pairs, promote)
            timings["pairs"] = _ms(t0)
        outcome.hits = outcome.hits[: max(ask.top_k, plan.context_k)]
        return Orchestrated(
            query=ask.query,
            route=route,
            rewrite=rewrite,
            outcome=outcome,
            calls=calls,
            session_id=None,
            chain=chain,
            corrective=corrective,
        )

    def _order_pairs(
        self, query: str, hits: list[ScoredChunk], model: PairModel, promote: int | None = None
    ) -> list[ScoredChunk]:
        """The verified head with the pair most likely to answer a two-hop question first, or, with
        ``promote`` (:func:`pair_promote`), its likeliest partners behind the top two (``pair_order``);
        unchanged when the reranker is off or down (the model reads its scores)."""
        with stage_span("rampart.pairs") as span:
            depth = self.settings.chain.pair_depth if promote is None else PROMOTE_DEPTH
            heads = doc_heads(hits, depth)
            logits = None
            if self.pipeline.rerank_options().enabled and len(heads) >= 3:
                logits = question_logits(self.pipeline.rerank, query, hits, heads)
            span.set_attributes({"documents": len(heads), "ordered": logits is not None})
            return hits if logits is None else order_pairs(query, hits, logits, model, depth, promote)

    def _context(self, query: str, result: Orchestrated, route: Route) -> list[ContextPassage]:
        """The verified context: the plan's ``context_k`` results that passed the fact-check, refined
        into their best strips (CRAG) when grading is on. Refining only what passed keeps the strip
        budget for the passages the answer reads."""
        kept = result.outcome.hits[: self._plan(route).context_k]
        if self.corrective is None or result.corrective is None or not kept:
            return [_passage(h, h.chunk.text) for h in kept]
        crag = result.corrective
        origin = dict(zip((h.chunk.chunk_id for h in crag.hits), crag.origins, strict=True))
        refined = self.corrective.refiner.refine(
            query, kept, [origin.get(h.chunk.chunk_id, "primary") for h in kept]
        )
        if not refined.strips:
            return [_passage(h, h.chunk.text) for h in kept]
        crag.refined = refined
        by_id = {h.chunk.chunk_id: h for h in kept}
        return [_passage(by_id[g[0].chunk_id], " ".join(x.text for x in g)) for g in refined.groups()]

    def _answer(self, query: str, result: Orchestrated, route: Route) -> Answer:
        context = result.context = self._context(query, result, route)
        caution = self._caution(result) if context else None
        if self.llm_answerer is not None:
            got = self.llm_answerer.answer(query, context)
            if got is not None:
                return got.model_copy(update={"caution": caution})
            if context:
                result.outcome.degraded.append("llm")
        answer = self.extractive.answer(query, context)
        return answer.model_copy(update={"caution": caution}) if answer.text else answer

    def _caution(self, result: Orchestrated) -> str | None:
        crag = result.corrective
        if crag is not None and crag.grade is Grade.INCORRECT and all(o == "primary" for o in crag.origins):
            return (
                "retrieval was graded incorrect: no passage clearly answers the question, and no other "
                "source added any (see adaptive.grade)"
            )
        if "factcheck" in result.outcome.degraded:
            return "the fact-check did not run (see degraded): the passages are unverified"
        if result.outcome.fallback:
            return (
                f"fewer than {self.settings.factcheck.min_keep} passages passed the fact-check; the "
                "answer also reads passages it did not judge relevant"
            )
        return None

    def _direct(
        self, ask: Ask, route: Route, rewrite: Rewrite, session: Session | None, timings: dict[str, float]
    ) -> Orchestrated | None:
        """Simple route with an LLM: answer without retrieval (AdaptiveRAG), flagged in the response."""
        assert self.llm_answerer is not None
        t0 = time.perf_counter()
        answer = self.llm_answerer.direct(ask.query)
        timings["answer"] = _ms(t0)
        if answer is None:
            return None  # the model is down: retrieve and answer extractively instead
        return Orchestrated(
            query=ask.query,
            route=route,
            rewrite=rewrite,
            outcome=SearchOutcome(hits=[], timings_ms={}, candidates={}),
            calls=0,
            session_id=session.id if session is not None else None,
            answer=answer,
            retrieval_skipped=True,
            timings_ms=timings,
        )

    def _remember(
        self, session: Session | None, query: str, searched: str, route: Route, hits: list[ScoredChunk]
    ) -> None:
        if session is None:
            return
        found: list[str] = []
        for h in hits[:RESULT_ENTITY_HITS]:
            found += ([h.chunk.title] if h.chunk.title else []) + mentions(h.chunk.text[:600])
        session.graph.update(mentions(searched), found)
        session.add_turn(
            Turn(query=query, rewritten=searched, route=route.type.value), self.settings.sessions.max_turns
        )
        self.sessions.save(session)


def _graph_of(history: list[str]) -> FactGraph:
    """A fact graph from an explicit history (no session): its queries' entities, turn by turn."""
    g = FactGraph()
    for q in history:
        g.update(mentions(q), [])
    return g


def _passage(hit: ScoredChunk, text: str) -> ContextPassage:
    c = hit.chunk
    return ContextPassage(doc_id=c.doc_id, chunk_id=c.chunk_id, title=c.title, source=c.source, text=text)


def _ms(t0: float) -> float:
    return (time.perf_counter() - t0) * 1000
