"""``rampart eval claims`` end to end on a tiny SciFact-shaped folder the test writes: three claims
(one SUPPORT, one CONTRADICT with a number changed, one NEI) judged by the configured checker."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from services.cli.main import app
from tests.integration.test_cli import run

CORPUS = [
    {
        "doc_id": 11,
        "title": "Daily low-dose aspirin and myocardial infarction",
        "abstract": [
            "We followed 4,000 adults for five years.",
            "Daily low-dose aspirin lowered the risk of heart attack by 20% compared with placebo.",
        ],
    },
    {
        "doc_id": 12,
        "title": "Aspirin in primary prevention",
        "abstract": ["Aspirin reduced heart attack risk in some groups and not in others."],
    },
    {
        "doc_id": 21,
        "title": "Vitamin D supplements and hip fractures in older adults",
        "abstract": [
            "In a trial of 2,500 adults over 65, vitamin D supplements reduced hip fracture risk by 3%.",
            "The difference was not significant.",
        ],
    },
    {
        "doc_id": 22,
        "title": "Dietary calcium intake in Northern Europe",
        "abstract": ["Calcium intake varies with dairy consumption across countries."],
    },
    {
        "doc_id": 31,
        "title": "Sleep duration in adolescents",
        "abstract": ["Adolescents sleep less on school nights than on weekends."],
    },
]

CLAIMS = [
    {
        "id": 1,
        "claim": "Daily aspirin lowers the risk of heart attack by 20%.",
        # doc 12 has one SUPPORT and one CONTRADICT set: a tie, judged as a peer but not scored
        "evidence": {
            "11": [{"sentences": [1], "label": "SUPPORT"}],
            "12": [{"sentences": [0], "label": "SUPPORT"}, {"sentences": [0], "label": "CONTRADICT"}],
        },
        "cited_doc_ids": [11],
    },
    {
        "id": 2,
        "claim": "Vitamin D supplements reduce hip fracture risk by 30% in adults over 65.",
        "evidence": {"21": [{"sentences": [0], "label": "CONTRADICT"}]},
        "cited_doc_ids": [21, 22],
    },
    {"id": 3, "claim": "Teenagers sleep more than adults.", "evidence": {}, "cited_doc_ids": [31]},
]


def write_claims(root: Path) -> Path:
    root.mkdir(parents=True)
    (root / "corpus.jsonl").write_text("".join(json.dumps(d) + "\n" for d in CORPUS))
    (root / "claims_dev.jsonl").write_text("".join(json.dumps(c) + "\n" for c in CLAIMS))
    return root


def test_eval_claims_reports_confusion_and_per_class_figures(env: dict[str, str], tmp_path: Path) -> None:
    data = write_claims(tmp_path / "scifact_claims")
    out_json = tmp_path / "claims.json"
    printed = run(env, "eval", "claims", str(data), "--split", "dev", "--json", str(out_json))
    assert "relevant precision" in printed and "counterfactual recall" in printed
    r = json.loads(out_json.read_text())
    assert {
        "command",
        "claims_dir",
        "split",
        "fact_checker",
        "factcheck",
        "claims",
        "checks",
        "degraded_checks",
        "documents_scored",
        "skipped_ties",
        "gold_counts",
        "confusion",
        "relevant",
        "counterfactual",
        "latency_ms_p50",
        "latency_ms_p95",
    } <= set(r)
    assert r["split"] == "dev" and r["claims"] == 3 and r["checks"] == 3 and r["degraded_checks"] == 0
    assert r["gold_counts"] == {"SUPPORT": 1, "CONTRADICT": 1, "NEI": 2}
    assert r["documents_scored"] == 4 and r["skipped_ties"] == 1
    assert set(r["confusion"]) == {"SUPPORT", "CONTRADICT", "NEI"}
    assert set(r["confusion"]["NEI"]) == {"relevant", "irrelevant", "adversarial", "counterfactual"}
    for name, positives in (("relevant", 1), ("counterfactual", 1)):
        assert set(r[name]) == {"precision", "recall", "true_positives", "predicted", "positives"}
        assert r[name]["positives"] == positives and 0.0 <= r[name]["recall"] <= 1.0
    # the supporting abstract covers the claim's terms: judged RELEVANT
    assert r["confusion"]["SUPPORT"]["relevant"] == 1 and r["relevant"]["recall"] == 1.0
    assert r["latency_ms_p50"] > 0 and r["latency_ms_p95"] >= r["latency_ms_p50"]
    assert r["factcheck"]["backend"] == "inprocess"


def test_eval_claims_refuses_the_test_split(env: dict[str, str], tmp_path: Path) -> None:
    data = write_claims(tmp_path / "scifact_claims")
    result = CliRunner().invoke(app, ["eval", "claims", str(data), "--split", "test"], env=env)
    assert result.exit_code == 2, result.output
    message = " ".join(result.output.split())  # rich wraps long lines
    assert "no public labels" in message and "use --split dev" in message
    missing = CliRunner().invoke(app, ["eval", "claims", str(tmp_path / "nope")], env=env)
    assert missing.exit_code == 2 and "not found" in " ".join(missing.output.split())
