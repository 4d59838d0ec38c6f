"""Tiny but complete ``rampart train reranker`` runs: index → mine with the hybrid retriever → train
(checkpoint, resume) → export fp32 + int8 → model card; then ONNX must agree with PyTorch, for both
architectures (``cls``: a Hugging Face cross-encoder; ``split``: the default, bi-encoder initialised),
and the same export path must take any Hugging Face cross-encoder folder (what deployments load by
name)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from services.cli.main import app
from services.models.reranker_card import render_card
from services.models.reranker_export import export_reranker, read_manifest, spearman
from services.rerank.onnx_reranker import OnnxReranker
from tests.conftest import flat

TOPICS = {
    "aspirin": "Aspirin lowers the risk of heart attack and stroke in adults with vascular disease.",
    "statins": "Statins reduce LDL cholesterol and cardiovascular events in high-risk patients.",
    "vitamin": "Vitamin D supplements improve bone mineral density in elderly women.",
    "exercise": "Aerobic exercise training improves cardiorespiratory fitness and blood pressure.",
    "sleep": "Short sleep duration is associated with obesity and insulin resistance.",
    "smoking": "Smoking cessation reduces lung cancer mortality over ten years.",
    "coffee": "Coffee consumption is linked with a lower risk of type 2 diabetes.",
    "malaria": "Artemisinin combination therapy cures uncomplicated falciparum malaria.",
}
PAIRS = [
    ("does aspirin prevent heart attacks", TOPICS["aspirin"]),
    ("does aspirin prevent heart attacks", TOPICS["coffee"]),
    ("malaria treatment", TOPICS["malaria"]),
    ("malaria treatment", TOPICS["sleep"]),
    ("", ""),
    ("long", "word " * 2000),
]


def write_training_data(root: Path) -> Path:
    """A SciFact-shaped folder (corpus, queries, qrels/train.tsv) with three documents per topic."""
    sci = root / "scifact"
    (sci / "qrels").mkdir(parents=True)
    docs, queries, qrels = [], [], []
    for t, (topic, text) in enumerate(TOPICS.items()):
        for k in range(3):
            docs.append({"_id": f"{topic}{k}", "title": f"{topic} study {k}", "text": f"{text} Cohort {k}."})
        queries.append({"_id": f"q{t}", "text": f"what does research say about {topic}"})
        qrels.append(f"q{t}\t{topic}0\t1")
    (sci / "corpus.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs))
    (sci / "queries.jsonl").write_text("".join(json.dumps(q) + "\n" for q in queries))
    (sci / "qrels" / "train.tsv").write_text("query-id\tcorpus-id\tscore\n" + "\n".join(qrels) + "\n")
    return root


def train_tiny(root: Path, models_dir: Path, *extra: str) -> Path:
    """Two steps, then the same command asked for three: the second call must resume, not restart."""
    env = {
        "RAMPART_EVAL_DATA_DIR": str(write_training_data(root / "data")),
        "RAMPART_DATA_DIR": str(root / "state"),
        "RAMPART_MODELS_DIR": str(models_dir),
        "RAMPART_LOG_LEVEL": "WARNING",
    }
    common = [
        "train",
        "reranker",
        "--out",
        str(root / "run"),
        "--sources",
        "scifact",
        "--groups-per-step",
        "2",
    ]
    common += ["--negatives", "2", "--max-length", "64", "--checkpoint-every", "1", "--model-id", "tiny-ce"]
    common += list(extra)
    first = CliRunner().invoke(app, [*common, "--max-steps", "2"], env=env, catch_exceptions=False)
    assert first.exit_code == 0, first.output
    state = json.loads((root / "run" / "checkpoint" / "trainer_state.json").read_text())
    assert state["step"] == 2
    # Same run asked for one more step: resumes from the checkpoint instead of starting over.
    second = CliRunner().invoke(app, [*common, "--max-steps", "3"], env=env, catch_exceptions=False)
    assert second.exit_code == 0, second.output
    state = json.loads((root / "run" / "checkpoint" / "trainer_state.json").read_text())
    assert state["step"] == 3 and len(state["losses"]) == 3
    return root / "run"


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory, models_dir: Path) -> Path:
    """The classic [CLS]-head architecture, trained with the residual objective from a zero head."""
    return train_tiny(
        tmp_path_factory.mktemp("train"),
        models_dir,
        *("--architecture", "cls", "--prior-weight", "3", "--zero-head"),
    )


@pytest.fixture(scope="module")
def trained_split(tmp_path_factory: pytest.TempPathFactory, models_dir: Path) -> Path:
    """The default architecture (bi-encoder initialised, 5 split layers)."""
    return train_tiny(tmp_path_factory.mktemp("train-split"), models_dir)


def test_training_writes_both_variants_and_a_model_card(trained: Path) -> None:
    onnx = trained / "onnx"
    manifest = read_manifest(onnx)
    assert manifest is not None and manifest["model_id"] == "tiny-ce" and manifest["max_length"] == 64
    assert set(manifest["variants"]) == {"fp32", "int8"}
    assert isinstance(manifest["first_stage_weight"], float)  # learned, starting from 3
    assert OnnxReranker.from_dir(onnx).first_stage_weight == manifest["first_stage_weight"]
    assert manifest["fused_operators"].get("Attention") == 6
    assert (onnx / "model.int8.onnx").stat().st_size < (onnx / "model.onnx").stat().st_size / 3
    card = (onnx / "MODEL_CARD.md").read_text()
    assert "rampart train reranker" in card and "| scifact |" in card and "val_mrr" in card
    # the card reads which HotpotQA half trained it from the manifest: a cross-fitted one says so
    assert manifest["hotpotqa_half"] == "train" and "Cross-fitted" not in card
    crossed = render_card(
        model_id="x",
        command="c",
        config={},
        result={
            "groups_by_source": {},
            "val_groups": 0,
            "steps": 1,
            "pairs_seen": 1,
            "seconds": 1.0,
            "stopped_by": "max_steps",
            "final_loss": 0.0,
        },
        mined={},
        manifest={**manifest, "hotpotqa_half": "heldout"},
    )
    assert "**Cross-fitted**" in crossed and "Never serve it" in crossed


def torch_scores(hf_dir: Path, pairs: list[tuple[str, str]], max_length: int) -> np.ndarray:
    """PyTorch logits of either architecture, tokenised by the folder's own tokenizer.json."""
    import torch
    from tokenizers import Tokenizer

    from services.models.torch_reranker import load_torch_reranker
    from services.rerank.pair_scorer import configure_tokenizer, pad_batch

    model = load_torch_reranker(hf_dir)
    tok = configure_tokenizer(Tokenizer.from_file(str(hf_dir / "tokenizer.json")), max_length)
    out = []
    for q, p in pairs:
        feeds = {k: torch.from_numpy(v) for k, v in pad_batch([tok.encode(q, p)]).items()}
        with torch.no_grad():
            out.append(float(model(**feeds).logits[0, 0]))
    return np.array(out)


