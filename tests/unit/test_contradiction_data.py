"""Contradiction-classifier training data: SciFact pairs, NEI picks and synthetic contradictions."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from services.common.errors import ErrorCode, RampartError
from services.models import contradiction_data as cd
from services.models.contradiction_data import (
    Label,
    NliPair,
    build_nli_dataset,
    load_claim_pairs,
    synthetic_contradictions,
)

DOCS = {
    1: ["Aspirin was studied in 400 adults.", "Aspirin reduced stroke risk by 30%.", "Funding was public."],
    2: ["Statins were given for 5 years.", "Statins did not lower mortality.", "Adherence was high."],
    3: ["Mice were bred in a lab.", "Weights were recorded weekly.", "Diet was controlled."],
    4: ["BRCA1 mutations were sequenced.", "BRCA1 loss increased tumour growth.", "Cohorts were matched."],
}
CLAIMS: list[dict[str, Any]] = [
    {
        "id": 1,
        "claim": "Aspirin reduces stroke risk.",
        "evidence": {"1": [{"sentences": [1], "label": "SUPPORT"}]},
    },
    {
        "id": 2,
        "claim": "Statins lower mortality.",
        "evidence": {"2": [{"sentences": [1], "label": "CONTRADICT"}]},
    },
    {"id": 3, "claim": "Mice gain weight on a fat diet.", "evidence": {}, "cited_doc_ids": [3]},
    {
        "id": 4,
        "claim": "BRCA1 loss increases tumour growth.",
        "evidence": {"4": [{"sentences": [0, 1], "label": "SUPPORT"}]},
    },
]


def write_claims(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    rows = [{"cited_doc_ids": [int(d) for d in c["evidence"]], **c} for c in CLAIMS]
    (folder / "claims_train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    corpus = [{"doc_id": d, "title": f"doc {d}", "abstract": s} for d, s in DOCS.items()]
    (folder / "corpus.jsonl").write_text("".join(json.dumps(r) + "\n" for r in corpus), encoding="utf-8")
    return folder


def test_pairs_and_labels_from_claims(tmp_path: Path) -> None:
    pairs = load_claim_pairs(write_claims(tmp_path), "train", seed=0)
    gold = [(p.premise, p.hypothesis, p.label, p.source) for p in pairs if p.source == "scifact"]
    assert gold == [
        ("Aspirin reduced stroke risk by 30%.", "Aspirin reduces stroke risk.", Label.SUPPORT, "scifact"),
        ("Statins did not lower mortality.", "Statins lower mortality.", Label.CONTRADICT, "scifact"),
        (
            "BRCA1 mutations were sequenced. BRCA1 loss increased tumour growth.",
            "BRCA1 loss increases tumour growth.",
            Label.SUPPORT,
            "scifact",
        ),
    ]
    nei = {p.hypothesis: p for p in pairs if p.label is Label.NEI}
    assert set(nei) == {c["claim"] for c in CLAIMS}  # one NEI pair per claim
    cited = nei["Mice gain weight on a fat diet."]
    assert cited.source == "scifact:nei_cited"
    assert cited.premise in {" ".join(DOCS[3][i : i + k]) for k in (1, 2) for i in range(4 - k)}
    for claim_id, doc in ((1, 1), (2, 2), (4, 4)):
        pair = nei[CLAIMS[claim_id - 1]["claim"]]
        assert pair.source == "scifact:nei_sentence"
        used = {i for s in CLAIMS[claim_id - 1]["evidence"][str(doc)] for i in s["sentences"]}
        assert pair.premise in [s for i, s in enumerate(DOCS[doc]) if i not in used]


def test_deterministic_for_a_seed(tmp_path: Path) -> None:
    folder = write_claims(tmp_path)
    assert load_claim_pairs(folder, "train", seed=3) == load_claim_pairs(folder, "train", seed=3)
    assert build_nli_dataset(folder, seed=3) == build_nli_dataset(folder, seed=3)
    picks = {
        tuple(p.premise for p in load_claim_pairs(folder, "train", seed=s) if p.label is Label.NEI)
        for s in range(20)
    }
    assert len(picks) > 1  # the seed drives the NEI picks


def test_test_split_refused(tmp_path: Path) -> None:
    with pytest.raises(RampartError) as err:
        load_claim_pairs(write_claims(tmp_path), "test", seed=0)
    assert "train" in err.value.message and "no public labels" in err.value.message


def test_missing_folder_names_the_path(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere"
    with pytest.raises(RampartError) as err:
        load_claim_pairs(missing, "train", seed=0)
    assert err.value.code is ErrorCode.FAILED_PRECONDITION
    assert str(missing / "claims_train.jsonl") in err.value.message


def support(premise: str, claim: str) -> NliPair:
    return NliPair(premise, claim, Label.SUPPORT, "scifact")


def kinds(pairs: list[NliPair], seed: int = 0) -> dict[str, list[NliPair]]:
    out: dict[str, list[NliPair]] = {}
    for p in synthetic_contradictions(pairs, seed=seed):
        out.setdefault(p.source, []).append(p)
    return out


def test_number_swap_keeps_format_and_changes_value() -> None:
    pair = support("Exposure increased by 30% the risk of asthma.", "Exposure increases asthma risk by 30%.")
    for seed in range(10):
        (edit,) = kinds([pair], seed)["synthetic:number"]
        assert edit.label is Label.CONTRADICT and edit.hypothesis == pair.hypothesis
        assert "30%" not in edit.premise
        assert edit.premise.startswith("Exposure increased by ") and edit.premise.endswith(
            "% the risk of asthma."
        )


def test_number_swap_ignores_identifiers() -> None:
    pair = support("IL-6 and CD4 levels were measured.", "IL-6 and CD4 are measured in 6 trials.")
    assert "synthetic:number" not in kinds([pair])


@pytest.mark.parametrize(
    ("premise", "claim", "expected"),
    [
        ("Metformin increased insulin sensitivity.", "Metformin increases insulin sensitivity.", "decreased"),
        ("Smoking was associated with cancer.", "Smoking is linked to cancer.", "was not associated"),
        ("The drug did not affect survival.", "The drug does not change survival.", "did affect"),
    ],
)
def test_negation_flips_polarity(premise: str, claim: str, expected: str) -> None:
    (edit,) = kinds([support(premise, claim)])["synthetic:negation"]
    assert edit.label is Label.CONTRADICT and edit.source == "synthetic:negation"
    assert edit.premise != premise and expected in edit.premise


def test_entity_swap_uses_another_pairs_entity() -> None:
    a = support("Loss of BRCA1 drives tumour growth.", "BRCA1 loss drives tumours.")
    b = support("TP53 mutations are frequent in gliomas.", "Gliomas often carry mutations.")
    edits = kinds([a, b])["synthetic:entity"]
    assert [e.premise for e in edits] == ["Loss of TP53 drives tumour growth."]
    assert edits[0].label is Label.CONTRADICT and edits[0].hypothesis == a.hypothesis


def test_no_edit_means_no_pair_and_never_unchanged(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    plain = support("Outcomes differed across sites.", "Outcomes vary.")
    assert synthetic_contradictions([plain], seed=0) == []
    assert synthetic_contradictions([NliPair("It increased.", "It increases.", Label.NEI, "x")], seed=0) == []
    base = load_claim_pairs(write_claims(tmp_path), "train", seed=0)
    originals = {(p.hypothesis, p.premise) for p in base}
    for p in synthetic_contradictions(base, seed=0):
        assert (p.hypothesis, p.premise) not in originals
    # an editor returning the same text (up to case and spacing) yields nothing
    monkeypatch.setattr(cd, "_number_edit", lambda pair, _rng: "  " + pair.premise.upper())
    pair = support("Levels rose by 30%.", "Levels rise by 30%.")
    assert "synthetic:number" not in kinds([pair])


def test_per_kind_limit_and_counts(tmp_path: Path) -> None:
    pairs = [
        support(f"Drug A raised levels by {n}%.", f"Drug A raises levels by {n}%.") for n in (10, 20, 40)
    ]
    capped = synthetic_contradictions(pairs, seed=1, per_kind_limit=1)
    assert sum(p.source == "synthetic:number" for p in capped) == 1
    data, counts = build_nli_dataset(write_claims(tmp_path), seed=0)
    assert counts["label:SUPPORT"] == 2 and counts["label:NEI"] == 4
    assert counts["label:CONTRADICT"] == 1 + sum(
        v for k, v in counts.items() if k.startswith("source:synthetic")
    )
    assert sum(v for k, v in counts.items() if k.startswith("label:")) == len(data)
    plain, plain_counts = build_nli_dataset(write_claims(tmp_path), seed=0, synthetic=False)
    assert len(plain) == 7 and not any(k.startswith("source:synthetic") for k in plain_counts)
