"""Load a trained cross-encoder folder into PyTorch, whichever architecture it is (split, mean-pool
pair classifier or Hugging Face).

Export, the PyTorch benchmark and the agreement tests all need "the model in this folder" without caring
how it was built; this is the one place that decides.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from services.models.build_deps import import_build_deps
from services.models.pair_classifier import is_pair_classifier, load_pair_classifier
from services.models.split_encoder import is_split_encoder, load_split_encoder


def load_torch_reranker(source: str | Path, *, attn: str = "eager") -> Any:
    """The model in ``source`` in eval mode: a split encoder folder, or any Hugging Face cross-encoder
    (local folder or hub name). ``model(**pair_batch).logits[:, 0]`` is the relevance logit of a reranker;
    a classifier (:mod:`services.models.pair_classifier` or a Hugging Face one) has one column per label."""
    if Path(source).is_dir() and is_split_encoder(source):
        return load_split_encoder(source, attn=attn).eval()
    if Path(source).is_dir() and is_pair_classifier(source):
        return load_pair_classifier(source, attn=attn).eval()
    _, transformers = import_build_deps("loading a reranker", offline=Path(source).is_dir())
    # not silenced: "newly initialized classifier" here means the folder is not a cross-encoder
    return transformers.AutoModelForSequenceClassification.from_pretrained(
        str(source), attn_implementation=attn
    ).eval()