def test_onnx_agrees_with_pytorch(trained: Path) -> None:
    expected = torch_scores(trained / "hf", PAIRS, 64)
    for variant, tolerance in (("fp32", 1e-3), ("int8", 0.1)):
        reranker = OnnxReranker.from_dir(trained / "onnx", variant=variant)
        got = np.array([reranker.score(q or " ", [p])[0] for q, p in PAIRS[:4]] + [0.0, 0.0])
        assert np.abs(got[:4] - expected[:4]).max() < tolerance, variant
    fp32 = OnnxReranker.from_dir(trained / "onnx", variant="fp32")
    assert (
        spearman(
            fp32.score("q", [p for _, p in PAIRS]),
            OnnxReranker.from_dir(trained / "onnx").score("q", [p for _, p in PAIRS]),
        )
        > 0.8
    )


def test_any_hf_cross_encoder_folder_exports_the_same_way(trained: Path, tmp_path: Path) -> None:
    """The by-name path deployments use: a standard HF folder (config, weights, tokenizer) → ONNX."""
    out = export_reranker(trained / "hf", tmp_path / "hf-export", max_length=128, variants=("fp32",))
    manifest = read_manifest(out)
    assert manifest is not None and manifest["model_id"] == "hf" and set(manifest["variants"]) == {"fp32"}
    reranker = OnnxReranker.from_dir(out, variant="fp32")
    assert reranker.score("malaria treatment", [TOPICS["malaria"]])[0] == pytest.approx(
        torch_scores(trained / "hf", [("malaria treatment", TOPICS["malaria"])], 128)[0], abs=1e-3
    )


