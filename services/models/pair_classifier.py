"""A pair classifier that reads the pair the way the packaged bi-encoder reads a text: mean pooling.

all-MiniLM-L6-v2 was trained to mean-pool its last layer; its ``[CLS]`` vector and pooler were never
trained for that. A classification head on the mean-pooled pair (``[CLS] premise [SEP] hypothesis
[SEP]``, padding excluded) therefore starts from features the encoder already produces, while the
Hugging Face head (``AutoModelForSequenceClassification``: pooler + linear on ``[CLS]``) starts from
untrained ones. ``rampart train contradiction --head mean|cls`` chooses; both export through
:mod:`services.models.reranker_export` and serve with the same code.

Saved as a Hugging Face ``BertModel`` folder plus ``rampart_classifier.safetensors`` (the head) and
``rampart_classifier.json`` (what it is), see :func:`is_pair_classifier`.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from services.common.errors import ErrorCode, RampartError
from services.models.build_deps import import_build_deps, quiet_loading

CLASSIFIER_FILE = "rampart_classifier.json"
HEAD_FILE = "rampart_classifier.safetensors"
ARCHITECTURE = "mean-pool-bert"


def is_pair_classifier(folder: str | Path) -> bool:
    return (Path(folder) / CLASSIFIER_FILE).is_file()


def build_pair_classifier(torch: Any) -> Any:
    """The module class, built against the caller's torch (torch is a build-time dependency only)."""

    class MeanPoolClassifier(torch.nn.Module):  # type: ignore[misc]
        def __init__(self, bert: Any, labels: list[str]) -> None:
            super().__init__()
            self.bert = bert
            self.config = bert.config
            self.labels = list(labels)
            self.num_outputs = len(labels)
            self.dropout = torch.nn.Dropout(float(bert.config.hidden_dropout_prob))
            self.classifier = torch.nn.Linear(int(bert.config.hidden_size), len(labels))

        def forward(
            self, input_ids: Any, attention_mask: Any, token_type_ids: Any = None, **_: Any
        ) -> SimpleNamespace:
            hidden = self.bert(
                input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
            ).last_hidden_state
            w = attention_mask.unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * w).sum(dim=1) / w.sum(dim=1).clamp(min=1.0)
            return SimpleNamespace(logits=self.classifier(self.dropout(pooled)))

        def save_pretrained(self, folder: str | Path) -> None:
            from safetensors.torch import save_file

            out = Path(folder)
            self.bert.save_pretrained(str(out))
            head = {k: v.detach().contiguous() for k, v in self.classifier.state_dict().items()}
            save_file(head, str(out / HEAD_FILE))
            (out / CLASSIFIER_FILE).write_text(
                json.dumps({"architecture": ARCHITECTURE, "labels": self.labels}), encoding="utf-8"
            )

    return MeanPoolClassifier


def load_pair_classifier(folder: str | Path, *, labels: list[str] | None = None, attn: str = "sdpa") -> Any:
    """A saved :class:`MeanPoolClassifier`, or a fresh one on a plain encoder folder (then ``labels``
    names its outputs and the head starts random, from torch's seed)."""
    torch, transformers = import_build_deps("loading the pair classifier")
    folder = Path(folder)
    with quiet_loading(transformers):  # the bi-encoder's unused pooler is reported as unexpected
        bert = transformers.BertModel.from_pretrained(
            str(folder), attn_implementation=attn, add_pooling_layer=False
        )
    cls = build_pair_classifier(torch)
    if not is_pair_classifier(folder):
        if not labels:
            raise RampartError(
                ErrorCode.INVALID_ARGUMENT,
                f"{folder} is a plain encoder, not a saved pair classifier; pass labels=[...] to start one",
            )
        return cls(bert, labels)
    arch = json.loads((folder / CLASSIFIER_FILE).read_text(encoding="utf-8"))
    model = cls(bert, list(arch["labels"]))
    from safetensors.torch import load_file

    model.classifier.load_state_dict(load_file(str(folder / HEAD_FILE)))
    return model
