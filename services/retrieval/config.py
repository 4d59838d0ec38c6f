"""Settings of the retrieval stage: the embedder, the index and hybrid fusion.

- :class:`EmbeddingSettings` (``embedding``): read by :func:`~services.retrieval.embedder.build_embedder`
  (and the fact-check workers, which embed with the same model);
- :class:`IndexSettings` (``index``): read by the embedded index (BM25, vectors, the writer) and by
  ingest (``claim_vectors`` says what it writes);
- :class:`OpenSearchSettings` (``opensearch``): the OpenSearch backend's client, index template and
  the local node that ``rampart opensearch up`` runs (docs/opensearch.md);
- :class:`FusionSettings` (``fusion``): the defaults of every search's
  :class:`~services.retrieval.hybrid.SearchParams`.

:data:`MAX_LINK_SEEDS` and :data:`MAX_BACKLINKS` bound ``fusion.link_seeds`` and ``fusion.backlinks``
here and in every request that overrides them (HTTP schema, the linked extension's
:class:`~services.retrieval.links.options.LinkOptions` on the gRPC wire).
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field, SecretStr

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
    backend: Literal["embedded", "opensearch"] = Field(
        default="embedded",
        description="embedded: SQLite + tantivy + faiss under data_dir (one writer process); opensearch: "
        "the node at RAMPART_OPENSEARCH__URL, shared by any number of processes (docs/opensearch.md)",
    )
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


class OpenSearchSettings(BaseModel):
    """The OpenSearch backend (``index.backend=opensearch``). BM25's k1/b are ``index.bm25_k1/b``,
    shared with the embedded index so that both rank with the same parameters."""

    url: str | None = Field(
        default=None,
        description="Node URL the index talks to; default http://127.0.0.1:<port> (the `rampart opensearch up` node)",
    )
    port: int = Field(
        default=9200, ge=1, le=65535, description="HTTP port of the node `rampart opensearch up` starts"
    )
    data_dir: Path = Field(
        default=Path(".rampart/opensearch"),
        description="Data, logs, config and pid file of the node `rampart opensearch up` starts",
    )
    heap_mb: int = Field(default=512, ge=128, le=31744, description="JVM heap of that node (-Xms = -Xmx)")
    start_timeout_s: float = Field(
        default=180.0, gt=0, description="How long `rampart opensearch up` waits for the node to turn green"
    )
    index_prefix: str = Field(
        default="rampart",
        pattern=r"^[a-z0-9][a-z0-9_-]{0,40}$",
        description="Names of the aliases (<prefix>-chunks, <prefix>-documents, <prefix>-meta); one prefix per deployment",
    )
    shards: int = Field(default=1, ge=1, le=64, description="Primary shards of a new index")
    replicas: int = Field(default=0, ge=0, le=8, description="Replicas of a new index (0 on one node)")
    refresh: Literal["wait_for", "true", "false"] = Field(
        default="wait_for",
        description="Refresh policy of writes: wait_for returns once the write is searchable (what ingest "
        "acknowledges); false is faster and makes writes searchable within the refresh interval",
    )
    knn_engine: Literal["lucene", "faiss", "nmslib"] = Field(
        default="lucene",
        description="k-NN engine of the vector fields; faiss/nmslib need the plugin's native libraries (not here)",
    )
    knn_space: Literal["cosinesimil", "innerproduct", "l2"] = Field(
        default="cosinesimil", description="k-NN space type of the vector fields"
    )
    knn_m: int = Field(default=32, ge=4, le=128, description="HNSW graph degree of the vector fields")
    knn_ef_construction: int = Field(default=128, ge=8, le=4096, description="HNSW build breadth")
    knn_ef_search: int = Field(
        default=128, ge=8, le=4096, description="HNSW search breadth (at least the number of hits asked for)"
    )
    timeout_s: float = Field(default=30.0, gt=0, description="Per-request timeout")
    connections: int = Field(
        default=16,
        ge=1,
        le=256,
        description="HTTP connections a process keeps to the node (the client is synchronous: one per thread "
        "that talks to it at once; the retrieval service runs up to 16)",
    )
    retries: int = Field(
        default=3, ge=0, le=10, description="Retries of idempotent requests on 429, 5xx and lost connections"
    )
    backoff_s: float = Field(default=0.2, ge=0, le=30, description="First retry delay; doubles per retry")
    write_lease_s: float = Field(
        default=600.0,
        gt=0,
        description="Least time a write (and ingest's pending mark before it) holds its documents: another "
        "host repairs what a crashed writer left only after it (the lease also covers the write's requests "
        "at their timeout and retries); a writer on this host is repaired as soon as its process is gone",
    )
    claim_wait_s: float = Field(
        default=120.0,
        gt=0,
        le=3600,
        description="How long a write (or a status mark, or a delete) waits for a document another live "
        "process is writing before it fails as unavailable naming that writer (docs/opensearch.md, "
        '"Concurrent writers"); durable ingest then retries the batch',
    )
    username: str | None = Field(default=None, description="Basic-auth user (a secured cluster)")
    password: SecretStr | None = Field(default=None, description="Basic-auth password")
    aws_sigv4: bool = Field(
        default=False,
        description="Sign every request with AWS SigV4 (Amazon OpenSearch Service or Serverless), with "
        "credentials from the standard AWS chain (environment, AWS_PROFILE and ~/.aws, container or instance "
        "role); needs botocore (the aws extra); instead of username/password",
    )
    aws_region: str | None = Field(
        default=None,
        description="The domain's AWS region for SigV4; default: the AWS chain's (AWS_DEFAULT_REGION, ~/.aws/config)",
    )
    aws_service: Literal["es", "aoss"] = Field(
        default="es", description="SigV4 service name: es (an OpenSearch Service domain) or aoss (Serverless)"
    )
    ca_certs: Path | None = Field(default=None, description="CA bundle for an https URL")
    verify_certs: bool = Field(default=True, description="Verify the node's TLS certificate (https URLs)")

    def endpoint(self) -> str:
        return self.url or f"http://127.0.0.1:{self.port}"


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
