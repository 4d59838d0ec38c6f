"""Chain-of-retrieval: the heuristic sub-query proposer and the beam search, over a tiny two-hop corpus
searched by an in-memory term-overlap searcher (no I/O), plus bounded-work cases."""

from __future__ import annotations

import itertools
from collections.abc import Callable

import pytest

from services.common.errors import RampartError
from services.common.settings import RampartSettings
from services.common.types import Chunk, ScoredChunk
from services.common.words import terms
from services.orchestrator.chain.config import ChainSettings
from services.orchestrator.chain.retriever import ChainRetriever, relevance, stand_apart
from services.orchestrator.chain.subqueries import (
    HeuristicProposer,
    Proposer,
    coverage,
    parse_queries,
    unresolved_words,
)
from services.orchestrator.orchestrator import plan_chain
from services.retrieval.hybrid import SearchOutcome
from tests.contracts.proposer import ProposerContract

CORPUS = {
    "kiss": (
        "Kiss and Tell (1945 film)",
        "Kiss and Tell is a 1945 American comedy film starring Shirley Temple as Corliss Archer.",
    ),
    "temple": (
        "Shirley Temple",
        "Shirley Temple Black was an actress who later held the government position of United States "
        "ambassador to Ghana.",
    ),
    "sequel": (
        "A Kiss for Corliss",
        "A Kiss for Corliss is a 1949 film in which Corliss Archer returns.",
    ),
    "radio": ("Meet Corliss Archer", "Meet Corliss Archer was a radio comedy about a teenage girl."),
    "derrickson": ("Scott Derrickson", "Scott Derrickson is an American director of horror films."),
    "wood": ("Ed Wood", "Edward Davis Wood Jr. was an American filmmaker and actor."),
    "woodstock": ("Woodstock", "Woodstock was a music festival held in 1969 in New York."),
}

BRIDGE = "What government position was held by the woman who portrayed Corliss Archer in Kiss and Tell?"
COMPARISON = "Were Scott Derrickson and Ed Wood of the same nationality?"


def hit(doc_id: str, score: float, title: str, text: str) -> ScoredChunk:
    chunk = Chunk(chunk_id=f"{doc_id}#0", doc_id=doc_id, tenant="t", ordinal=0, title=title, text=text)
    return ScoredChunk(chunk=chunk, scores={"bm25": score}, fused=score)


class OverlapSearcher:
    """Ranks passages by the share of the query's terms they contain; counts its calls."""

    def __init__(self, corpus: dict[str, tuple[str, str]] = CORPUS) -> None:
        self.corpus = corpus
        self.queries: list[str] = []

    def __call__(self, query: str) -> SearchOutcome:
        self.queries.append(query)
        wanted = set(terms(query))
        scored = []
        for doc_id, (title, text) in self.corpus.items():
            got = set(terms(f"{title} {text}"))
            share = len(wanted & got) / max(len(wanted), 1)
            if share > 0:
                scored.append(hit(doc_id, round(share, 6), title, text))
        scored.sort(key=lambda h: (-h.fused, h.chunk.doc_id))
        return SearchOutcome(hits=scored, timings_ms={}, candidates={})


def doc_ids(hits: list[ScoredChunk]) -> list[str]:
    return [h.chunk.doc_id for h in hits]


# ---- proposer ---------------------------------------------------------------------------------------


def test_unresolved_words_are_the_question_terms_no_evidence_holds() -> None:
    kiss = hit("kiss", 1.0, *CORPUS["kiss"])
    assert unresolved_words(BRIDGE, [kiss]) == ["government", "position", "held", "woman", "portrayed"]
    assert coverage(BRIDGE, [kiss]) == pytest.approx(4 / 9)  # corlis, archer, kiss, tell of 9 terms
    assert coverage("the of and", [kiss]) == 1.0  # nothing to cover


def test_bridge_link_to_a_retrieved_title_is_the_best_proposal() -> None:
    pool = OverlapSearcher()(BRIDGE).hits
    kiss = next(h for h in pool if h.chunk.doc_id == "kiss")
    proposals = HeuristicProposer().propose(BRIDGE, [kiss], pool, limit=3)
    assert proposals[0].bridge == "Shirley Temple"
    assert proposals[0].kind == "link"
    # the sub-query asks the bridge for what the question still lacks
    assert proposals[0].text.startswith("Shirley Temple government position held")


