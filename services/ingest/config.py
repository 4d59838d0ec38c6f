"""Settings of the ingest stage: how documents are cut into chunks and the ingest gRPC service.

- :class:`ParsingSettings` (``parsing``): the per-document time budget of parsing;
- :class:`ChunkingSettings` (``chunking``): read by :func:`~services.ingest.chunker.build_chunker` and
  the chunkers;
- :class:`IngestServiceSettings` (``ingest_service``): the ingest service's server and its journal
  (``rampart serve-ingest``), and the message size its clients use.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field, model_validator

from services.common.config import GrpcServerSettings


class ParsingSettings(BaseModel):
    timeout_s: float = Field(
        default=60.0,
        ge=0.0,
        le=3600.0,
        description="Wall-clock budget to parse one document: past it the parser process is killed and the "
        "document reported failed (deadline_exceeded); 0 parses in the ingesting process, unbounded "
        "(docs/security.md, Bounded time)",
    )


class ChunkingSettings(BaseModel):
    method: Literal["topic", "fixed"] = Field(
        default="topic", description="topic: boundaries from embedding similarity; fixed: word windows"
    )
    min_words: int = Field(default=40, ge=1, description="Smallest chunk a topic cut may leave")
    max_words: int = Field(default=220, ge=8, description="Largest chunk (MiniLM reads ~190 words)")
    window_sentences: int = Field(
        default=2, ge=1, le=10, description="Sentences each side of a gap compared for a topic shift"
    )
    # A boundary is a similarity valley deeper than mean - depth_std * std (TextTiling's cut-off).
    depth_std: float = Field(default=0.5, description="Valley cut-off: depth > mean - depth_std*std")
    fixed_overlap_words: int = Field(default=30, ge=0, description="Overlap of fixed windows")
    header_terms: int = Field(default=5, ge=0, le=20, description="Salient terms in each chunk header")

    @model_validator(mode="after")
    def _bounds(self) -> ChunkingSettings:
        if self.min_words > self.max_words:
            raise ValueError(
                f"chunking.min_words={self.min_words} exceeds max_words={self.max_words}; lower min_words"
            )
        return self


class IngestServiceSettings(GrpcServerSettings):
    port: int = Field(default=50052, ge=1, le=65535, description="gRPC port")
    allowed_callers: list[str] = Field(
        default=["gateway"],
        min_length=1,
        description="With mTLS: the client certificate CNs (the component name from `rampart certs dev`, e.g. "
        "orchestrator; the chart: release-component, e.g. rampart-orchestrator) that may call "
        'ingest (the gateway writes documents), others get PERMISSION_DENIED; ["*"]: any certificate of '
        "the CA",
    )
    metrics_port: int = Field(
        default=9102, ge=0, le=65535, description="Prometheus /metrics port on the same host; 0 disables"
    )
    journal_dir: Path | None = Field(
        default=None,
        description="Accepted batches are written here before they are acknowledged; default "
        "<data_dir>/ingest-journal",
    )
    journal_max_batches: int = Field(
        default=1000,
        ge=1,
        le=1_000_000,
        description="Batches queued (journaled, not yet processed) before new ones are refused (RATE_LIMITED)",
    )
    journal_max_bytes: int = Field(
        default=512 * 1024 * 1024,
        ge=1024,
        description="Bytes of queued documents before new batches are refused (RATE_LIMITED)",
    )
    journal_keep_done_s: float = Field(
        default=3600.0,
        ge=0.0,
        le=30 * 24 * 3600.0,
        description="Processed batches (with their results) stay in the journal this long, then are pruned",
    )
    retry_max_s: float = Field(
        default=300.0,
        ge=0.0,
        le=24 * 3600.0,
        description="How long a batch is retried while the index is unreachable before its documents "
        "are reported failed",
    )
    test_process_delay_s: float = Field(
        default=0.0,
        ge=0.0,
        le=600.0,
        description="TESTS ONLY: wait this long before processing each batch (crash-after-ack tests); "
        "keep 0 in production",
    )
