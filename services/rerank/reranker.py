"""The ``Reranker`` protocol and its one factory.

Implementations: :class:`~services.rerank.onnx_reranker.OnnxReranker` (embedded default, in-process
onnxruntime) and :class:`~services.rerank.triton_reranker.TritonReranker` (NVIDIA Triton over gRPC).
Both return raw relevance logits for the same model, so the stage on top cannot tell them apart
(the contract suite in ``tests/contracts/reranker.py`` holds them to that).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Protocol, runtime_checkable

from services.common.errors import invalid
from services.rerank.config import RerankSettings


@runtime_checkable
class Reranker(Protocol):
    @property
    def model_id(self) -> str:
        """Identity of the weights *and* of everything that changes scores (variant, max length)."""
        ...

    @property
    def first_stage_weight(self) -> float | None:
        """For models trained residually: ``w`` in ``logit + w * first-stage score`` (else ``None``)."""
        ...

    def score(self, query: str, passages: Sequence[str]) -> list[float]:
        """One relevance logit per passage, in input order. Any batch size; empty passages allowed.

        Raises ``RampartError`` with ``UNAVAILABLE``/``DEADLINE_EXCEEDED`` when a remote backend cannot
        answer in time; the rerank stage turns that into a flagged degradation.
        """
        ...

    def check_ready(self) -> None:
        """Raise ``RampartError(UNAVAILABLE)`` unless the model can serve now (start-up and /readyz)."""
        ...

    def close(self) -> None: ...


def check_pairs(query: str, passages: Sequence[str]) -> list[str]:
    """Validate inputs shared by every implementation: text only, the query not blank."""
    if not isinstance(query, str) or not query.strip():
        raise invalid("rerank query must be a non-empty string", field="query")
    if isinstance(passages, str):
        raise invalid("rerank passages must be a list of strings, not one string; wrap it in a list")
    out = list(passages)
    bad = [i for i, p in enumerate(out) if not isinstance(p, str)]
    if bad:
        raise invalid(
            f"rerank passages must be strings; items {bad[:5]} are not (decode bytes to text first)",
            field="passages",
        )
    return out


def build_reranker(settings: RerankSettings, models_dir: Path) -> Reranker | None:
    """The configured reranker, or ``None`` when ``rerank.backend`` is ``none`` (``models_dir``: where
    the onnx backend finds the model unless ``settings.model_dir`` names the folder)."""
    r = settings
    if r.backend == "none":
        return None
    if r.backend == "triton":
        from services.rerank.reconnecting import ReconnectingReranker
        from services.rerank.triton_reranker import TritonReranker

        return ReconnectingReranker(
            lambda: TritonReranker.connect(r.triton, max_length=r.max_length), name=f"triton@{r.triton.url}"
        )
    from services.rerank.onnx_reranker import OnnxReranker

    return OnnxReranker.from_dir(
        r.resolve_model_dir(models_dir),
        variant=r.variant,
        max_length=r.max_length,
        batch_size=r.batch_size,
        threads=r.threads,
        parallel=r.parallel,
    )
