"""The split reranker starts as the bi-encoder: with every layer split, its untrained logit is exactly
``20·cos(q, p) − 8`` of all-MiniLM-L6-v2's own embeddings; with fewer split layers the query and passage
meet in the upper layers, and a save/load round trip keeps every weight."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch  # the [build] extra, installed by `make test`

QUERY = "what causes ocean tides"
PASSAGES = [
    "Tides are caused by the gravitational pull of the moon and the sun on the oceans.",
    "The stock market closed higher on Tuesday after a volatile session.",
    "Ocean tides rise and fall twice a day along most coastlines.",
]


def bi_encoder_cosines(folder: Path) -> np.ndarray:
    """all-MiniLM-L6-v2 as sentence-transformers runs it: each text alone, mean pooling, L2 norm."""
    import transformers

    tok = transformers.AutoTokenizer.from_pretrained(str(folder))
    bert = transformers.BertModel.from_pretrained(str(folder), add_pooling_layer=False).eval()
    vecs = []
    for text in [QUERY, *PASSAGES]:
        enc = tok(text, return_tensors="pt")
        with torch.no_grad():
            hidden = bert(**enc).last_hidden_state[0]
        vecs.append(torch.nn.functional.normalize(hidden.mean(0), dim=0).numpy())
    return np.array([float(vecs[0] @ v) for v in vecs[1:]])


def split_logits(model: object, tokenizer_file: Path) -> np.ndarray:
    from tokenizers import Tokenizer

    from services.models.split_encoder import use_split_template
    from services.rerank.pair_scorer import configure_tokenizer, encode_pairs, pad_batch

    tok = configure_tokenizer(use_split_template(Tokenizer.from_file(str(tokenizer_file))), 128)
    feeds = {k: torch.from_numpy(v) for k, v in pad_batch(encode_pairs(tok, QUERY, PASSAGES)).items()}
    with torch.no_grad():
        return model(**feeds).logits[:, 0].numpy()  # type: ignore[operator,no-any-return]


@pytest.fixture(scope="module")
def encoder_dir() -> Path:
    from services.models.reranker_pipeline import packaged_encoder

    return packaged_encoder()


def test_fully_split_model_scores_the_bi_encoder_cosine(encoder_dir: Path) -> None:
    from services.models.split_encoder import INIT_BIAS, INIT_SCALE, load_split_encoder

    model = load_split_encoder(encoder_dir, split_layers=6).eval()
    got = (split_logits(model, encoder_dir / "tokenizer.json") - INIT_BIAS) / INIT_SCALE
    np.testing.assert_allclose(got, bi_encoder_cosines(encoder_dir), atol=1e-4)


def test_cross_layers_change_scores_and_weights_round_trip(encoder_dir: Path, tmp_path: Path) -> None:
    from services.models.split_encoder import is_split_encoder, load_split_encoder

    split6 = split_logits(
        load_split_encoder(encoder_dir, split_layers=6).eval(), encoder_dir / "tokenizer.json"
    )
    model = load_split_encoder(encoder_dir, split_layers=3).eval()
    with torch.no_grad():
        model.cls_head.weight.normal_()  # a trained head is not zero: the round trip must keep it
    split3 = split_logits(model, encoder_dir / "tokenizer.json")
    assert np.abs(split3 - split6).max() > 1e-3  # query and passage now attend to each other
    model.save_pretrained(tmp_path / "m")
    assert is_split_encoder(tmp_path / "m") and not is_split_encoder(encoder_dir)
    again = load_split_encoder(tmp_path / "m").eval()
    assert again.split_layers == 3
    np.testing.assert_allclose(split_logits(again, encoder_dir / "tokenizer.json"), split3, atol=1e-5)


def test_a_plain_encoder_needs_split_layers(encoder_dir: Path) -> None:
    from services.common.errors import RampartError
    from services.models.split_encoder import load_split_encoder

    with pytest.raises(RampartError, match="split_layers"):
        load_split_encoder(encoder_dir)
    with pytest.raises(RampartError, match=r"split_layers=7 must be in \[0, 6\]"):
        load_split_encoder(encoder_dir, split_layers=7)
