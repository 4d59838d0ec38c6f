"""Settings of the rerank stage: the cross-encoder and how it is blended with the first stage.

- :class:`RerankSettings` (``rerank``): read by :func:`~services.rerank.reranker.build_reranker` (the
  backend and the model) and by the search pipeline's rerank step (depth, mode, weights, cache);
- :class:`TritonSettings` (``rerank.triton``): the remote backend's endpoint, read by
  :class:`~services.rerank.triton_reranker.TritonReranker` and ``rampart triton``; its
  :class:`TritonTlsSettings` (``rerank.triton.tls``): TLS to Triton's gRPC port (docs/security.md).
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field, SecretStr, model_validator


class TritonTlsSettings(BaseModel):
    """TLS from the reranker client to Triton's gRPC port. Triton started with ``--grpc-use-ssl`` checks
    nothing of the client; with ``--grpc-use-ssl-mutual`` (the stack and the chart) it also asks for a
    client certificate of its root CA, so ``cert_file``/``key_file`` must be set: the component's own
    mTLS pair (``remote.tls``) does."""

    enabled: bool = Field(default=False, description="TLS to Triton's gRPC port (rerank.triton.url)")
    ca_file: Path | None = Field(
        default=None, description="PEM CA certificate(s) that sign Triton's certificate"
    )
    cert_file: Path | None = Field(
        default=None, description="PEM client certificate chain, for a Triton that requires one (mutual TLS)"
    )
    key_file: Path | None = Field(default=None, description="PEM private key of cert_file (mode 600)")
    server_name: str | None = Field(
        default=None,
        description="Name Triton's certificate is checked against when it differs from the host of url: "
        "a SAN of its certificate",
    )

    @model_validator(mode="after")
    def _files(self) -> TritonTlsSettings:
        """Fail at start-up naming the variables, not at the first search with a handshake error."""
        if not self.enabled:
            return self
        if self.ca_file is None:
            raise ValueError(
                "rerank.triton.tls.enabled is true but ca_file is unset; set "
                "RAMPART_RERANK__TRITON__TLS__CA_FILE "
                "(the CA that signed Triton's certificate) or RAMPART_RERANK__TRITON__TLS__ENABLED=false"
            )
        if (self.cert_file is None) != (self.key_file is None):
            raise ValueError(
                "rerank.triton.tls needs both cert_file and key_file, or neither; set "
                "RAMPART_RERANK__TRITON__TLS__CERT_FILE and RAMPART_RERANK__TRITON__TLS__KEY_FILE together"
            )
        return self


class TritonSettings(BaseModel):
    url: str = Field(default="127.0.0.1:8001", description="Triton gRPC endpoint host:port")
    tls: TritonTlsSettings = TritonTlsSettings()
    key: SecretStr | None = Field(
        default=None,
        description="Triton's caller key: the reranker sends it (x-rampart-triton-key) on every call, and "
        "`rampart triton serve` started with it refuses every call without it but health, on gRPC and HTTP "
        "(docs/security.md); 16-256 of A-Z a-z 0-9 _ -, checked where the server starts (a settings error "
        "would print it); `rampart stack` makes one per start",
    )
    model_name: str = Field(default="rampart_reranker", description="Model name in the Triton repository")
    model_version: str = Field(
        default="1", description="Pinned model version ('' = server's latest; pin it in production)"
    )
    deadline_ms: int = Field(default=2000, ge=10, description="Per-call deadline; past it, rerank degrades")
    retries: int = Field(default=2, ge=0, le=10, description="Retries on UNAVAILABLE only (backoff)")
    batch_size: int = Field(default=32, ge=1, le=1024, description="Pairs per inference request")
    venv: Path = Field(
        default=Path(".venv-triton"),
        description="Virtualenv holding nvidia-pytriton's tritonserver (numpy<2); `make triton` builds it",
    )


class RerankSettings(BaseModel):
    # On: the shipped model's gain and CPU cost are in docs/benchmarks.md; latency-bound setups turn it off.
    enabled: bool = Field(
        default=True,
        description="Rerank every search unless the request says otherwise (see docs/reranking.md)",
    )
    backend: Literal["onnx", "triton", "none"] = Field(
        default="onnx", description="onnx: in-process; triton: remote server; none: fused order only"
    )
    model_dir: Path | None = Field(
        default=None,
        description="Exported cross-encoder (manifest.json, tokenizer.json, model*.onnx); default <models_dir>/reranker",
    )
    variant: Literal["int8", "fp32"] = Field(
        default="int8", description="int8: ~1.8x faster on CPU, ranks like fp32; fp32 for GPU/exactness"
    )
    depth: int = Field(
        default=30, ge=1, le=1000, description="Fused candidates reranked (CPU: 20-30; GPU: 100)"
    )
    mode: Literal["auto", "residual", "fused", "pure"] = Field(
        default="auto",
        description="residual: logit + w*first-stage (w learned in training); fused: weight*minmax(logit) + "
        "(1-weight)*minmax(first-stage); pure: rerank order only; auto: residual if the model has w, else fused",
    )
    weight: float = Field(
        default=0.5, ge=0.0, le=1.0, description="Weight of the reranker score in fused mode"
    )
    # 0.8: the middle of the plateau tuned on HotpotQA train (docs/reranking.md).
    link_weight: float = Field(
        default=0.8,
        ge=0.0,
        le=1.0,
        description="Two-hop lift: a candidate linked by title to one of the two best reranked pages rises "
        "this share of the way from the head's lowest score to that page's (0 = off; docs/reranking.md); for "
        "tenants of the linked corpus profile (docs/corpus-profiles.md)",
    )
    max_length: int | None = Field(
        default=None, ge=16, le=512, description="Tokens per (query, chunk) pair; default: the model's own"
    )
    batch_size: int = Field(
        default=1,
        ge=1,
        le=1024,
        description="Pairs per onnxruntime call. 1 keeps int8 scores independent of batch company (dynamic "
        "int8 quantises activations per batch, padding included) at no CPU cost (measured); raise for fp32/GPU",
    )
    threads: int = Field(
        default=1,
        ge=0,
        description="onnxruntime threads per call; 0 = all cores in one call. 1 with `parallel` 0 runs one "
        "single-thread call per core side by side: steadier on CPU than one call on all cores (measured)",
    )
    parallel: int = Field(
        default=0,
        ge=0,
        le=64,
        description="onnxruntime calls at once per process; 0 = as many `threads`-thread calls as the cores "
        "hold (1 when threads is 0); always 1 on a GPU",
    )
    cache_size: int = Field(
        default=50_000, ge=0, description="Cached scores by (model, query, chunk); 0 = off"
    )
    triton: TritonSettings = TritonSettings()

    def resolve_model_dir(self, models_dir: Path) -> Path:
        """``model_dir``, or the folder ``rampart models build`` installs the reranker in."""
        return self.model_dir or models_dir / "reranker"
