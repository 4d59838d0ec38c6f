"""Tiny but complete ``rampart train contradiction`` runs on a SciFact-shaped folder the test writes
(no ../shared needed): train (checkpoint, resume) → validate on dev → export fp32 + int8 → model card
→ :class:`ContradictionModel` serves it, agreeing with PyTorch; and the runtime scorer never fails on
bad text."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

from services.cli.main import app
from services.common.errors import ErrorCode, RampartError
from services.factcheck.config import FactCheckSettings
from services.factcheck.contradiction import LABELS, ContradictionModel, build_contradiction_model
from services.models.reranker_export import read_manifest

FACTS = [
    ("Aspirin", "reduced", "stroke risk", "increased"),
    ("Statins", "lowered", "mortality", "raised"),
    ("Exercise", "improved", "blood pressure", "worsened"),
    ("Vitamin D", "increased", "bone density", "decreased"),
    ("Smoking cessation", "reduced", "lung cancer deaths", "increased"),
    ("Coffee", "lowered", "diabetes risk", "raised"),
    ("Metformin", "reduced", "HbA1c levels", "increased"),
    ("Sleep loss", "increased", "insulin resistance", "decreased"),
]
PAIRS = [
    ("Aspirin reduced stroke risk by 30% in 400 adults.", "Aspirin reduces stroke risk."),
    ("Aspirin increased stroke risk by 30% in 400 adults.", "Aspirin reduces stroke risk."),
    ("The cafeteria menu changes every Monday.", "Vitamin D improves bone density."),
]


def write_claims(root: Path) -> Path:
    """claims_train/dev.jsonl + corpus.jsonl: each fact supported by one abstract, contradicted by another."""
    root.mkdir(parents=True)
    corpus, train, dev = [], [], []
    for k, (subject, verb, outcome, opposite) in enumerate(FACTS):
        sup, con = 2 * k + 1, 2 * k + 2
        corpus.append(
            {
                "doc_id": sup,
                "abstract": [
                    f"We studied {subject.lower()} in {100 + k} patients.",
                    f"{subject} {verb} {outcome} in the treated group.",
                    "Follow-up lasted two years.",
                ],
            }
        )
        corpus.append(
            {
                "doc_id": con,
                "abstract": [
                    f"A second cohort received {subject.lower()}.",
                    f"{subject} {opposite} {outcome} compared with placebo.",
                    "Funding was public.",
                ],
            }
        )
        claim = {
            "id": k,
            "claim": f"{subject} {verb} {outcome}.",
            "evidence": {
                str(sup): [{"sentences": [1], "label": "SUPPORT"}],
                str(con): [{"sentences": [1], "label": "CONTRADICT"}],
            },
            "cited_doc_ids": [sup, con],
        }
        (dev if k >= 6 else train).append(claim)
    for name, rows in (("claims_train", train), ("claims_dev", dev), ("corpus", corpus)):
        (root / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return root


def run_cli(root: Path, out: Path, *extra: str) -> Any:
    env = {"RAMPART_DATA_DIR": str(root / "state"), "RAMPART_LOG_LEVEL": "WARNING"}
    args = ["train", "contradiction", "--data", str(root / "claims"), "--out", str(out)]
    args += ["--batch-size", "4", "--max-length", "64", "--checkpoint-every", "1", "--model-id", "tiny-nli"]
    result = CliRunner().invoke(app, [*args, *extra], env=env, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The default (mean-pool) head: one epoch, then the same command asked for two must resume."""
    root = tmp_path_factory.mktemp("nli")
    write_claims(root / "claims")
    out = root / "run"
    run_cli(root, out, "--epochs", "1")
    first = json.loads((out / "checkpoint" / "trainer_state.json").read_text())
    per_epoch = first["step"]
    assert per_epoch > 0 and len(first["history"]) == 1
    run_cli(root, out, "--epochs", "2")
    state = json.loads((out / "checkpoint" / "trainer_state.json").read_text())
    assert state["step"] == 2 * per_epoch and len(state["losses"]) == 2 * per_epoch
    assert [h["epoch"] for h in state["history"]] == [1.0, 2.0]
    return out


def torch_probs(hf_dir: Path, pairs: list[tuple[str, str]], max_length: int) -> np.ndarray:
    import torch
    from tokenizers import Tokenizer

    from services.models.torch_reranker import load_torch_reranker
    from services.rerank.pair_scorer import configure_tokenizer, pad_batch

    model = load_torch_reranker(hf_dir)
    tok = configure_tokenizer(Tokenizer.from_file(str(hf_dir / "tokenizer.json")), max_length)
    rows = []
    for a, b in pairs:
        feeds = {k: torch.from_numpy(v) for k, v in pad_batch([tok.encode(a, b)]).items()}
        with torch.no_grad():
            rows.append(torch.softmax(model(**feeds).logits[0].float(), dim=-1).numpy())
    return np.array(rows)


