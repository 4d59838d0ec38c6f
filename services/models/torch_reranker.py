"""Load a trained reranker folder into PyTorch, whichever architecture it is (split or Hugging Face).

Export, the PyTorch benchmark and the agreement tests all need "the model in this folder" without caring
how it was built; this is the one place that decides.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from services.models.build_deps import import_build_deps
from services.models.split_encoder import is_split_encoder, load_split_encoder


def load_torch_reranker(source: str | Path, *, attn: str = "eager") -> Any:
    """The model in ``source`` in eval mode: a split encoder folder, or any Hugging Face cross-encoder
    (local folder or hub name). ``model(**pair_batch).logits[:, 0]`` is the relevance logit for both."""
    if Path(source).is_dir() and is_split_encoder(source):
        return load_split_encoder(source, attn=attn).eval()
    _, transformers = import_build_deps("loading a reranker", offline=Path(source).is_dir())
    # not silenced: "newly initialized classifier" here means the folder is not a cross-encoder
    return transformers.AutoModelForSequenceClassification.from_pretrained(
        str(source), attn_implementation=attn
    ).eval()
