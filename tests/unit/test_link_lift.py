"""The two-hop lift: pages linked by title to the two best reranked pages rise toward their score."""

from __future__ import annotations

import pytest

from services.common.types import Chunk, ScoredChunk
from services.rerank.link_lift import lift_linked


def page(doc: str, title: str, text: str) -> ScoredChunk:
    chunk = Chunk(
        chunk_id=f"{doc}#0", doc_id=doc, tenant="t", ordinal=0, title=title, header="", text=text, source="t"
    )
    return ScoredChunk(chunk=chunk, scores={}, ranks={}, fused=0.0)


QUERY = "Which label released the debut album of the band from Aberdeen, Washington?"
HEAD = [
    page("bleach", "Bleach (album)", "Bleach is the debut album by Nirvana, released by Sub Pop in 1989."),
    page("nirvana", "Nirvana (band)", "Nirvana was an American rock band formed in Aberdeen, Washington."),
    page("melvins", "Melvins", "The Melvins are a rock band from Montesano, Washington."),
    page("subpop", "Sub Pop", "Sub Pop is a record label in Seattle founded by Bruce Pavitt."),
    page("kurt", "Kurt Cobain", "Cobain was the frontman of Nirvana."),
]


def test_pages_named_by_or_naming_a_top_page_rise_toward_it() -> None:
    scores = [1.0, 0.9, 0.5, 0.1, 0.0]
    out, lifted = lift_linked(QUERY, HEAD, scores, 0.8)
    # Sub Pop is named by the top page: floor 0 + 0.8 * (1.0 - 0) = 0.8, above the unlinked Melvins
    assert out[3] == pytest.approx(0.8)
    # Kurt Cobain names the second page ("Nirvana"): 0.8 * 0.9
    assert out[4] == pytest.approx(0.72)
    assert out[:3] == scores[:3]  # the seeds and the unlinked page keep their scores
    assert lifted == 2


def test_a_lift_never_lowers_a_score_nor_passes_its_seed() -> None:
    scores = [1.0, 0.9, 0.5, 0.95, 0.0]  # Sub Pop already above 0.8 of the top page
    out, lifted = lift_linked(QUERY, HEAD, scores, 0.8)
    assert out[3] == 0.95 and lifted == 0  # Sub Pop is the second seed now; Nirvana already scores more
    out, _ = lift_linked(QUERY, HEAD, [1.0, 0.9, 0.5, 0.1, 0.0], 1.0)
    assert max(out[2:]) <= 1.0


def test_a_title_the_query_names_links_nothing() -> None:
    # "Nirvana" is in the question: every page retrieved for it mentions it, so naming it is no link
    out, lifted = lift_linked(
        "Which label released the debut album of Nirvana?", HEAD, [1.0, 0.9, 0.5, 0.1, 0.0], 0.8
    )
    assert out[4] == 0.0  # Kurt Cobain names only Nirvana
    assert out[3] == pytest.approx(0.8)  # Sub Pop is still named by the top page
    assert lifted == 1


def test_scale_is_the_heads_own() -> None:
    """Pure mode passes logits: the lift is measured from the head's lowest score, so a negative
    seed lifts below itself, never above."""
    out, _ = lift_linked(QUERY, HEAD, [-1.0, -2.0, -3.0, -6.0, -5.0], 0.8)
    assert out[3] == pytest.approx(-6.0 + 0.8 * 5.0)
    assert out[3] < -1.0


def test_off_or_too_short_changes_nothing() -> None:
    scores = [1.0, 0.9, 0.5, 0.1, 0.0]
    assert lift_linked(QUERY, HEAD, scores, 0.0) == (scores, 0)
    assert lift_linked(QUERY, HEAD[:1], [1.0], 0.8) == ([1.0], 0)


def test_only_the_best_chunk_of_a_document_is_a_seed() -> None:
    """Two chunks of the top document take one seed place: the second document still seeds."""
    twin = HEAD[0].model_copy(
        update={
            "chunk": HEAD[0].chunk.model_copy(update={"chunk_id": "bleach#1", "text": "Recorded in 1988."})
        }
    )
    head = [HEAD[0], twin, *HEAD[1:]]
    out, _ = lift_linked(QUERY, head, [1.0, 0.95, 0.9, 0.5, 0.1, 0.0], 0.8)
    assert out[5] == pytest.approx(0.72)  # Kurt Cobain, through Nirvana, the second document


def test_common_words_and_numbers_are_not_names() -> None:
    """ "Hotel (1967 film)" is named by any sentence opening with "Hotel"; the head's texts use "hotel"
    as a word, so it links nothing. A year-titled page ("1920 (film)") links nothing either."""
    head = [
        page(
            "flamingo",
            "Flamingo Las Vegas",
            "Hotel guests can see the flamingo habitat; the hotel opened in 1946.",
        ),
        page("siegel", "Bugsy Siegel", "Siegel built the Flamingo Las Vegas. In 1920 he met Meyer Lansky."),
        page("film", "Hotel (1967 film)", "A film about a New Orleans hotel."),
        page("year", "1920 (film)", "A silent film."),
        page("lansky", "Meyer Lansky", "Lansky was an American gangster."),
    ]
    out, lifted = lift_linked("Who built the casino?", head, [1.0, 0.9, 0.5, 0.4, 0.0], 0.8)
    assert out[2:4] == [0.5, 0.4]  # not lifted, though "Hotel" and "1920" are spelled by the seeds
    assert out[4] == pytest.approx(0.72) and lifted == 1  # Meyer Lansky, named by the second seed