def test_training_writes_variants_manifest_and_card(trained: Path) -> None:
    onnx = trained / "onnx"
    manifest = read_manifest(onnx)
    assert manifest is not None and manifest["model_id"] == "tiny-nli"
    assert manifest["labels"] == list(LABELS) and manifest["architecture"] == "mean-pool-bert"
    assert set(manifest["variants"]) == {"fp32", "int8"} and manifest["max_length"] == 64
    assert manifest["fused_operators"].get("Attention") == 6
    checks = manifest["checks"]
    assert checks["fp32_max_abs_diff"] < 1e-3 and checks["int8_label_agreement"] >= 0.9
    assert set(manifest["dev"]) == {"fp32", "int8"} and manifest["dev"]["int8"]["pairs"] == 6
    assert manifest["training"]["data"]["label:CONTRADICT"] > 0
    assert (
        manifest["dev_int8_drift"]["pairs"] == 6
        and 0 <= manifest["dev_int8_drift"]["prob_diff_vs_fp32_max"] <= 1
    )
    card = (onnx / "MODEL_CARD.md").read_text()
    assert "rampart train contradiction" in card and "macro-F1" in card and "| label:SUPPORT |" in card
    assert "Held-out edits" in card and "int8 on all dev pairs" in card
    assert "transfers to Wikipedia-style" in card


def test_served_model_predicts_probabilities_and_agrees_with_pytorch(trained: Path) -> None:
    expected = torch_probs(trained / "hf", PAIRS, 64)
    for variant, tolerance in (("fp32", 1e-3), ("int8", 0.1)):
        model = ContradictionModel.from_dir(trained / "onnx", variant=variant)
        assert model.model_id.startswith("tiny-nli@") and model.model_id.endswith(f":{variant}")
        probs = model.predict(PAIRS)
        assert probs.shape == (3, 3) and probs.dtype == np.float32
        assert np.allclose(probs.sum(axis=1), 1.0, atol=1e-5) and (probs >= 0).all()
        # one pair per call here: int8 scales activations per batch
        single = np.vstack([model.predict([p]) for p in PAIRS])
        assert np.abs(single - expected).max() < tolerance, variant


def test_bad_text_is_scored_never_fatal(trained: Path) -> None:
    model = ContradictionModel.from_dir(trained / "onnx")
    junk = bytes(range(256)).decode("latin-1")
    odd = [
        ("", ""),
        ("", "a claim"),
        ("evidence " * 200_000, "a claim"),  # 1.8 MB: cut before tokenising
        (junk * 20, junk),
        ("lone \udcff surrogate", "and \ud800 another"),
        ("\x00\x00\x00", "🙂" * 5000),
    ]
    probs = model.predict(odd)
    assert probs.shape == (len(odd), 3) and np.isfinite(probs).all()
    assert np.allclose(probs.sum(axis=1), 1.0, atol=1e-5)
    assert model.predict([]).shape == (0, 3)
    for bad in ("evidence, claim", [("only one",)], [(b"bytes", "claim")], [("evidence", None)]):
        with pytest.raises(RampartError) as err:
            model.predict(bad)  # type: ignore[arg-type]
        assert err.value.code is ErrorCode.INVALID_ARGUMENT


def test_one_session_call_per_32_pairs(trained: Path) -> None:
    model = ContradictionModel.from_dir(trained / "onnx")
    session = model._scorer.session
    calls: list[int] = []

    class Counting:
        def run(self, names: Any, feeds: dict[str, np.ndarray]) -> Any:
            calls.append(len(feeds["input_ids"]))
            return session.run(names, feeds)

    model._scorer.session = Counting()
    probs = model.predict([(f"evidence number {i}", "claim") for i in range(70)])
    assert probs.shape == (70, 3) and calls == [32, 32, 6]


def test_factory_follows_settings(trained: Path, tmp_path: Path) -> None:
    on = FactCheckSettings(contradiction_model_dir=trained / "onnx")
    model = build_contradiction_model(on, tmp_path)
    assert isinstance(model, ContradictionModel) and model.model_id.endswith(":int8")
    off = FactCheckSettings(use_contradiction_model=False)
    assert build_contradiction_model(off, tmp_path) is None
    with pytest.raises(RampartError, match="USE_CONTRADICTION_MODEL=false") as err:
        build_contradiction_model(FactCheckSettings(), tmp_path)
    assert (
        err.value.code is ErrorCode.FAILED_PRECONDITION
        and str(tmp_path / "contradiction") in err.value.message
    )


def test_cls_head_exports_as_a_hugging_face_classifier(tmp_path: Path) -> None:
    write_claims(tmp_path / "claims")
    run_cli(tmp_path, tmp_path / "run", "--head", "cls", "--epochs", "1", "--variants", "fp32")
    manifest = read_manifest(tmp_path / "run" / "onnx")
    assert (
        manifest is not None and manifest["architecture"] == "bert" and set(manifest["variants"]) == {"fp32"}
    )
    model = ContradictionModel.from_dir(tmp_path / "run" / "onnx", variant="fp32")
    expected = torch_probs(tmp_path / "run" / "hf", PAIRS, 64)
    assert np.abs(np.vstack([model.predict([p]) for p in PAIRS]) - expected).max() < 1e-3
