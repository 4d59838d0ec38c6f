"""Settings of ``rampart stack``: :class:`StackSettings` (``stack``), read by the stack's plan and
control (ports, processes, where supervisord keeps its files).
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, Field


class StackSettings(BaseModel):
    """``rampart stack``: every distributed service on 127.0.0.1 under supervisord (docs/stack.md)."""

    dir: Path | None = Field(
        default=None, description="supervisord config, socket, logs and pid; default <data_dir>/stack"
    )
    redis_port: int = Field(default=6390, ge=1, le=65535, description="redis-server port (broker, cache)")
    triton: bool = Field(
        default=True, description="Rerank on a tritonserver (needs `make triton`); false: onnx in-process"
    )
    triton_grpc_port: int = Field(default=8001, ge=1, le=65535, description="tritonserver gRPC port")
    triton_http_port: int = Field(default=8000, ge=1, le=65535, description="tritonserver HTTP port")
    triton_metrics_port: int = Field(default=8002, ge=1, le=65535, description="tritonserver metrics port")
    workers: int = Field(
        default=2,
        ge=1,
        le=64,
        description="Celery fact-check worker processes (2: a check's two tasks run in parallel; "
        "factcheck.celery.items_per_task)",
    )
    ready_timeout_s: float = Field(
        default=300.0, gt=0.0, le=3600.0, description="How long `stack up` waits for every service"
    )
    replicas: int = Field(
        default=1,
        ge=1,
        le=16,
        description="Retrieval-service replicas, ingest workers and (at least) pipeline replicas; >1 needs "
        "index.backend=opensearch (`rampart stack up --index opensearch --replicas N`)",
    )
    replica_port_step: int = Field(
        default=1000,
        ge=1,
        le=10_000,
        description="Replica i (from 0) of a service listens on its port + i × this (metrics ports too)",
    )
    worker_metrics_port: int = Field(
        default=9104, ge=1, le=65535, description="Prometheus /metrics of the fact-check workers"
    )
    tls: bool = Field(
        default=True,
        description="mTLS between the stack's gRPC services, with a CA made at each start (<dir>/certs); "
        "false: the internal token alone",
    )
    redis_auth: bool = Field(
        default=True,
        description="Redis ACL users per role (gateway, orchestrator, worker) with fresh passwords at each "
        "start, the default user off; false: no password (loopback only)",
    )
    redis_tls: bool = Field(
        default=False,
        description="Redis over TLS only (its port speaks TLS, certificates from the stack's CA); needs "
        "stack.tls and a redis-server built with TLS",
    )
    ray_auth: bool = Field(
        default=True,
        description="Ray's token authentication for the orchestrator's cluster (RAY_AUTH_MODE=token), the "
        "token in <dir>/ray-auth-token, mode 600, fresh at each start",
    )