def test_uncovered_question_entity_is_proposed_first() -> None:
    derrickson = hit("derrickson", 1.0, *CORPUS["derrickson"])
    proposals = HeuristicProposer().propose(COMPARISON, [derrickson], [derrickson], limit=2)
    assert proposals[0].kind == "question-entity"
    assert proposals[0].text == "Ed Wood nationality"


class TestHeuristicProposer(ProposerContract):
    @pytest.fixture()
    def proposer(self) -> Proposer:
        return HeuristicProposer()


def test_no_evidence_proposes_nothing() -> None:
    # no budget (limit 0): ProposerContract
    kiss = hit("kiss", 1.0, *CORPUS["kiss"])
    assert HeuristicProposer().propose(BRIDGE, [], [kiss], limit=3) == []


def test_llm_reply_parsing_is_strict() -> None:
    assert parse_queries('Sure! {"queries": ["Shirley Temple career", " Ed  Wood "]}', 4) == [
        "Shirley Temple career",
        "Ed Wood",
    ]
    assert parse_queries('{"queries": "Shirley Temple"}', 4) is None  # not a list
    assert parse_queries('{"queries": [1, 2]}', 4) is None
    assert parse_queries('{"queries": []}', 4) is None
    assert parse_queries("no json here", 4) is None
    # a sub-query without words cannot be searched (the retriever refuses it): dropped, not sent
    assert parse_queries('{"queries": ["?", "...", "Ed Wood"]}', 4) == ["Ed Wood"]
    assert parse_queries('{"queries": ["?!"]}', 4) is None
    long = parse_queries('{"queries": ["' + "word " * 50 + '"]}', 4)
    assert long is not None and len(long[0].split()) == 16


# ---- beam search ------------------------------------------------------------------------------------


def test_chain_puts_the_bridge_passage_second_in_two_calls() -> None:
    searcher = OverlapSearcher()
    single = doc_ids(searcher(BRIDGE).hits)
    assert single[:2] != ["kiss", "temple"] and "temple" in single  # the one-shot order misses it
    searcher.queries.clear()
    result = ChainRetriever(searcher, ChainSettings(beam_width=1, min_prior=0.4)).run(BRIDGE)
    assert doc_ids(result.hits)[:2] == ["kiss", "temple"]
    assert result.calls == 2 == len(searcher.queries)
    assert [h.step for h in result.hops] == [1, 2]
    assert result.hops[1].sub_query.startswith("Shirley Temple")
    assert result.hops[1].chunk_ids[0] == "temple#0"
    # every passage once, every step-1 result kept, scores descending
    assert len(doc_ids(result.hits)) == len(set(doc_ids(result.hits)))
    assert set(single) <= set(doc_ids(result.hits))
    assert [h.fused for h in result.hits] == sorted((h.fused for h in result.hits), reverse=True)


def test_comparison_fetches_the_other_entity() -> None:
    result = ChainRetriever(OverlapSearcher(), ChainSettings(beam_width=2)).run(COMPARISON)
    assert set(doc_ids(result.hits)[:2]) == {"derrickson", "wood"}
    assert result.calls <= 1 + 2 * 4


def test_covered_question_stops_after_one_call() -> None:
    searcher = OverlapSearcher()
    result = ChainRetriever(searcher, ChainSettings(beam_width=4)).run("Woodstock music festival 1969")
    assert result.calls == 1 and result.stopped == "covered"
    assert doc_ids(result.hits) == doc_ids(OverlapSearcher()("Woodstock music festival 1969").hits)


def scored(*scores: float) -> list[ScoredChunk]:
    return [hit(f"d{i}", x, f"Title {i}", f"text {i}") for i, x in enumerate(scores)]


def test_stand_apart_compares_the_top_two_lead_with_the_spread() -> None:
    assert stand_apart(scored(0.9, 0.85, 0.3, 0.25, 0.2), 0.6)  # gap 0.55 of a 0.7 spread
    assert not stand_apart(scored(0.9, 0.5, 0.45, 0.3, 0.2), 0.6)  # gap 0.05
    # a share of the spread: the same shape on a logit scale reads the same
    assert stand_apart(scored(9.0, 8.5, 3.0, 2.5, 2.0), 0.6)
    assert not stand_apart(scored(0.5, 0.5, 0.5, 0.5, 0.5), 0.6)  # no spread, no lead
    assert not stand_apart(scored(0.9, 0.85, 0.1), 0.6)  # too few results to tell


