"""Two documents a question names by title go first; anything ambiguous leaves the ranking alone."""

from __future__ import annotations

import pytest

from services.common.types import Chunk, ScoredChunk
from services.orchestrator.chain.config import ChainSettings
from services.orchestrator.chain.named_titles import linked_next, linked_second, named_first, named_pair
from services.orchestrator.chain.retriever import ChainRetriever
from services.retrieval.hybrid import SearchOutcome

QUESTION = "Were the bands Skin Yard and Ostava from the U.S.?"


def hit(doc_id: str, title: str, ordinal: int = 0, text: str = "…") -> ScoredChunk:
    chunk = Chunk(
        chunk_id=f"{doc_id}#{ordinal}", doc_id=doc_id, tenant="t", ordinal=ordinal, title=title, text=text
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


def test_a_chain_without_titles_neither_reorders_nor_stops_by_them() -> None:
    """``titles=False`` (a tenant of the generic corpus profile): the documents the question names keep
    the chain's own order, and their being in hand stops nothing."""
    first = [
        hit("yard", "Skin Yard"),
        hit("album", "Skin Yard (album)"),
        hit("live", "Skin Yard Live at the Crocodile"),
        hit("ostava", "Ostava"),
    ]
    first = [h.model_copy(update={"fused": 1.0 - 0.1 * i}) for i, h in enumerate(first)]

    def search(query: str) -> SearchOutcome:
        return SearchOutcome(hits=list(first), timings_ms={}, candidates={})

    settings = ChainSettings(beam_width=1, min_prior=0.0)
    result = ChainRetriever(search, settings, titles=False).run(QUESTION)
    assert result.stopped != "named"
    assert ids(result.hits)[:2] != ["yard#0", "ostava#0"] and ids(result.hits)[0] == "yard#0"
    assert ids(ChainRetriever(search, settings).run(QUESTION).hits)[:2] == ["yard#0", "ostava#0"]


BRIDGE = "Who founded the record label of the band that released Bleach?"


def test_pages_the_top_two_name_by_title_come_right_behind_them() -> None:
    hits = [
        hit("bleach", "Bleach (album)", text="Bleach is the debut album by Nirvana, released by Sub Pop."),
        hit("grunge", "Grunge", text="Grunge is a rock genre."),
        hit("x", "Seattle"),
        hit("nirvana", "Nirvana (band)"),
        hit("y", "Kurt"),
        hit("subpop", "Sub Pop", text="Sub Pop was founded by Bruce Pavitt."),
        hit("subpop", "Sub Pop", 1),
    ]
    # Nirvana and Sub Pop are named by the top page: both climb behind the top two, with all their
    # chunks, in their order; the top two and everything else keep theirs ("Kurt" is not a whole title
    # the leads spell out, "Seattle" is not named at all)
    assert ids(linked_next(BRIDGE, hits)) == [
        "bleach#0",
        "grunge#0",
        "nirvana#0",
        "subpop#0",
        "subpop#1",
        "x#0",
        "y#0",
    ]


def test_the_best_two_pages_naming_a_top_page_come_behind_it() -> None:
    hits = [
        hit("bleach", "Bleach (album)", text="Bleach is the debut album of a band."),
        hit("grunge", "Grunge", text="Grunge is a rock genre."),
        hit("x", "Seattle"),
        hit("tour", "Bleach Tour", text="A tour to promote Bleach (album) across the US."),
        hit("y", "Kurt", text="He wrote about bleach and grunge."),  # lower case: names neither
        hit("review", "Review", text="Grunge fans still rate Bleach highly."),
        hit("poll", "Poll", text="Bleach topped a poll."),  # a third page naming a lead: not moved
    ]
    unnamed = "Who founded the record label of the band behind that 1989 debut?"
    assert ids(linked_next(unnamed, hits)) == [
        "bleach#0",
        "grunge#0",
        "tour#0",
        "review#0",
        "x#0",
        "y#0",
        "poll#0",
    ]
    assert ids(linked_next(unnamed, hits, backlinks=0)) == ids(hits)
    asked = "Which tour promoted Bleach and Grunge records?"  # the question names both leads
    assert ids(linked_next(asked, hits)) == ids(hits)


def test_linking_leaves_question_named_titles_case_and_far_pages_alone() -> None:
    lead = hit("bleach", "Bleach (album)", text="Bleach, by nirvana, was released by Sub Pop.")
    hits = [lead, hit("grunge", "Grunge"), hit("x", "Seattle"), hit("nirvana", "Nirvana")]
    assert ids(linked_next(BRIDGE, hits)) == ids(hits)  # "nirvana" is not the title "Nirvana"
    named = "Did the band that released Bleach sign with Sub Pop?"
    hits = [lead, hit("grunge", "Grunge"), hit("x", "Seattle"), hit("subpop", "Sub Pop")]
    assert ids(linked_next(named, hits)) == ids(hits)  # the question names it: named_first's business
    far = [
        lead,
        hit("grunge", "Grunge"),
        *(hit(f"f{i}", f"Filler {i}") for i in range(30)),
        hit("s", "Sub Pop"),
    ]
    assert ids(linked_next(BRIDGE, far)) == ids(far)  # beyond the 30 documents searched
    assert ids(linked_next(BRIDGE, far, depth=33))[2] == "s#0"
    assert ids(linked_next(BRIDGE, [lead, hit("subpop", "Sub Pop")])) == ["bleach#0", "subpop#0"]  # too few


def test_a_lead_with_several_chunks_keeps_them_ahead_of_the_linked_pages() -> None:
    hits = [
        hit("bleach", "Bleach (album)", text="Released by Sub Pop."),
        hit("bleach", "Bleach (album)", 1),
        hit("grunge", "Grunge"),
        hit("x", "Seattle"),
        hit("subpop", "Sub Pop"),
    ]
    assert ids(linked_next(BRIDGE, hits)) == ["bleach#0", "bleach#1", "grunge#0", "subpop#0", "x#0"]


def test_a_page_linked_to_the_top_one_goes_second_when_the_top_two_are_unlinked() -> None:
    lead = hit("bleach", "Bleach (album)", text="Bleach was released by Sub Pop.")
    backlink = hit("pavitt", "Bruce Pavitt", text="Pavitt founded the label behind Bleach.")
    hits = [lead, hit("grunge", "Grunge"), hit("subpop", "Sub Pop"), hit("subpop", "Sub Pop", 1), backlink]
    # the first page linked to the top one comes up to second, with its chunks; the rest keep their order
    assert ids(linked_second(BRIDGE, hits)) == ["bleach#0", "subpop#0", "subpop#1", "grunge#0", "pavitt#0"]
    # a link the other way counts too: Pavitt's page names the top page, "Bleach"...
    back = [lead, hit("grunge", "Grunge"), hit("x", "Seattle"), backlink]
    unnamed = "Who founded the record label of Nirvana's debut album?"
    assert ids(linked_second(unnamed, back)) == ["bleach#0", "pavitt#0", "grunge#0", "x#0"]
    # ...unless the question names it: then any page retrieved for that name would "link"
    assert ids(linked_second(BRIDGE, back)) == ids(back)


def test_linked_top_two_a_named_pair_or_no_link_change_nothing() -> None:
    lead = hit("bleach", "Bleach (album)", text="Bleach was released by Sub Pop, the label of Grunge.")
    hits = [lead, hit("grunge", "Grunge"), hit("subpop", "Sub Pop")]
    assert ids(linked_second(BRIDGE, hits)) == ids(hits)  # the top two are linked already
    unlinked = [hit("bleach", "Bleach (album)"), hit("grunge", "Grunge"), hit("subpop", "Sub Pop")]
    assert ids(linked_second(BRIDGE, unlinked)) == ids(unlinked)  # nothing links to the top one
    named = [
        hit("yard", "Skin Yard", text="Skin Yard was signed to Cruz Records."),
        hit("ostava", "Ostava"),
        hit("cruz", "Cruz Records"),
    ]
    assert ids(linked_second(QUESTION, named)) == ids(named)  # the question's two named pages stay first
