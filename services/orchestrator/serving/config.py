"""Settings of the orchestrator as a Ray Serve application: :class:`ServeSettings` (``serve``),
read by ``rampart serve-ray`` and :mod:`.serve_config` (deployment options; what may change while
replicas run is :class:`~.serve_config.LiveTunables` there).
"""

from __future__ import annotations

from pydantic import BaseModel, Field, model_validator


class ServeSettings(BaseModel):
    """The orchestrator as a Ray Serve application (distributed mode; docs/ray-serve.md)."""

    ray_address: str | None = Field(
        default=None, description="Ray cluster to join (e.g. ray://head:10001); unset: start a local one"
    )
    ray_auth: bool = Field(
        default=True,
        description="Ray's token authentication (RAY_AUTH_MODE=token unless that variable says otherwise); the "
        "token from RAY_AUTH_TOKEN or RAY_AUTH_TOKEN_PATH (default ~/.ray/auth_token, made mode 600)",
    )
    app_name: str = Field(default="rampart-orchestrator", min_length=1, description="Serve application name")
    host: str = Field(default="127.0.0.1", description="Serve HTTP proxy bind address (0.0.0.0 to expose)")
    port: int = Field(
        default=8090, ge=1, le=65535, description="Serve HTTP proxy port (8000-8002: Triton; 8080: gateway)"
    )
    # Replicas ask Ray for 1 CPU by default: on a 2-core machine a third one would pend forever.
    pipeline_num_cpus: float = Field(
        default=0.5, gt=0.0, le=64.0, description="CPUs Ray reserves per pipeline replica (fractional)"
    )
    ingress_num_cpus: float = Field(
        default=0.25, gt=0.0, le=64.0, description="CPUs Ray reserves per ingress replica (fractional)"
    )
    pipeline_min_replicas: int = Field(default=1, ge=1, le=256, description="Autoscaling floor, pipeline")
    pipeline_max_replicas: int = Field(
        default=1,
        ge=1,
        le=256,
        description="Autoscaling ceiling, pipeline; >1 needs a shared index: the retrieval service "
        "(remote.retrieval_address) or OpenSearch (index.backend); the embedded one has one process",
    )
    ingress_min_replicas: int = Field(default=1, ge=1, le=256, description="Autoscaling floor, ingress")
    ingress_max_replicas: int = Field(default=2, ge=1, le=256, description="Autoscaling ceiling, ingress")
    target_ongoing_requests: float = Field(
        default=2.0, gt=0.0, le=1000.0, description="Autoscaler's target of in-flight requests per replica"
    )
    # Serve's own defaults: scale up after 30 s above target, down only after 10 min below it (a
    # replica loads the models for ~20-60 s, so one that comes and goes with every burst costs more
    # than it serves)
    upscale_delay_s: float = Field(
        default=30.0, ge=0.0, le=3600.0, description="Load above target this long before Serve adds a replica"
    )
    downscale_delay_s: float = Field(
        default=600.0, ge=0.0, le=86_400.0, description="Load below target this long before Serve removes one"
    )
    max_ongoing_requests: int = Field(
        default=8, ge=1, le=10_000, description="In-flight requests per replica before callers queue"
    )
    health_check_period_s: float = Field(
        default=10.0, gt=0.0, le=3600.0, description="How often Serve calls check_health on each replica"
    )
    health_check_timeout_s: float = Field(
        default=30.0, gt=0.0, le=3600.0, description="A check_health slower than this marks it unhealthy"
    )
    graceful_shutdown_timeout_s: float = Field(
        default=20.0, ge=0.0, le=3600.0, description="Time a stopping replica gets to finish its requests"
    )
    object_store_mb: int = Field(
        default=128, ge=80, le=1_000_000, description="Object store of a local cluster (requests are small)"
    )
    ready_timeout_s: float = Field(
        default=180.0, gt=0.0, le=3600.0, description="How long start-up waits for the app to be RUNNING"
    )
    metrics_port: int = Field(
        default=9103,
        ge=0,
        le=65535,
        description="Prometheus /metrics of the pipeline replica (stage latencies, verdicts) on serve.host; "
        "0 disables; a second replica on the same host skips it (logged)",
    )

    @model_validator(mode="after")
    def _replica_bounds(self) -> ServeSettings:
        for name in ("pipeline", "ingress"):
            low, high = getattr(self, f"{name}_min_replicas"), getattr(self, f"{name}_max_replicas")
            if low > high:
                raise ValueError(
                    f"serve.{name}_min_replicas={low} exceeds {name}_max_replicas={high}; raise the maximum"
                )
        return self