def test_export_refuses_a_classifier_with_several_labels(tmp_path: Path, trained: Path) -> None:
    import transformers

    from services.common.errors import RampartError

    model = transformers.AutoModelForSequenceClassification.from_pretrained(
        str(trained / "hf"), num_labels=3, ignore_mismatched_sizes=True
    )
    model.save_pretrained(tmp_path / "nli")
    (tmp_path / "nli" / "tokenizer.json").write_bytes((trained / "hf" / "tokenizer.json").read_bytes())
    with pytest.raises(RampartError, match="exactly one"):
        export_reranker(tmp_path / "nli", tmp_path / "out")


def test_split_architecture_trains_exports_and_agrees_with_pytorch(trained_split: Path) -> None:
    manifest = read_manifest(trained_split / "onnx")
    assert manifest is not None and manifest["architecture"] == "split-bert" and manifest["split_layers"] == 5
    assert "first_stage_weight" not in manifest  # not a residual model: served fused
    assert (trained_split / "onnx" / "model.int8.onnx").stat().st_size < 30e6  # shippable in the repo
    card = (trained_split / "onnx" / "MODEL_CARD.md").read_text()
    assert "split" in card and "val_mrr_fused" in card
    from tokenizers import Tokenizer

    from services.rerank.pair_scorer import configure_tokenizer

    tok = configure_tokenizer(Tokenizer.from_file(str(trained_split / "hf" / "tokenizer.json")), 64)
    assert tok.encode("q", "p").tokens.count("[CLS]") == 2  # each segment reads as a bi-encoder input
    pairs = [*PAIRS[:4], PAIRS[5]]
    expected = torch_scores(trained_split / "hf", pairs, 64)
    for variant, tolerance in (("fp32", 1e-3), ("int8", 1.0)):
        reranker = OnnxReranker.from_dir(trained_split / "onnx", variant=variant)
        got = np.array([reranker.score(q, [p])[0] for q, p in pairs])
        assert np.abs(got - expected).max() < tolerance, variant


