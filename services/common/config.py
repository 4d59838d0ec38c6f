"""Settings shared by several stages: the LLM endpoint, where the distributed services are, and the
shape of one gRPC server.

- :class:`LlmSettings` (``llm``): read by every stage that asks a model (the fact-check's judge, the
  chain's sub-query proposer, the CRAG rewrite, conversational rewrites and answers);
- :class:`RemoteSettings` (``remote``): read by the callers of the retrieval and ingest services (the
  runtime, the gateway's backends) and by the gateway's forwarding to the orchestrator;
- :class:`GrpcServerSettings` (``retrieval_service``): read by :mod:`services.common.grpc_server` and
  the retrieval service; the ingest service's settings extend it.

:mod:`services.common.settings` composes these with each stage's own ``config.py``; nothing here
imports it.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from pydantic import BaseModel, Field, SecretStr, model_validator


class LlmSettings(BaseModel):
    """An OpenAI-compatible chat endpoint (llama.cpp server, vLLM, a hosted API); shared by the stages
    that ask a model (the fact-check judge now, answers later)."""

    base_url: str | None = Field(
        default=None,
        description="OpenAI-compatible API root, e.g. http://127.0.0.1:8000/v1; unset = no LLM",
    )
    model: str = Field(default="default", description="Model name sent with every request")
    api_key: SecretStr | None = Field(
        default=None, description="Sent as 'Authorization: Bearer ...' when set; never logged"
    )
    timeout_s: float = Field(
        default=10, gt=0.0, le=600.0, description="Per-request timeout; past it the call counts as no answer"
    )
    max_tokens: int = Field(default=96, ge=8, le=4096, description="Longest reply asked of the model")
    retries: int = Field(
        default=1, ge=0, le=10, description="Retries on connection errors and HTTP 5xx/429 only"
    )

    @model_validator(mode="after")
    def _url(self) -> LlmSettings:
        if self.base_url is not None:
            parts = urlsplit(self.base_url)
            if parts.scheme not in ("http", "https") or not parts.hostname:
                shown = "<url with credentials>" if parts.password else repr(self.base_url)
                raise ValueError(
                    f"llm.base_url must be an http(s) URL such as http://127.0.0.1:8000/v1, got {shown}; "
                    "fix RAMPART_LLM__BASE_URL (or unset it to run without an LLM)"
                )
        return self


class GrpcServerSettings(BaseModel):
    """One gRPC service's server (distributed mode; docs/grpc.md)."""

    host: str = Field(default="127.0.0.1", description="Bind address (0.0.0.0 to expose)")
    port: int = Field(default=50051, ge=1, le=65535, description="gRPC port")
    metrics_port: int = Field(
        default=9101, ge=0, le=65535, description="Prometheus /metrics port on the same host; 0 disables"
    )
    grace_s: float = Field(
        default=10.0, ge=0.0, le=600.0, description="On SIGTERM, time in-flight RPCs get to finish"
    )
    max_message_bytes: int = Field(
        default=32 * 1024 * 1024, ge=1024, le=1024 * 1024 * 1024, description="Largest request/response"
    )
    max_concurrent_rpcs: int = Field(
        default=64, ge=1, le=100_000, description="RPCs served at once before new ones are refused"
    )


class RemoteSettings(BaseModel):
    """Where the distributed stages are: set an address and its callers use the gRPC service."""

    retrieval_address: str | None = Field(
        default=None, description="host:port of the retrieval service; unset: the local embedded index"
    )
    ingest_address: str | None = Field(
        default=None, description="host:port of the ingest service; unset: ingest in-process"
    )
    deadline_ms: int = Field(
        default=5000, ge=10, le=600_000, description="Deadline of one RPC (a caller's own deadline wins)"
    )
    ingest_deadline_ms: int = Field(
        default=300_000, ge=100, le=3_600_000, description="Deadline of one ingest batch RPC"
    )
    orchestrator_url: str | None = Field(
        default=None,
        description="Base URL of the orchestrator's Serve HTTP ingress (e.g. http://127.0.0.1:8090); set: "
        "the gateway forwards search/answer there instead of running the pipeline in-process",
    )
    internal_token: SecretStr | None = Field(
        default=None,
        description="Shared secret the gateway sends to the orchestrator ingress, which then refuses "
        "callers without it (the ingress trusts the principal in the body); `rampart stack` makes one",
    )
    orchestrator_timeout_s: float = Field(
        default=60.0, gt=0.0, le=3600.0, description="Longest the gateway waits for one orchestrator reply"
    )
