"""Evidence pairs: features of a pair, the order a model gives, fitting it, and reading its weights."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from services.common.errors import ErrorCode, RampartError
from services.common.types import Chunk, ScoredChunk
from services.models.pair_train import (
    PairExample,
    PairTrainConfig,
    all_supporting,
    cross_validate,
    featurise,
    fit_pairs,
)
from services.orchestrator.chain.config import ChainSettings
from services.orchestrator.chain.pair_order import (
    PAIR_DEPTH,
    PAIR_FEATURES,
    PROMOTE_DEPTH,
    SHIPPED_PAIRS,
    PairDoc,
    PairModel,
    doc_heads,
    order_pairs,
    pair_features,
    pair_ranking,
    promote_ranking,
)

QUESTION = "What government position was held by the woman who portrayed Corliss Archer in Kiss and Tell?"
COL = {name: i for i, name in enumerate(PAIR_FEATURES)}


def hit(doc_id: str, title: str, text: str, ordinal: int = 0) -> ScoredChunk:
    chunk = Chunk(
        chunk_id=f"{doc_id}#{ordinal}", doc_id=doc_id, tenant="t", ordinal=ordinal, title=title, text=text
    )
    return ScoredChunk(chunk=chunk, scores={}, fused=1.0)


FILM = PairDoc("Kiss and Tell (1945 film)", "Shirley Temple portrays Corliss Archer in this comedy.", 3.0)
TEMPLE = PairDoc("Shirley Temple", "She served as Chief of Protocol, a government position.", -1.0)
RADIO = PairDoc("Meet Corliss Archer", "A radio program of the Golden Age about Corliss Archer.", 2.0)


def test_features_count_links_named_titles_and_what_the_pair_covers_together() -> None:
    x, pairs = pair_features(QUESTION, [FILM, TEMPLE, RADIO])
    assert pairs == [(0, 1), (0, 2), (1, 2)]
    assert x.shape == (3, len(PAIR_FEATURES))
    film_temple, film_radio, _ = x
    assert film_temple[COL["links"]] == 1.0  # the film's page names Shirley Temple
    assert film_radio[COL["links"]] == 0.0  # "Corliss Archer" is not the title "Meet Corliss Archer"
    assert film_temple[COL["qnamed"]] == 1.0  # the question names "Kiss and Tell"
    assert film_temple[COL["cov_union"]] > film_radio[COL["cov_union"]]  # "government position" added
    assert film_temple[COL["cov_gain"]] > 0
    assert film_temple[COL["lrank_hi"]] == 0.0 and film_temple[COL["lrank_lo"]] == pytest.approx(np.log(2))
    assert film_temple[COL["p_hi"]] == pytest.approx(1 / (1 + np.exp(-3.0)))
    assert film_temple[COL["p_lo"]] == pytest.approx(1 / (1 + np.exp(1.0)))


def test_a_title_the_question_names_is_no_link() -> None:
    # every page retrieved for "Kiss and Tell" names it: that says nothing about the pair
    other = PairDoc("Corliss Archer", "Kiss and Tell made Corliss Archer famous.", 0.0)
    x, _ = pair_features(QUESTION, [FILM, other])
    assert x[0][COL["links"]] == 0.0


def test_soft_links_count_a_title_named_loosely() -> None:
    question = "Where was the world cup hosted that Algeria first reached the round of 16?"
    algeria = PairDoc(
        "Algeria at the FIFA World Cup", "Algeria reached the last 16 in 2014 at the FIFA World Cup.", 2.0
    )
    cup = PairDoc("2014 FIFA World Cup", "The 20th FIFA World Cup was held in Brazil.", 0.0)
    rugby = PairDoc("1991 Rugby World Cup (final)", "The second Rugby World Cup was held in England.", 0.0)
    x, pairs = pair_features(question, [algeria, cup, rugby])
    assert pairs == [(0, 1), (0, 2), (1, 2)]
    algeria_cup, algeria_rugby, _ = x
    # "2014 FIFA World Cup" less the question's words ("world", "cup"): "2014" and "fifa", both in
    # Algeria's page, which never spells the exact title (no link)
    assert algeria_cup[COL["links"]] == 0.0 and algeria_cup[COL["soft_links"]] == 1.0
    # "1991 Rugby": neither in Algeria's page; "Algeria", "FIFA" of Algeria's title: not in the rugby page
    assert algeria_rugby[COL["soft_links"]] == 0.0


def test_the_best_pair_goes_first_then_the_rest_by_their_share_of_the_pairs() -> None:
    pairs = [(0, 1), (0, 2), (0, 3), (1, 2), (1, 3), (2, 3)]
    scores = np.array([0.0, 0.0, 0.0, 0.0, 5.0, 1.0])  # (1, 3) best; 2 shares the next best pair
    assert pair_ranking(scores, pairs, 4) == [1, 3, 2, 0]


def test_a_single_fact_route_keeps_its_top_two_and_promotes_the_likeliest_partners() -> None:
    pairs = [(i, j) for i in range(5) for j in range(i + 1, 5)]
    scores = np.zeros(len(pairs))
    scores[pairs.index((1, 4))] = 5.0  # 4 completes the best pair; 3 shares the next best
    scores[pairs.index((0, 3))] = 2.0
    assert pair_ranking(scores, pairs, 5)[:2] == [1, 4]
    assert promote_ranking(scores, pairs, 5, 1) == [0, 1, 4, 2, 3]
    assert promote_ranking(scores, pairs, 5, 2) == [0, 1, 4, 3, 2]
    assert promote_ranking(scores, pairs, 5, 0) == [0, 1, 2, 3, 4]
    assert promote_ranking(scores, pairs, 5, 10) == [0, 1, 4, 3, 2]
    # only the first PROMOTE_DEPTH documents are promoted: the top ten keeps its documents
    n = PROMOTE_DEPTH + 2
    wide = [(i, j) for i in range(n) for j in range(i + 1, n)]
    far = np.zeros(len(wide))
    far[wide.index((0, n - 1))] = 9.0
    got = promote_ranking(far, wide, n, 2)
    assert got[:2] == [0, 1] and set(got[:PROMOTE_DEPTH]) == set(range(PROMOTE_DEPTH))


def model_for(feature: str, weight: float = 1.0) -> PairModel:
    w = np.zeros(len(PAIR_FEATURES))
    w[COL[feature]] = weight
    return PairModel(weights=w, mean=np.zeros(len(PAIR_FEATURES)), scale=np.ones(len(PAIR_FEATURES)))


def test_order_pairs_moves_documents_with_all_their_chunks_and_keeps_the_tail() -> None:
    hits = [
        hit("film", FILM.title, FILM.text),
        hit("radio", RADIO.title, RADIO.text),
        hit("film", FILM.title, "More about the film.", 1),
        hit("temple", TEMPLE.title, TEMPLE.text),
        hit("x", "Other", "Unrelated text."),
    ]
    logits = {"film#0": 3.0, "radio#0": 2.0, "temple#0": -1.0, "x#0": -5.0}
    got = order_pairs(QUESTION, hits, logits, model_for("links"), depth=3)
    # (film, temple) is the only linked pair; x is past the head (depth 3) and keeps its place
    assert [h.chunk.chunk_id for h in got] == ["film#0", "film#1", "temple#0", "radio#0", "x#0"]
    assert doc_heads(hits) == [0, 1, 3, 4]


def test_two_documents_or_fewer_are_left_alone() -> None:
    hits = [hit("radio", RADIO.title, RADIO.text), hit("film", FILM.title, FILM.text)]
    assert order_pairs(QUESTION, hits, {}, model_for("links")) == hits


def example(qid: str, linked_gold: bool = True) -> PairExample:
    """Four documents; the supporting pair is the one linked by title, ranked 1st and 4th."""
    docs = (
        PairDoc(f"Alpha {qid}", f"Alpha {qid} was founded by Delta {qid}.", 1.0),
        PairDoc(f"Beta {qid}", "An unrelated page.", 2.0),
        PairDoc(f"Gamma {qid}", "Another unrelated page.", 1.5),
        PairDoc(f"Delta {qid}", "A founder.", 0.0),
    )
    return PairExample(
        qid=qid,
        question="Who founded it?",
        docs=docs,
        doc_ids=("a", "b", "c", "d"),
        gold=frozenset({"a", "d"} if linked_gold else {"b", "c"}),
    )


def test_fitting_learns_that_the_linked_pair_answers() -> None:
    rows = featurise([example(f"q{i}") for i in range(20)])
    served = all_supporting(rows, None)
    model = fit_pairs(rows, lam=1.0)
    assert model.weights[COL["links"]] > 0
    assert served["all_supporting@2"] == 0.0
    assert all_supporting(rows, model)["all_supporting@2"] == 1.0
    assert cross_validate(rows, PairTrainConfig(lam=1.0, folds=4))["all_supporting@2"] == 1.0


def test_fitting_without_any_supporting_pair_in_a_head_is_an_error() -> None:
    rows = featurise([PairExample("q", "Who?", (FILM, TEMPLE), ("a", "b"), frozenset({"z", "a"}))])
    with pytest.raises(ValueError, match="no training question"):
        fit_pairs(rows, lam=1.0)


def test_weights_round_trip_and_bad_files_name_the_fix(tmp_path: Path) -> None:
    model = model_for("links", 2.0)
    model.save(tmp_path / "m", {"model_id": "test"})
    back = PairModel.load(tmp_path / "m")
    assert back.weights.tolist() == model.weights.tolist() and back.manifest["model_id"] == "test"

    with pytest.raises(RampartError, match="rampart train pairs") as missing:
        PairModel.load(tmp_path / "nowhere")
    assert missing.value.code is ErrorCode.FAILED_PRECONDITION

    body = json.loads((tmp_path / "m" / "weights.json").read_text())
    body["features"] = ["something", "else"]
    (tmp_path / "m" / "weights.json").write_text(json.dumps(body))
    with pytest.raises(RampartError, match="RAMPART_CHAIN__PAIR_ORDER=false"):
        PairModel.load(tmp_path / "m")

    body = {**json.loads((tmp_path / "m" / "weights.json").read_text()), "features": list(PAIR_FEATURES)}
    body["scale"] = [0.0] * len(PAIR_FEATURES)
    (tmp_path / "m" / "weights.json").write_text(json.dumps(body))
    with pytest.raises(RampartError, match="corrupt"):
        PairModel.load(tmp_path / "m")


def test_the_shipped_model_loads_and_prefers_linked_complementary_pairs() -> None:
    model = PairModel.load(SHIPPED_PAIRS)
    assert model.manifest["split"].endswith("/train")  # fitted on the training half only
    # fitted on out-of-fold reranker scores (docs/chain.md, "Cross-fitted pair model"), as deep as served
    assert model.manifest["reranker"]["hotpotqa_half"] == "heldout"
    assert model.manifest["pair_depth"] == PAIR_DEPTH == ChainSettings().pair_depth
    for feature in ("links", "qnamed", "cov_union"):
        assert model.weights[COL[feature]] > 0, feature
    assert model.weights[COL["lrank_hi"]] < 0  # a worse rank is a weaker claim
