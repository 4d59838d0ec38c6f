"""``rampart eval general``'s parts that need no model: row selection, the bounds, sampling, copies."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from services.common.errors import RampartError
from services.common.types import IDENT_PATTERN
from services.evaluation.attack import AttackQuestion
from services.evaluation.beir import iter_corpus, load_beir
from services.evaluation.copies import with_copies
from services.evaluation.general import (
    ATTACK_ROWS,
    CLEAN_ROWS,
    AttackRow,
    clean_checks,
    kept,
    pick_attacks,
    select_rows,
    worst_rows,
)
from tests.unit.test_evaluation import make_beir


def test_every_row_is_selectable_and_unknown_names_are_refused() -> None:
    clean, attacks = select_rows(None)
    assert len(clean) == len(CLEAN_ROWS) and len(attacks) == len(ATTACK_ROWS)
    clean, attacks = select_rows("med, rgb")
    assert [r.name for r in clean] == ["med"] and [r.name for r in attacks] == ["rgb"]
    with pytest.raises(RampartError, match=r"unknown rows.*nope"):
        select_rows("med,nope")


def test_dev_splits_only() -> None:
    """SciFact is read on train and HotpotQA-500 on its train half: never a test split we report."""
    rows = {r.name: r for r in CLEAN_ROWS}
    assert rows["scifact"].split == "train" and rows["hotpotqa"].half == "train"
    assert {r.name for r in CLEAN_ROWS if r.multihop} == {
        "hotpotqa",
        "2wikimultihopqa",
        "hotpotqa/linked",
        "2wikimultihopqa/linked",
    }
    # generic (the default) everywhere; linked only where the name says so
    for row in (*CLEAN_ROWS, *ATTACK_ROWS):
        assert (row.profile.value == "linked") == row.name.endswith("/linked")


def figures(
    off: float, search: float, routed: float, *, supp: tuple[float, float] = (0.5, 0.5)
) -> dict[str, dict[str, float]]:
    base = {"calls_per_query": 1.0, "latency_ms_p95": 1.0}
    return {
        "search-unchecked": {"ndcg@10": off, "recall@10": off, "all_supporting@10": supp[0], **base},
        "search": {"ndcg@10": search, "recall@10": search, "all_supporting@10": supp[0], **base},
        "routed": {"ndcg@10": routed, "recall@10": routed, "all_supporting@10": supp[1], **base},
    }


def test_clean_bounds() -> None:
    ok = clean_checks(figures(0.5, 0.495, 0.4965), multihop=False)
    assert all(ok.values())
    lost = clean_checks(figures(0.5, 0.485, 0.5), multihop=False)
    assert not lost["search ndcg@10 loss <= 0.01"] and lost["routed ndcg@10 loss <= 0.01"]
    routed_behind = clean_checks(figures(0.5, 0.5, 0.493), multihop=False)
    assert not routed_behind["routed ndcg@10 within 0.005 of single-shot"]
    hops = clean_checks(figures(0.5, 0.5, 0.5, supp=(0.46, 0.45)), multihop=True)
    assert not hops["routed all_supporting@10 >= single-shot"]


def test_worst_row_is_reported_not_the_average() -> None:
    rows = [
        {"row": "a", "kind": "clean", "figures": figures(0.5, 0.5, 0.5)},
        {"row": "b", "kind": "clean", "figures": figures(0.6, 0.55, 0.6)},
    ]
    worst = worst_rows(rows)
    assert worst["search ndcg@10 loss"] == {"value": 0.05, "row": "b"}
    assert worst["routed ndcg@10 loss"]["value"] == 0.0


def test_evidence_kept_is_a_share_of_the_undefended_level() -> None:
    assert kept(0.45, 0.5) == 0.9 and kept(0.0, 0.0) == 1.0


def test_attack_sample_is_fixed_and_truncates_texts() -> None:
    attacks = [
        AttackQuestion(f"q{i}", f"question {i}?", "a", "b", tuple(f"t{j}" for j in range(8)))
        for i in range(50)
    ]
    row = AttackRow("x", "src", "a.json", limit=10, max_texts=5)
    picked = pick_attacks(attacks, row)
    assert len(picked) == 10 and all(len(a.adv_texts) == 5 for a in picked)
    assert picked == pick_attacks(list(reversed(attacks)), row)  # the file's order does not matter
    assert [a.qid for a in picked] != [f"q{i}" for i in range(10)]  # not simply the first ten


def test_sample_draws_the_same_queries_whatever_the_file_order(tmp_path: Path) -> None:
    data = load_beir(make_beir(tmp_path / "set"), "test")
    one = data.sample(1)
    assert len(one.queries) == 1 and set(one.qrels) == set(one.queries)
    assert data.sample(None) is data and data.sample(5) is data


def test_copies_are_whole_documents_judged_like_their_originals(tmp_path: Path) -> None:
    data = load_beir(make_beir(tmp_path / "set"), "test")
    copied = with_copies(data, tmp_path / "copies", share=1.0, seed=3)
    originals = {d.doc_id: d for d in iter_corpus(data.path)}
    copies = [d for d in iter_corpus(copied.path) if "@copy" in d.doc_id]
    # every relevant document (d1, d2; d3 is judged 0) is pasted once or twice, verbatim, retitled
    assert {c.doc_id.split("@")[0] for c in copies} == {"d1", "d2"}
    for c in copies:
        assert re.match(IDENT_PATTERN, c.doc_id)  # ingestible as a Document id
        source = originals[c.doc_id.split("@")[0]]
        assert c.text == source.text and c.title != source.title and source.title in c.title
    for q, judged in copied.qrels.items():
        for d, grade in judged.items():
            assert grade == data.qrels[q][d.split("@")[0]]
    assert copied.queries == data.queries
    again = with_copies(data, tmp_path / "copies", share=1.0, seed=3)
    assert again.path == copied.path and again.qrels == copied.qrels
    with pytest.raises(RampartError, match="copy share"):
        with_copies(data, tmp_path / "copies", share=0.0)


def test_losses_say_which_rule_withheld_what_and_what_routing_dropped(tmp_path: Path) -> None:
    from services.common.types import Chunk, ScoredChunk
    from services.common.verdicts import Judgement, Verdict
    from services.evaluation.general import Losses, rule_of
    from services.evaluation.runner import Retrieved

    data = load_beir(make_beir(tmp_path / "set"), "test")  # q1 -> d1, q2 -> d2 (d3 judged 0)

    def hit(doc: str) -> ScoredChunk:
        return ScoredChunk(
            chunk=Chunk(chunk_id=f"{doc}#0", doc_id=doc, tenant="t", text="x", ordinal=0),
            scores={},
            fused=1.0,
        )

    def withheld(doc: str, verdict: Verdict, reason: str) -> Judgement:
        return Judgement(chunk_id=f"{doc}#0", doc_id=doc, verdict=verdict, score=1.0, reason=reason)

    losses = Losses(data)
    losses.observe("search-unchecked", "q1", Retrieved([hit("d1")]))
    losses.observe("search-unchecked", "q2", Retrieved([hit("d2"), hit("d3")]))
    copies = withheld(
        "d1", Verdict.ADVERSARIAL, "planted copies — 2 other documents say nearly the same (0.91)"
    )
    losses.observe("search", "q1", Retrieved([], filtered=[copies]))
    losses.observe("search", "q2", Retrieved([hit("d2")], filtered=[withheld("d3", Verdict.IRRELEVANT, "x")]))
    losses.observe("routed", "q1", Retrieved([hit("d1")]))
    losses.observe("routed", "q2", Retrieved([hit("d3")]))  # d2 dropped, nothing withheld it
    assert losses.report() == {
        "search": {"adversarial: planted copies": 1},  # d3 is not relevant: not a loss
        "routed": {"not withheld, not reached": 1},
    }
    assert (
        rule_of("no sentence covers the query (best covers 12% of its terms)")
        == "no sentence covers the query"
    )
