"""The ``Proposer`` contract (services/orchestrator/chain/subqueries.py): what the chain-of-retrieval
relies on from whatever writes its next-hop sub-queries, heuristics or an LLM. Subclass
:class:`ProposerContract` in the implementation's own test file and provide ``proposer``
(tests/README.md).
"""

from __future__ import annotations

import pytest

from services.common.query_text import has_words
from services.common.types import Chunk, ScoredChunk
from services.orchestrator.chain.subqueries import MAX_SUBQUERY_WORDS, Proposer

QUESTION = "What government position was held by the woman who portrayed Corliss Archer in Kiss and Tell?"
PASSAGES = {
    "kiss": (
        "Kiss and Tell (1945 film)",
        "Kiss and Tell is a 1945 American comedy film starring Shirley Temple as Corliss Archer.",
    ),
    "sequel": ("A Kiss for Corliss", "A Kiss for Corliss is a 1949 film in which Corliss Archer returns."),
    "radio": ("Meet Corliss Archer", "Meet Corliss Archer was a radio comedy about a teenage girl."),
}


def _hit(doc_id: str, score: float) -> ScoredChunk:
    title, text = PASSAGES[doc_id]
    chunk = Chunk(chunk_id=f"{doc_id}#0", doc_id=doc_id, tenant="t", ordinal=0, title=title, text=text)
    return ScoredChunk(chunk=chunk, scores={"bm25": score}, fused=score)


POOL = [_hit("kiss", 0.9), _hit("sequel", 0.6), _hit("radio", 0.5)]
EVIDENCE = POOL[:1]


class ProposerContract:
    """Every ``Proposer`` keeps these promises: at most ``limit`` proposals (none for ``limit`` 0),
    best first (priors in [0, 1], non-increasing); each a searchable query (it has words) of at most
    ``MAX_SUBQUERY_WORDS`` words with a bridge; a bridge in ``exclude`` (already followed) is not
    proposed again. For the kiss-and-tell ``QUESTION`` with its lead passage as ``EVIDENCE`` and
    ``POOL`` retrieved, it proposes at least two next hops.

    Provide ``proposer``: the implementation under test (an LLM one over an endpoint that answers).
    """

    @pytest.fixture()
    def proposer(self) -> Proposer:
        raise NotImplementedError(
            f"{type(self).__name__} must provide the proposer fixture: the implementation under test "
            "(tests/README.md)"
        )

    def test_at_most_limit_best_first(self, proposer: Proposer) -> None:
        assert proposer.propose(QUESTION, EVIDENCE, POOL, limit=0) == []
        for limit in (1, 2, 3):
            got = proposer.propose(QUESTION, EVIDENCE, POOL, limit=limit)
            assert 1 <= len(got) <= limit and len(got) >= min(limit, 2), got
            priors = [p.prior for p in got]
            assert all(0.0 <= p <= 1.0 for p in priors) and priors == sorted(priors, reverse=True), got

    def test_proposals_are_short_searchable_queries(self, proposer: Proposer) -> None:
        for p in proposer.propose(QUESTION, EVIDENCE, POOL, limit=3):
            assert has_words(p.text) and len(p.text.split()) <= MAX_SUBQUERY_WORDS, p
            assert p.bridge and p.kind, p

    def test_a_followed_bridge_is_not_proposed_again(self, proposer: Proposer) -> None:
        first = proposer.propose(QUESTION, EVIDENCE, POOL, limit=2)[0]
        again = proposer.propose(QUESTION, EVIDENCE, POOL, limit=2, exclude=[first.bridge])
        assert again and first.bridge not in [p.bridge for p in again], again