def write_hotpot(root: Path, n: int = 24) -> Path:
    """A HotpotQA-500-shaped folder (hotpotqa_dev500/beir with test qrels) of ``n`` questions."""
    beir = root / "hotpotqa_dev500" / "beir"
    (beir / "qrels").mkdir(parents=True)
    docs = [{"_id": f"d{i}", "title": f"Page {i}", "text": f"Page {i} is about topic {i}."} for i in range(n)]
    queries = [{"_id": f"q{i}", "text": f"what is topic {i}"} for i in range(n)]
    (beir / "corpus.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs))
    (beir / "queries.jsonl").write_text("".join(json.dumps(q) + "\n" for q in queries))
    qrels = "".join(f"q{i}\td{i}\t1\n" for i in range(n))
    (beir / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n" + qrels)
    return root


def test_hotpotqa_half_selects_the_questions_trained_on(tmp_path: Path) -> None:
    from services.common.settings import RampartSettings
    from services.evaluation.splits import query_split_of
    from services.models.reranker_data import load_source

    settings = RampartSettings(eval_data_dir=write_hotpot(tmp_path / "data"), data_dir=tmp_path / "state")
    train, _ = load_source("hotpotqa", settings, tmp_path / "cache")
    held, _ = load_source("hotpotqa", settings, tmp_path / "cache", hotpotqa_half="heldout")
    assert (train.split, held.split) == ("train-half", "heldout-half")
    assert train.queries and held.queries and set(train.queries).isdisjoint(held.queries)
    assert all(query_split_of(q) == "heldout" for q in held.queries)
    assert len(train.queries) + len(held.queries) == 24


def write_classic_pairs(root: Path) -> Path:
    """rerank_train/classic_ir/pairs.jsonl with two collections trained on and one evaluated on."""
    folder = root / "rerank_train" / "classic_ir"
    folder.mkdir(parents=True)
    rows = []
    for col in ("npl", "adi", "cranfield"):
        for q in range(3):
            doc = {"id": f"{col}-d{q}", "title": "", "text": f"{col} document {q} on subject {q}"}
            neg = {
                "id": f"{col}-d9{q}",
                "title": "",
                "text": f"{col} other text {q}",
                "kind": "bm25_unjudged",
            }
            rows.append(
                {
                    "query_id": f"{col}-q{q}",
                    "query": f"subject {q} in {col}",
                    "pos": [doc],
                    "neg": [neg],
                    "source": "classic_ir",
                    "domain": col,
                }
            )
    (folder / "pairs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return root


def test_domain_sources_train_only_on_what_no_evaluation_uses(tmp_path: Path) -> None:
    """Issue 38's sources: the classic pairs of the four collections no evaluation uses (never
    Cranfield, CISI, CACM, MED), 2WikiMultihopQA's train half, and with domain halves SciFact's and
    NQ's train halves: each disjoint from the half `rampart eval rerank-domains` reports on."""
    import shutil

    from services.common.settings import RampartSettings
    from services.evaluation.splits import query_split_of
    from services.models.reranker_data import load_source

    data = write_classic_pairs(tmp_path / "data")
    wiki = write_hotpot(tmp_path / "wiki") / "hotpotqa_dev500"
    shutil.copytree(wiki, data / "2wikimultihopqa_dev164")
    settings = RampartSettings(eval_data_dir=data, data_dir=tmp_path / "state")
    classic, _ = load_source("classic", settings, tmp_path / "cache")
    assert sorted(classic.queries) == [f"{c}-q{q}" for c in ("adi", "npl") for q in range(3)]
    assert not any(d.startswith("cranfield") for d in classic.corpus)
    assert {d for r in classic.qrels.values() for d in r} == {
        f"{c}-d{q}" for c in ("adi", "npl") for q in range(3)
    }
    assert {"npl-d90", "adi-d92"} <= set(classic.corpus)  # negatives are in the corpus to be mined
    again, _ = load_source("classic", settings, tmp_path / "cache")  # built once, read back the same
    assert again.queries == classic.queries and again.qrels == classic.qrels
    wiki_train, _ = load_source("twowiki", settings, tmp_path / "cache")
    assert wiki_train.queries and all(query_split_of(q) == "train" for q in wiki_train.queries)
    assert len(wiki_train.queries) < 24


def test_rerank_domains_are_named_and_checked() -> None:
    from services.common.errors import RampartError
    from services.evaluation.rerank_domains import DOMAIN_NAMES, select_domains

    assert [d.name for d in select_domains(None)] == list(DOMAIN_NAMES)
    assert [d.name for d in select_domains("classic, scifact")] == ["scifact", "classic"]
    with pytest.raises(RampartError, match="choose from"):
        select_domains("scifact,msmarco")
    classic = select_domains("classic")[0]
    assert [p.name for p in classic.parts] == ["cranfield", "cisi", "cacm", "med"]
    # every half a domain reports on is the one training never takes
    for d in select_domains(None):
        assert all(p.half in ("heldout", "all") for p in d.parts), d


def test_each_fold_leaves_exactly_its_domain_out() -> None:
    from services.evaluation.rerank_domains import DOMAIN_NAMES
    from services.models.reranker_data import SOURCES
    from services.models.reranker_lodo import DOMAIN_SOURCES, fold_sources

    assert set(DOMAIN_SOURCES) == set(DOMAIN_NAMES) and set(DOMAIN_SOURCES.values()) == set(SOURCES)
    for domain, source in DOMAIN_SOURCES.items():
        assert sorted(fold_sources(domain)) == sorted(set(SOURCES) - {source})


def test_a_cross_fitted_reranker_is_never_installed(tmp_path: Path, models_dir: Path) -> None:
    env = {
        "RAMPART_DATA_DIR": str(tmp_path / "state"),
        "RAMPART_MODELS_DIR": str(models_dir),
        "COLUMNS": "200",
    }
    args = ["train", "reranker", "--out", str(tmp_path / "run"), "--hotpotqa-half", "heldout", "--install"]
    refused = CliRunner().invoke(app, args, env=env)
    assert refused.exit_code == 2 and "must not be served" in flat(refused.output)
    assert not (tmp_path / "run").exists()
    odd = CliRunner().invoke(app, [*args[:4], "--hotpotqa-half", "all"], env=env)
    assert odd.exit_code == 2 and "use train or heldout" in flat(odd.output)
