"""What a passage opens with, and when a near-copy is about another subject (planted-copies rule)."""

from __future__ import annotations

import pytest

from services.common.subjects import lead_name, other_subject, subject_context, subject_words


@pytest.mark.parametrize(
    ("text", "lead"),
    [
        (
            "The 2009 Colorado Buffaloes football team represented the University of Colorado.",
            "2009 Colorado Buffaloes",
        ),
        ("In 2011, Kent County Cricket Club competed in Division Two.", "2011"),
        ("The Battle of Pusan Perimeter was a large-scale battle.", "Battle of Pusan Perimeter"),
        (
            "Laleli Mosque and Esma Sultan Mansion, two landmarks, share a street.",
            "Laleli Mosque and Esma Sultan Mansion",
        ),
        ("Solidago speciosa, the showy goldenrod, is a species.", ""),  # one capitalised word: sentence case
        ("Renowned for his songs, he also voiced a hedgehog.", ""),
        ("the series aired on FOX.", ""),
        ("", ""),
    ],
)
def test_lead_name_is_the_opening_name(text: str, lead: str) -> None:
    assert lead_name(text) == lead


def test_a_template_siblings_subject_is_other_a_paraphrases_is_not() -> None:
    passage = "The 2009 Colorado Buffaloes football team represented the University of Colorado in 2009."
    query = "Which conference did the 2009 Colorado Buffaloes play in?"
    words = subject_words((passage, query))
    assert other_subject("2011 Colorado Buffaloes", words) == "2011"  # a sibling season
    assert other_subject("2009 Colorado Buffaloes", words) is None  # the same subject, reworded around it
    assert other_subject("", words) is None  # no opening name: no evidence of another subject


def test_words_fold_possessives_plurals_dashes_and_typos() -> None:
    words = subject_words(["The Manchester Terrier's lineage in 2017–18, at Livesey Hall."])
    assert other_subject("Manchester Terriers", words) is None
    assert other_subject("2017-18 Wigan", words) == "Wigan"
    assert other_subject("Livesey Hal War", words) == "War"  # "Hal" is a typo of "Hall"; "War" is new
    # the query's words are known too: a planted copy may open with the question's date
    words = subject_words(["In 2012, Oakland faced a shooting.", "What happened on April 2, 2012?"])
    assert other_subject("April 2", words) is None


def test_only_a_passage_that_opens_with_a_name_has_siblings_about_other_subjects() -> None:
    query = "Who jumped from space?"
    assert subject_context("In an unusual twist, Neil Armstrong jumped from space.", query) is None
    words = subject_context("Neil Armstrong, the astronaut, jumped from space.", query)
    assert words is not None and other_subject("Felix Baumgartner", words) == "Felix"
