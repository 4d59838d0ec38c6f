"""Settings of the retrieval stage: the embedder, the index and hybrid fusion.

- :class:`EmbeddingSettings` (``embedding``): read by :func:`~services.retrieval.embedder.build_embedder`
  (and the fact-check workers, which embed with the same model);
- :class:`IndexSettings` (``index``): read by the embedded index (BM25, vectors, the writer) and by
  ingest (``claim_vectors`` says what it writes);
- :class:`FusionSettings` (``fusion``): the defaults of every search's
  :class:`~services.retrieval.hybrid.SearchParams`.

:data:`MAX_LINK_SEEDS` and :data:`MAX_BACKLINKS` bound ``fusion.link_seeds`` and ``fusion.backlinks``
here and in every request that overrides them (HTTP schema, gRPC wire).
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

from services.common.types import FusionMethod


class EmbeddingSettings(BaseModel):
    model_dir: Path | None = Field(
        default=None,
        description="Folder with model.onnx, tokenizer.json and manifest.json (from `rampart models build`); default <models_dir>/minilm-l6-v2",
    )
    batch_size: int = Field(default=32, ge=1, le=1024, description="Texts per onnxruntime call")
    max_length: int = Field(default=256, ge=16, le=512, description="Tokens per text (MiniLM: 256)")
    threads: int = Field(default=0, ge=0, description="onnxruntime intra-op threads; 0 = all cores")
    spin_wait: bool = Field(
        default=False,
        description="Let onnxruntime's threads busy-wait after a call for the next one. Off: a search embeds "
        "one query and moves on, and threads spinning on the cores would slow the stages after it (dense "
        "search, the reranker; docs/benchmarks.md); on only helps a process that embeds back to back",
    )

    def resolve_model_dir(self, models_dir: Path) -> Path:
        """``model_dir``, or the folder ``rampart models build`` installs the embedder in."""
        return self.model_dir or models_dir / "minilm-l6-v2"


class IndexSettings(BaseModel):
    bm25_k1: float = Field(default=1.2, ge=0.0, le=10.0, description="BM25 term-frequency saturation")
    bm25_b: float = Field(default=0.75, ge=0.0, le=1.0, description="BM25 length normalisation")
    vector_kind: Literal["flat", "hnsw"] = Field(
        default="flat", description="flat: exact search; hnsw: approximate, for millions of chunks"
    )
    hnsw_m: int = Field(default=32, ge=4, le=128, description="HNSW graph degree")
    hnsw_ef_search: int = Field(default=128, ge=8, le=4096, description="HNSW search breadth")
    writer_heap_mb: int = Field(default=128, ge=16, le=4096, description="tantivy writer memory")
    claim_vectors: bool = Field(
        default=True,
        description="Embed each chunk's text without its header too (a second embedding per chunk at "
        "ingest): the fact-check's planted-copies signal compares these (docs/factcheck.md)",
    )


MAX_LINK_SEEDS = 20  # fused results whose named pages may join the head (FusionSettings.link_seeds)
MAX_BACKLINKS = 10  # pages naming the seeds that may join the head (FusionSettings.backlinks)


class FusionSettings(BaseModel):
    method: FusionMethod = Field(default=FusionMethod.MINMAX, description="minmax, zscore or rrf")
    # Equal weights: no tuned split beat them significantly (the sweep: docs/journal/2026-11-22-first-stage-defaults.md).
    bm25_weight: float = Field(default=0.5, ge=0.0, le=1.0, description="Weight of BM25 in fusion")
    dense_weight: float = Field(default=0.5, ge=0.0, le=1.0, description="Weight of dense in fusion")
    rrf_k: int = Field(default=60, ge=1, description="RRF constant k")
    # 300: deep enough that a chunk one retriever ranks low keeps both scores (cost: docs/journal/2026-11-24-300-candidates.md).
    candidates: int = Field(default=300, ge=1, le=2000, description="Per-retriever candidates before fusion")
    fill_missing: bool = Field(
        default=True,
        description="Score a chunk found by only one retriever with the other one too (docs/retrieval.md, section Fusion)",
    )
    # 3: brings two-hop questions their second page; tuned on HotpotQA train (docs/retrieval.md).
    link_seeds: int = Field(
        default=3,
        ge=0,
        le=MAX_LINK_SEEDS,
        description="Pages the top N fused results name by title join the reranked head (0 = off); "
        "for tenants of the linked corpus profile (docs/corpus-profiles.md)",
    )
    # 2: tuned on HotpotQA train (docs/retrieval.md, "Pages that name the top results").
    backlinks: int = Field(
        default=2,
        ge=0,
        le=MAX_BACKLINKS,
        description="With link_seeds, at most this many pages that name those results by title (the best "
        "for the query by BM25) join the reranked head after the named ones (0 = off); linked corpus "
        "profile only",
    )
