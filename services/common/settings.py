"""Settings, read once at start-up from ``RAMPART_*`` environment variables (nested with ``__``).

Example: ``RAMPART_INDEX__BM25_K1=0.9`` or ``RAMPART_FUSION__METHOD=rrf``. Build one
:class:`RampartSettings` in the entry point and pass it down; nothing reads the environment at import.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field, SecretStr, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from services.common.types import FusionMethod


class EmbeddingSettings(BaseModel):
    model_dir: Path | None = Field(
        default=None, description="Folder with model.onnx + tokenizer.json; default <models_dir>/minilm-l6-v2"
    )
    batch_size: int = Field(default=32, ge=1, le=1024)
    max_length: int = Field(default=256, ge=16, le=512)
    threads: int = Field(default=0, ge=0, description="onnxruntime intra-op threads; 0 = all cores")


class ChunkingSettings(BaseModel):
    method: Literal["topic", "fixed"] = "topic"
    min_words: int = Field(default=40, ge=1)
    max_words: int = Field(default=220, ge=8)
    window_sentences: int = Field(default=2, ge=1, le=10)
    # A boundary is a similarity valley deeper than mean - depth_std * std (TextTiling's cut-off).
    depth_std: float = 0.5
    fixed_overlap_words: int = Field(default=30, ge=0)
    header_terms: int = Field(default=5, ge=0, le=20)

    @model_validator(mode="after")
    def _bounds(self) -> ChunkingSettings:
        if self.min_words > self.max_words:
            raise ValueError(
                f"chunking.min_words={self.min_words} exceeds max_words={self.max_words}; lower min_words"
            )
        return self


class IndexSettings(BaseModel):
    bm25_k1: float = Field(default=1.2, ge=0.0, le=10.0)
    bm25_b: float = Field(default=0.75, ge=0.0, le=1.0)
    vector_kind: Literal["flat", "hnsw"] = "flat"
    hnsw_m: int = Field(default=32, ge=4, le=128)
    hnsw_ef_search: int = Field(default=128, ge=8, le=4096)
    writer_heap_mb: int = Field(default=128, ge=16, le=4096)


class FusionSettings(BaseModel):
    method: FusionMethod = FusionMethod.MINMAX
    bm25_weight: float = Field(default=0.5, ge=0.0, le=1.0)
    dense_weight: float = Field(default=0.5, ge=0.0, le=1.0)
    rrf_k: int = Field(default=60, ge=1)
    candidates: int = Field(default=100, ge=1, le=2000, description="Per-retriever candidates before fusion")
    fill_missing: bool = Field(
        default=True,
        description="Score a chunk found by only one retriever with the other one too (see docs/fusion.md)",
    )


class GatewaySettings(BaseModel):
    host: str = "127.0.0.1"
    port: int = Field(default=8080, ge=1, le=65535)
    api_keys_file: Path | None = Field(
        default=None, description="JSON file of hashed API keys; default <data_dir>/api-keys.json"
    )
    max_body_bytes: int = Field(default=20 * 1024 * 1024, ge=1024)
    max_document_bytes: int = Field(default=5 * 1024 * 1024, ge=1)
    max_batch_documents: int = Field(default=256, ge=1)
    max_top_k: int = Field(default=100, ge=1, le=1000)
    max_query_chars: int = Field(default=2000, ge=1)
    rate_limit_per_minute: int = Field(default=600, ge=0, description="Per API key; 0 disables")


class RampartSettings(BaseSettings):
    """Everything configurable; see ``docs/configuration.md`` for each field."""

    model_config = SettingsConfigDict(env_prefix="RAMPART_", env_nested_delimiter="__", extra="ignore")

    data_dir: Path = Field(default=Path(".rampart/data"), description="Index, status DB, API keys")
    models_dir: Path = Field(default=Path(".rampart/models"), description="Built ONNX models")
    eval_data_dir: Path = Field(default=Path("../shared/data"), description="Benchmark data (read-only)")
    log_level: str = "INFO"
    log_format: Literal["json", "console"] = "console"
    key_pepper: SecretStr | None = Field(
        default=None, description="Optional secret mixed into API-key hashes (HMAC-SHA256)"
    )

    embedding: EmbeddingSettings = EmbeddingSettings()
    chunking: ChunkingSettings = ChunkingSettings()
    index: IndexSettings = IndexSettings()
    fusion: FusionSettings = FusionSettings()
    gateway: GatewaySettings = GatewaySettings()

    def embedding_model_dir(self) -> Path:
        return self.embedding.model_dir or self.models_dir / "minilm-l6-v2"

    def api_keys_path(self) -> Path:
        return self.gateway.api_keys_file or self.data_dir / "api-keys.json"