def test_top_two_standing_apart_stop_after_one_call() -> None:
    first = [
        hit("kiss", 0.95, *CORPUS["kiss"]),
        hit("sequel", 0.9, *CORPUS["sequel"]),
        *(hit(d, 0.2 - 0.01 * i, *CORPUS[d]) for i, d in enumerate(("radio", "temple", "wood"))),
    ]
    calls: list[str] = []

    def search(query: str) -> SearchOutcome:
        calls.append(query)
        return SearchOutcome(hits=list(first), timings_ms={}, candidates={})

    result = ChainRetriever(search, ChainSettings(min_prior=0.0)).run(BRIDGE)
    assert result.stopped == "apart" and result.calls == 1 == len(calls)
    # no hop, but the order is the chain's: the top page names "Shirley Temple" and the sequel is not
    # linked to it, so the linked page comes second (named_titles.linked_second), the sequel third
    assert doc_ids(result.hits)[:3] == ["kiss", "temple", "sequel"]
    calls.clear()
    hopped = ChainRetriever(search, ChainSettings(min_prior=0.0, apart_ratio=None)).run(BRIDGE)
    assert hopped.stopped != "apart" and hopped.calls > 1
    # without the title rules (a generic corpus) the sequel keeps its place
    calls.clear()
    plain = ChainRetriever(search, ChainSettings(min_prior=0.0), titles=False).run(BRIDGE)
    assert doc_ids(plain.hits)[:3] == ["kiss", "sequel", "radio"]


def test_route_plans_bound_the_chain_per_complexity() -> None:
    s = RampartSettings()
    # medium (two-entity comparisons) needs one hop after the first search; high keeps the default
    assert plan_chain(s.chain, s.routing.plans["medium"]).max_steps == 2
    assert plan_chain(s.chain, s.routing.plans["high"]) is s.chain
    custom = s.routing.plans["high"].model_copy(update={"chain_steps": 3})
    assert plan_chain(s.chain, custom).max_steps == 3 and s.chain.max_steps == 5
    # a plan only lowers the global limit: chain.max_steps 1 turns hops off for every complexity
    one = s.chain.model_copy(update={"max_steps": 1})
    assert plan_chain(one, s.routing.plans["medium"]).max_steps == 1


def test_max_steps_one_is_single_shot() -> None:
    result = ChainRetriever(OverlapSearcher(), ChainSettings(max_steps=1)).run(BRIDGE)
    assert result.calls == 1 and result.stopped == "max_steps"
    single = doc_ids(OverlapSearcher()(BRIDGE).hits)
    # the single search's results, ordered by the chain: the page the top one names comes second
    assert sorted(doc_ids(result.hits)) == sorted(single) and doc_ids(result.hits)[0] == single[0]
    assert single.index("temple") > 1 and doc_ids(result.hits)[1] == "temple"


def test_empty_results_and_blank_query() -> None:
    empty = ChainRetriever(lambda q: SearchOutcome([], {}, {}), ChainSettings())
    result = empty.run(BRIDGE)
    assert result.hits == [] and result.calls == 1 and result.stopped == "empty"
    with pytest.raises(RampartError, match="blank"):
        empty.run("   ")


def endless() -> Callable[[str], SearchOutcome]:
    """Every call returns brand-new passages linking to yet more new entities: never converges."""
    counter = itertools.count()

    def search(query: str) -> SearchOutcome:
        hits = []
        for _ in range(3):
            n = next(counter)
            text = f"Entity Number{n} met Person Alpha{n} and Person Beta{n} about the government position."
            hits.append(hit(f"x{n}", 0.5, f"Entity Number{n}", text))
        return SearchOutcome(hits=hits, timings_ms={}, candidates={})

    return search


@pytest.mark.parametrize(("beams", "steps"), [(1, 5), (4, 5), (16, 10)])
def test_a_chain_that_never_converges_stops_at_max_steps(beams: int, steps: int) -> None:
    settings = ChainSettings(beam_width=beams, max_steps=steps, stop_score=1.0, min_prior=0.0)
    chain = ChainRetriever(endless(), settings)
    result = chain.run(BRIDGE)
    assert result.calls <= chain.max_calls() == 1 + beams * (steps - 1)
    assert result.steps <= steps


