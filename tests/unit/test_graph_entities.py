"""Entities as the graph stores them: one key per spelling of a name, the real spaCy model's names and
proper-noun runs, a query's candidates, and bounded work on hostile text."""

from __future__ import annotations

import pytest

from services.retrieval.graph.config import GraphSettings
from services.retrieval.graph.entities import (
    MAX_KEY_CHARS,
    NoExtractor,
    SpacyExtractor,
    _capitalised_runs,
    entity_key,
    open_extractor,
)


@pytest.mark.parametrize(
    ("name", "key"),
    [
        ("The Beatles", "beatles"),
        ("Nirvana's", "nirvana"),
        ("  Forbidden   Ground. ", "forbidden ground"),
        ("ＡＢＣ Corp", "abc corp"),  # NFKC: full-width letters
        ("the", None),
        ("x", None),
        ("a" * (MAX_KEY_CHARS + 1), None),
    ],
)
def test_entity_key(name: str, key: str | None) -> None:
    assert entity_key(name) == key


def test_capitalised_runs_skip_a_sentence_opening_word() -> None:
    runs = _capitalised_runs("Training of people. Which film did Jane Roe direct in Ohio?")
    assert "Training" not in runs and "Which" not in runs
    assert {"Jane Roe", "Jane", "Roe", "Ohio"} <= set(runs)


@pytest.fixture(scope="module")
def spacy_extractor() -> SpacyExtractor:
    return SpacyExtractor(GraphSettings())


def test_spacy_finds_the_names_two_passages_share(spacy_extractor: SpacyExtractor) -> None:
    film, person = spacy_extractor.extract(
        [
            "Forbidden Ground is a 2013 Australian war film directed by Adrian Powers.",
            "Adrian Powers (born 1970) is an Australian director from Melbourne.",
        ]
    )
    assert "adrian powers" in film and "adrian powers" in person
    assert "melbourne" in person
    assert len(film) == len(set(film))


def test_query_candidates_hold_the_query_names(spacy_extractor: SpacyExtractor) -> None:
    got = spacy_extractor.query_candidates("Who directed the film Forbidden Ground?")
    assert "forbidden ground" in got


def test_extraction_is_bounded(spacy_extractor: SpacyExtractor) -> None:
    s = GraphSettings(max_entities_per_chunk=5, max_chars=2_000)
    capped = SpacyExtractor(s).extract([" ".join(f"Mr Person{i} Smith met." for i in range(2_000))])[0]
    assert len(capped) <= 5
    assert spacy_extractor.extract(["", "((((((((....))))"]) == [[], []]


def test_the_factory_picks_the_extractor() -> None:
    assert isinstance(open_extractor(GraphSettings(extractor="none")), NoExtractor)
    assert isinstance(open_extractor(GraphSettings()), SpacyExtractor)
    assert NoExtractor().extract(["Adrian Powers"]) == [[]]
