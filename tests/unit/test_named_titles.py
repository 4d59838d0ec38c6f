"""Two documents a question names by title go first; anything ambiguous leaves the ranking alone."""

from __future__ import annotations

import pytest

from services.common.settings import ChainSettings
from services.common.types import Chunk, ScoredChunk
from services.orchestrator.chain import ChainRetriever
from services.orchestrator.named_titles import named_first, named_pair
from services.retrieval.hybrid import SearchOutcome

pytestmark = pytest.mark.unit

QUESTION = "Were the bands Skin Yard and Ostava from the U.S.?"


def hit(doc_id: str, title: str, ordinal: int = 0) -> ScoredChunk:
    chunk = Chunk(
        chunk_id=f"{doc_id}#{ordinal}", doc_id=doc_id, tenant="t", ordinal=ordinal, title=title, text="…"
    )
    return ScoredChunk(chunk=chunk, scores={}, fused=1.0)


def ids(hits: list[ScoredChunk]) -> list[str]:
    return [h.chunk.chunk_id for h in hits]


def test_the_two_named_documents_go_first_in_their_order() -> None:
    hits = [
        hit("yard", "Skin Yard"),
        hit("album", "Skin Yard (album)"),
        hit("x", "Grunge"),
        hit("ostava", "Ostava"),
    ]
    assert named_pair(QUESTION, hits) == (0, 3)
    assert ids(named_first(QUESTION, hits)) == ["yard#0", "ostava#0", "album#0", "x#0"]


def test_a_title_is_named_without_its_parenthetical_on_whole_words_and_case() -> None:
    question = "What film was written and directed by Joby Harold, scored for the hotel and casino scene?"
    hits = [
        hit("king", "King Arthur"),
        hit("casino", "Casino"),
        hit("awake", "Awake (film)"),
        hit("joby", "Joby Harold"),
    ]
    # "Casino" is not named by "casino"; "Awake" is not in the question; so one title only: unchanged
    assert named_pair(question, hits) is None
    assert ids(named_first(question, hits)) == ids(hits)
    q2 = "Which was released first, Awake or King Arthur?"
    assert ids(named_first(q2, hits)) == ["king#0", "awake#0", "casino#0", "joby#0"]
    assert named_pair("Which was released first, Awakening or King Arthurs?", hits) is None  # whole words


@pytest.mark.parametrize(
    "titles",
    [
        ["Skin Yard", "Ostava", "U.S."],  # three named: which two is not clear
        ["Skin Yard", "Yard"],  # one inside the other
        ["Skin Yard"],  # one
        [],
    ],
)
def test_ambiguous_or_single_names_change_nothing(titles: list[str]) -> None:
    hits = [hit("x", "Grunge"), *(hit(f"d{i}", t) for i, t in enumerate(titles))]
    assert named_pair(QUESTION, hits) is None
    assert ids(named_first(QUESTION, hits)) == ids(hits)


def test_of_two_documents_with_one_title_the_better_ranked_counts() -> None:
    hits = [hit("album", "Skin Yard (album)"), hit("yard", "Skin Yard"), hit("ostava", "Ostava")]
    assert ids(named_first(QUESTION, hits)) == ["album#0", "ostava#0", "yard#0"]
    assert named_pair(QUESTION, [hit("a", "Skin Yard"), hit("b", "Skin Yard (band)")]) is None  # one title


def test_documents_not_chunks_are_counted_and_only_the_head_is_read() -> None:
    # a document's later chunks neither count twice nor move; the best chunk of each named one goes first
    hits = [
        hit("yard", "Skin Yard"),
        hit("yard", "Skin Yard", 1),
        hit("x", "Grunge"),
        hit("ostava", "Ostava"),
    ]
    assert ids(named_first(QUESTION, hits)) == ["yard#0", "ostava#0", "yard#1", "x#0"]
    # Ostava is the 12th document: beyond the head, so only one title is named
    far = [
        hit("yard", "Skin Yard"),
        *(hit(f"f{i}", f"Filler {i}") for i in range(10)),
        hit("ostava", "Ostava"),
    ]
    assert named_pair(QUESTION, far) is None
    assert named_pair(QUESTION, far, depth=12) == (0, 11)


def test_the_chain_ranks_named_documents_first_and_stops_on_finding_them() -> None:
    first = [
        hit("yard", "Skin Yard"),
        hit("album", "Skin Yard (album)"),
        hit("live", "Skin Yard Live at the Crocodile"),
        hit("ostava", "Ostava"),
    ]
    first = [h.model_copy(update={"fused": 1.0 - 0.1 * i}) for i, h in enumerate(first)]
    calls: list[str] = []

    def search(query: str) -> SearchOutcome:
        calls.append(query)
        return SearchOutcome(hits=list(first), timings_ms={}, candidates={})

    result = ChainRetriever(search, ChainSettings(beam_width=1, min_prior=0.0)).run(QUESTION)
    assert ids(result.hits)[:2] == ["yard#0", "ostava#0"]
    assert [h.fused for h in result.hits] == sorted((h.fused for h in result.hits), reverse=True)
    # both named pages are in hand: a hop could not change the top two, so none is spent
    assert result.stopped == "named" and result.calls == 1 == len(calls)
    # with one of them missing, the chain hops as before
    calls.clear()
    hopped = ChainRetriever(search, ChainSettings(beam_width=1, min_prior=0.0)).run(
        "Were the bands Skin Yard and Nirvana from the U.S.?"
    )
    assert hopped.stopped != "named" and hopped.calls > 1
