"""The router's cheap cues: the ones that separate follow-ups from self-contained questions."""

from __future__ import annotations

import numpy as np
import pytest

from services.orchestrator.routing.features import CHEAP_FEATURES, MAX_QUERY_CHARS, cheap_features


def cues(query: str, history: list[str] | None = None) -> dict[str, float]:
    return dict(zip(CHEAP_FEATURES, cheap_features(query, history or []).tolist(), strict=True))


def test_pronoun_without_antecedent_is_flagged() -> None:
    assert cues("When was he born?")["pronoun_unresolved"] == 1.0
    assert cues("What else is she known for?")["pronoun_unresolved"] == 1.0


def test_pronoun_with_antecedent_in_the_query_is_not() -> None:
    f = cues("Where did Obama's wife study and when did she graduate?")
    assert f["pronouns"] == 1.0
    assert f["pronoun_unresolved"] == 0.0
    assert f["possessives"] == 1.0
    assert f["conjunctions"] == 1.0


def test_leading_connectives_and_demonstratives() -> None:
    assert cues("And in 1990?")["leading_connective"] == 1.0
    assert cues("what about the second one")["leading_connective"] == 1.0
    assert cues("what about the second one")["demonstratives"] >= 1.0
    assert cues("What is the capital of France?")["leading_connective"] == 0.0
    assert cues("What is the capital of France?")["demonstratives"] == 0.0


def test_wh_word_is_one_hot_and_case_blind() -> None:
    upper, lower = cues("Who is older, Annie Morton or Terry Richardson?"), cues("who is older annie morton")
    for f in (upper, lower):
        assert f["wh_who"] == 1.0
        assert sum(f[k] for k in CHEAP_FEATURES if k.startswith("wh_") and k != "wh_inside") == 1.0
    assert cues("The director of Big Stone Gap is based in what city?")["wh_inside"] == 1.0


def test_entities_and_comparatives_of_a_comparison() -> None:
    f = cues("Who is older, Annie Morton or Terry Richardson?")
    assert f["entities"] == 2.0  # the sentence-initial capital is not an entity
    assert f["comparatives"] == 1.0
    assert f["conjunctions"] == 1.0


def test_history_features() -> None:
    alone = cues("When was Mary Shelley born?")
    assert alone["history_present"] == 0.0 and alone["overlap_last_turn"] == 0.0
    f = cues("When was Mary Shelley born?", ["Who is Mary Shelley?"])
    assert f["history_present"] == 1.0
    assert f["overlap_last_turn"] == pytest.approx(2 / 3)  # mari, shelley of mari, shelley, born
    assert f["sim_last_turn"] == 0.0  # filled in by feature_matrix with the embeddings


def test_bounded_on_huge_inputs() -> None:
    f = cheap_features("word " * 20_000, ["turn"] * 10_000)
    assert np.isfinite(f).all()
    assert cues("a " * MAX_QUERY_CHARS)["log_words"] == pytest.approx(np.log1p(MAX_QUERY_CHARS // 2))
    assert cues("")["log_words"] == 0.0
