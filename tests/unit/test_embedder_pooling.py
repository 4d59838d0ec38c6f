"""OnnxEmbedder without a model: pooling maths, length batching, order restoration, export preconditions."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from tokenizers import Tokenizer
from tokenizers.models import WordLevel
from tokenizers.pre_tokenizers import Whitespace
from tokenizers.processors import TemplateProcessing

from services.common.errors import ErrorCode, RampartError
from services.models.embedder_export import export_embedder
from services.retrieval.onnx_embedder import OnnxEmbedder, length_sorted_batches, mean_pool_normalize


def test_mean_pool_matches_naive_loop() -> None:
    rng = np.random.default_rng(0)
    hidden = rng.normal(size=(4, 7, 5)).astype(np.float32)
    lengths = [7, 3, 1, 5]
    mask = np.array([[1] * n + [0] * (7 - n) for n in lengths], dtype=np.int64)
    got = mean_pool_normalize(hidden, mask)
    assert got.dtype == np.float32 and got.shape == (4, 5)
    for row, n in enumerate(lengths):
        mean = hidden[row, :n].mean(axis=0)
        np.testing.assert_allclose(got[row], mean / np.linalg.norm(mean), rtol=1e-5, atol=1e-6)


def test_mean_pool_ignores_padding_values_and_zero_rows_stay_finite() -> None:
    hidden = np.zeros((2, 3, 2), dtype=np.float32)
    hidden[0, 0] = [3.0, 4.0]
    hidden[0, 1:] = 1e6  # padding garbage must not leak in
    mask = np.array([[1, 0, 0], [0, 0, 0]])
    got = mean_pool_normalize(hidden, mask)
    np.testing.assert_allclose(got[0], [0.6, 0.8], rtol=1e-6)
    assert np.all(np.isfinite(got)) and not got[1].any()


def test_length_sorted_batches_partition_and_group_by_length() -> None:
    lengths = [5, 1, 9, 9, 3, 7, 2, 8]
    batches = length_sorted_batches(lengths, 3)
    assert [len(b) for b in batches] == [3, 3, 2]
    flat = np.concatenate(batches)
    assert sorted(flat.tolist()) == list(range(len(lengths)))
    assert [lengths[i] for i in flat] == sorted(lengths, reverse=True)
    assert length_sorted_batches([], 4) == []
    # A token budget shrinks batches of long texts but never below one text.
    capped = length_sorted_batches(lengths, 3, max_tokens=16)
    assert [len(b) for b in capped] == [1, 1, 2, 3, 1]
    assert [len(b) for b in length_sorted_batches([50, 40], 8, max_tokens=10)] == [1, 1]
    with pytest.raises(ValueError):
        length_sorted_batches([1], 0)


# --- OnnxEmbedder with a fake session: checks padding, masking and order restoration -------------

VOCAB = {"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3, **{w: i + 4 for i, w in enumerate("abcdefgh")}}
DIM = 6


def _tokenizer() -> Tokenizer:
    tok = Tokenizer(WordLevel(VOCAB, unk_token="[UNK]"))
    tok.pre_tokenizer = Whitespace()  # type: ignore[assignment]
    tok.post_processor = TemplateProcessing(  # type: ignore[assignment]
        single="[CLS] $A [SEP]", special_tokens=[("[CLS]", 2), ("[SEP]", 3)]
    )
    # Padding configured in the file must be overridden by the embedder (it pads per batch itself).
    tok.enable_padding(length=32)
    return tok


@dataclass
class _Node:
    name: str
    shape: list[Any]


class _FakeSession:
    """Token state = a fixed random vector per token id; padding (id 0) is huge so leaks show."""

    def __init__(self) -> None:
        self.table = np.random.default_rng(1).normal(size=(len(VOCAB), DIM)).astype(np.float32)
        self.table[0] = 1e6
        self.widths: list[int] = []

    def get_inputs(self) -> list[_Node]:
        return [_Node(n, ["b", "s"]) for n in ("input_ids", "attention_mask", "token_type_ids")]

    def get_outputs(self) -> list[_Node]:
        return [_Node("last_hidden_state", ["b", "s", DIM])]

    def run(self, names: list[str], feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        ids = feeds["input_ids"]
        assert ids.dtype == np.int64 and feeds["attention_mask"].shape == ids.shape
        assert not feeds["token_type_ids"].any()
        self.widths.append(ids.shape[1])
        return [self.table[ids]]


def _expected(text: str, max_length: int = 16) -> np.ndarray:
    body = [VOCAB.get(w, 1) for w in text.split()][: max_length - 2]
    ids = [2, *body, 3]
    mean = _FakeSession().table[ids].mean(axis=0)
    return mean / np.linalg.norm(mean)


def test_embed_pads_per_batch_and_restores_order() -> None:
    session = _FakeSession()
    emb = OnnxEmbedder(session, _tokenizer(), model_id="fake@0", dim=DIM, batch_size=2, max_length=16)
    texts = ["a b c d e f", "a", "b c", "", "h g f e d c b a a b c d e f g h h h", "zzz c"]
    got = emb.embed(texts)
    assert got.shape == (len(texts), DIM) and got.dtype == np.float32
    for row, text in enumerate(texts):
        np.testing.assert_allclose(got[row], _expected(text), rtol=1e-5, atol=1e-6)
    # Sorted by length: widths shrink batch by batch; truncation caps the longest at max_length.
    assert session.widths == sorted(session.widths, reverse=True)
    assert session.widths[0] == 16
    assert emb.embed([]).shape == (0, DIM)


def test_embed_windows_larger_than_one_sort_window() -> None:
    emb = OnnxEmbedder(_FakeSession(), _tokenizer(), model_id="fake@0", dim=DIM, batch_size=1, max_length=16)
    texts = [" ".join("abcdefgh"[: 1 + i % 8]) for i in range(150)]  # > 64 batches of 1
    got = emb.embed(texts)
    for row, text in enumerate(texts):
        np.testing.assert_allclose(got[row], _expected(text), rtol=1e-5, atol=1e-6)


def test_bad_arguments() -> None:
    with pytest.raises(RampartError) as err:
        OnnxEmbedder(_FakeSession(), _tokenizer(), model_id="x", dim=DIM, batch_size=0)
    assert err.value.code is ErrorCode.INVALID_ARGUMENT
    with pytest.raises(RampartError):
        OnnxEmbedder(_FakeSession(), _tokenizer(), model_id="x", dim=DIM, max_length=1000)


def test_missing_model_dir_is_failed_precondition(tmp_path: Path) -> None:
    with pytest.raises(RampartError) as err:
        OnnxEmbedder.from_dir(tmp_path / "absent")
    assert err.value.code is ErrorCode.FAILED_PRECONDITION
    assert "run `rampart models build`" in err.value.message


def test_export_without_torch_names_the_install_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    src = tmp_path / "src"
    src.mkdir()
    for name in ("config.json", "model.safetensors", "tokenizer.json"):
        (src / name).write_text("{}")
    monkeypatch.setitem(sys.modules, "torch", None)  # makes `import torch` fail
    with pytest.raises(RampartError) as err:
        export_embedder(tmp_path / "out", source_dir=src)
    assert err.value.code is ErrorCode.FAILED_PRECONDITION
    assert "pip install" in err.value.message and ".[build]" in err.value.message


def test_export_with_incomplete_source_is_failed_precondition(tmp_path: Path) -> None:
    with pytest.raises(RampartError) as err:
        export_embedder(tmp_path / "out", source_dir=tmp_path)
    assert err.value.code is ErrorCode.FAILED_PRECONDITION
    assert "model.safetensors" in err.value.message
