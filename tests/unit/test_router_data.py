"""The router's labelled queries: labels, derived follow-ups, splits and determinism."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from services.common.errors import RampartError
from services.models.router_data import (
    SourceQuestion,
    build_labelled,
    hotpot_is_comparison,
    load_hotpotqa,
    load_labelled,
    load_nq,
)
from services.orchestrator.plan import Complexity, QueryType


def test_comparison_rule() -> None:
    assert hotpot_is_comparison("Are Kiss and Tell and Big Stone Gap both American films?", "yes")
    assert hotpot_is_comparison("Who is older, Annie Morton or Terry Richardson?", "Terry Richardson")
    # named in a bridge question but not offered as an option
    assert not hotpot_is_comparison(
        "Who produced the series based on the book by historian James Burke?", "James Burke"
    )
    assert not hotpot_is_comparison(
        "What position was held by the star of Kiss and Tell?", "Chief of Protocol"
    )


def write_data(root: Path, hotpot: int = 12, nq: int = 20) -> Path:
    (root / "hotpotqa_dev500").mkdir(parents=True)
    with (root / "hotpotqa_dev500" / "answers.jsonl").open("w") as fh:
        for i in range(hotpot):
            comparison = i % 3 == 0
            q = (
                f"Who is older, Person {i} or Person {i + 100}?"
                if comparison
                else f"Which city hosts the club of Player {i}?"
            )
            a = f"Person {i}" if comparison else f"City {i}"
            row = {
                "_id": f"h{i}",
                "question": q,
                "answers": [a],
                "supporting_titles": [f"Club {i} (team)", f"Player {i}"],
            }
            fh.write(json.dumps(row) + "\n")
    (root / "nq_open_oracle").mkdir()
    with gzip.open(root / "nq_open_oracle" / "nq-open-oracle.jsonl.gz", "wt") as gz:
        for i in range(nq):
            row = {
                "question": f"who sang song number {i}",
                "answers": [f"Singer {i}"],
                "ctxs": [{"title": f"Song {i}"}],
            }
            gz.write(json.dumps(row) + "\n")
    return root


def test_loaders_label_sources(tmp_path: Path) -> None:
    data = write_data(tmp_path)
    hotpot = load_hotpotqa(data)
    assert len(hotpot) == 12 and all(s.type == QueryType.COMPLEX for s in hotpot)
    assert {s.complexity for s in hotpot} == {Complexity.MEDIUM, Complexity.HIGH}
    assert hotpot[0].complexity == Complexity.MEDIUM and hotpot[1].complexity == Complexity.HIGH
    assert "Club 1" in hotpot[1].entities  # title cleaned of its "(team)" qualifier
    nq = load_nq(data, limit=5)
    assert len(nq) == 5 and all(s.type == QueryType.SIMPLE and s.complexity == Complexity.LOW for s in nq)
    assert nq[0].entities[0] == "Song 0"


def test_missing_data_names_the_fix(tmp_path: Path) -> None:
    with pytest.raises(RampartError, match="RAMPART_EVAL_DATA_DIR"):
        load_hotpotqa(tmp_path)


def source(i: int, split: str, complex_: bool = False) -> SourceQuestion:
    return SourceQuestion(
        id=f"s{i}",
        question=f"Which team did Player {i} join?" if complex_ else f"who founded company {i}",
        answer=f"Answer {i}",
        entities=(f"Entity {i}", f"Other {i}"),
        complexity=Complexity.HIGH if complex_ else Complexity.LOW,
        type=QueryType.COMPLEX if complex_ else QueryType.SIMPLE,
        source="synthetic",
        split="train" if split == "train" else "heldout",
    )


def test_derived_queries_are_labelled_and_deterministic() -> None:
    sources = [source(i, "train" if i % 2 else "heldout", complex_=i % 3 == 0) for i in range(60)]
    rows = build_labelled(sources, seed=5)
    assert rows == build_labelled(sources, seed=5)
    assert rows != build_labelled(sources, seed=6)
    by_id = {s.id: s for s in sources}
    kinds = {r.kind for r in rows}
    assert {"original", "pronoun", "ellipsis", "restated"} <= kinds
    for r in rows:
        src = by_id[r.source_id]
        assert r.split == src.split
        if r.kind in ("pronoun", "ellipsis"):
            assert r.type == QueryType.CONVERSATIONAL and r.complexity == src.complexity
            assert r.history[-1].lower().rstrip("?") == src.question.lower().rstrip("?")
        elif r.kind == "restated":
            assert r.type == QueryType.SIMPLE and r.complexity == Complexity.LOW and r.history
            assert any(e.lower() in r.query.lower() for e in src.entities)
        else:
            assert r.type == src.type and r.complexity == src.complexity
            if r.kind == "original+unrelated":
                other = r.history[0].lower().rstrip("?")
                assert any(other == s.question.lower().rstrip("?") for s in sources if s.split == src.split)


def test_history_alone_is_not_conversational() -> None:
    rows = build_labelled([source(i, "train") for i in range(80)], seed=1)
    with_history = [r for r in rows if r.history]
    assert {QueryType.SIMPLE, QueryType.CONVERSATIONAL} <= {r.type for r in with_history}


def test_load_labelled_keeps_heldout_apart(tmp_path: Path) -> None:
    rows = load_labelled(write_data(tmp_path), seed=13)
    assert {r.split for r in rows} == {"train", "heldout"}
    train_sources = {r.source_id for r in rows if r.split == "train"}
    assert not train_sources & {r.source_id for r in rows if r.split == "heldout"}