def test_a_step_that_adds_nothing_new_stops_the_beam() -> None:
    only = hit("kiss", 0.9, *CORPUS["kiss"])
    searcher = OverlapSearcher()

    def same(query: str) -> SearchOutcome:
        searcher.queries.append(query)
        return SearchOutcome(hits=[only], timings_ms={}, candidates={})

    result = ChainRetriever(same, ChainSettings(beam_width=4, min_prior=0.0)).run(BRIDGE)
    assert result.stopped == "no_new_evidence"
    assert result.calls == len(set(searcher.queries)) <= 1 + 4
    assert doc_ids(result.hits) == ["kiss"]


def test_relevance_reads_the_rerank_logit_else_the_fused_score() -> None:
    h = hit("kiss", 0.25, *CORPUS["kiss"])
    assert relevance(h) == 0.25
    assert relevance(h.model_copy(update={"scores": {"rerank": 0.0}})) == 0.5
    assert relevance(h.model_copy(update={"scores": {"rerank": 1e6}})) == pytest.approx(1.0)


def test_a_huge_question_stays_bounded_and_sub_queries_stay_short() -> None:
    question = " ".join(f"Entity{i} Name{i} term{i}" for i in range(1200))  # ~10,000 characters
    asked: list[str] = []
    search = endless()

    def spy(query: str) -> SearchOutcome:
        asked.append(query)
        return search(query)

    chain = ChainRetriever(spy, ChainSettings(beam_width=4, max_steps=5, min_prior=0.0))
    result = chain.run(question)
    assert result.calls == len(asked) <= chain.max_calls()
    assert all(len(q.split()) <= 16 for q in asked[1:])


def scripted(first: list[ScoredChunk], later: list[ScoredChunk]) -> Callable[[str], SearchOutcome]:
    """Step 1 (the first call) finds ``first``; every sub-query after it finds ``later``."""
    calls: list[str] = []

    def search(query: str) -> SearchOutcome:
        calls.append(query)
        return SearchOutcome(hits=first if len(calls) == 1 else later, timings_ms={}, candidates={})

    return search


def ranked_hit(doc_id: str, text: str, logit: float) -> ScoredChunk:
    chunk = Chunk(chunk_id=f"{doc_id}#0", doc_id=doc_id, tenant="t", ordinal=0, title=doc_id, text=text)
    return ScoredChunk(chunk=chunk, scores={"rerank": logit}, fused=logit)


QUESTION = "Which alloy of titanium resists creep at high temperature in turbine blades?"
STEP_ONE = [ranked_hit(f"s{i}", f"titanium alloy turbine blade study {i}", 2.0 - 0.1 * i) for i in range(8)]


@pytest.mark.parametrize(("logit", "lead_first"), [(-3.0, False), (3.0, True)])
def test_a_later_hop_moves_step_one_down_only_by_a_lead_the_reranker_backs(
    logit: float, lead_first: bool
) -> None:
    """Single-hop questions routed Complex (long ones, of any corpus) must not lose step 1's ranking
    to a hop: step 1's results come before every later hop's context, and before a lead the
    cross-encoder finds weak for the sub-query that found it (issue 34, point 6)."""
    later = [
        ranked_hit("lead", "creep resistance at high temperature of the alloy", logit),
        ranked_hit("ctx1", "unrelated context one", logit - 1),
        ranked_hit("ctx2", "unrelated context two", logit - 2),
    ]
    settings = ChainSettings(beam_width=1, max_steps=2, min_prior=0.0, stop_score=1.0, apart_ratio=None)
    result = ChainRetriever(scripted(STEP_ONE, later), settings).run(QUESTION)
    assert result.calls == 2
    order = doc_ids(result.hits)
    step_one = [h.chunk.doc_id for h in STEP_ONE]
    assert [d for d in order if d in step_one] == step_one  # step 1's own order is kept
    assert order.index("ctx1") > order.index("s7") and order.index("ctx2") > order.index("s7")
    if lead_first:
        assert order.index("lead") < order.index("s1")  # a backed lead that adds terms leads
    else:
        assert order.index("lead") > order.index("s7")
