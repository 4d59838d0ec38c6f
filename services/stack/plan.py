"""What the stack runs: one :class:`Program` per service, and the environment that wires them together.

Every program reads the same ``RampartSettings`` from the environment; the stack only sets the
addresses that turn each stage remote (``remote.*``, Celery and session URLs, Triton) and a fresh
internal token. A user's own ``RAMPART_*`` and ``OTEL_*`` variables pass through unchanged, so
``OTEL_EXPORTER_OTLP_ENDPOINT=… rampart stack up`` traces the whole stack.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path

from services.common.errors import ErrorCode, RampartError
from services.common.redis_server import INSTALL_HINT, redis_command, redis_server_binary
from services.common.settings import RampartSettings

LOOPBACK = "127.0.0.1"


@dataclass(frozen=True)
class Program:
    """One supervised process; ``priority`` orders start-up (lower first) and the reverse shutdown."""

    name: str
    argv: list[str]
    priority: int
    env: dict[str, str] = field(default_factory=dict)
    stop_wait_s: int = 20
    # SIGTERM the whole process group (the default), or only the program, which then stops its own
    # children in order (serve-ray: Serve first, then the Ray processes it started)
    stop_as_group: bool = True


@dataclass(frozen=True)
class Addresses:
    retrieval: str
    ingest: str
    orchestrator_url: str
    gateway_url: str
    redis_url: str

    @classmethod
    def of(cls, settings: RampartSettings) -> Addresses:
        return cls(
            retrieval=f"{LOOPBACK}:{settings.retrieval_service.port}",
            ingest=f"{LOOPBACK}:{settings.ingest_service.port}",
            orchestrator_url=f"http://{LOOPBACK}:{settings.serve.port}",
            gateway_url=f"http://{LOOPBACK}:{settings.gateway.port}",
            redis_url=f"redis://{LOOPBACK}:{settings.stack.redis_port}",
        )


def stack_env(settings: RampartSettings, token: str) -> dict[str, str]:
    """Variables every program gets on top of the caller's environment."""
    a = Addresses.of(settings)
    s = settings.stack
    env = {
        "RAMPART_DATA_DIR": str(settings.data_dir.resolve()),
        "RAMPART_MODELS_DIR": str(settings.models_dir.resolve()),
        "RAMPART_REMOTE__RETRIEVAL_ADDRESS": a.retrieval,
        "RAMPART_REMOTE__INGEST_ADDRESS": a.ingest,
        "RAMPART_REMOTE__ORCHESTRATOR_URL": a.orchestrator_url,
        "RAMPART_REMOTE__INTERNAL_TOKEN": token,
        "RAMPART_RETRIEVAL_SERVICE__HOST": LOOPBACK,
        "RAMPART_RETRIEVAL_SERVICE__PORT": str(settings.retrieval_service.port),
        "RAMPART_INGEST_SERVICE__HOST": LOOPBACK,
        "RAMPART_INGEST_SERVICE__PORT": str(settings.ingest_service.port),
        "RAMPART_GATEWAY__HOST": LOOPBACK,
        "RAMPART_GATEWAY__PORT": str(settings.gateway.port),
        "RAMPART_SERVE__HOST": LOOPBACK,
        "RAMPART_SERVE__PORT": str(settings.serve.port),
        "RAMPART_FACTCHECK__BACKEND": "celery" if settings.factcheck.backend != "none" else "none",
        "RAMPART_FACTCHECK__CELERY__BROKER_URL": f"{a.redis_url}/0",
        "RAMPART_FACTCHECK__CELERY__RESULT_BACKEND": f"{a.redis_url}/1",
        "RAMPART_SESSIONS__BACKEND": "redis",
        "RAMPART_SESSIONS__REDIS_URL": f"{a.redis_url}/2",
        "RAY_USAGE_STATS_ENABLED": "0",
        "PYTHONUNBUFFERED": "1",
    }
    if settings.rerank.backend != "none":
        env["RAMPART_RERANK__BACKEND"] = "triton" if s.triton else "onnx"
        env["RAMPART_RERANK__TRITON__URL"] = f"{LOOPBACK}:{s.triton_grpc_port}"
    return env


def programs(settings: RampartSettings, *, python: Path | None = None) -> list[Program]:
    """The stack's processes, dependencies first: redis, Triton, retrieval, ingest, workers, orchestrator,
    gateway. Raises when a required binary is missing, naming how to install it."""
    py = str(python or Path(sys.executable))
    rampart = [py, "-m", "services.cli.main"]
    s = settings.stack
    redis = redis_server_binary()
    if redis is None:
        raise RampartError(ErrorCode.FAILED_PRECONDITION, f"redis-server is not installed; {INSTALL_HINT}")
    out = [
        Program(
            "redis",
            redis_command(redis, s.redis_port),
            priority=10,
            stop_wait_s=10,
        )
    ]
    if s.triton and settings.rerank.backend != "none":
        venv = settings.rerank.triton.venv
        if not (venv / "bin" / "python").exists():
            raise RampartError(
                ErrorCode.FAILED_PRECONDITION,
                f"no tritonserver venv at {venv} (rerank.triton.venv); run `make triton`, or rerank "
                "in-process with RAMPART_STACK__TRITON=false",
            )
        out.append(
            Program(
                "triton",
                [
                    *rampart,
                    "triton",
                    "serve",
                    "--grpc-port",
                    str(s.triton_grpc_port),
                    "--http-port",
                    str(s.triton_http_port),
                    "--metrics-port",
                    str(s.triton_metrics_port),
                ],
                priority=20,
                stop_wait_s=30,
            )
        )
    out += [
        Program("retrieval", [py, "-m", "services.retrieval.server"], priority=30, env=_otel("retrieval")),
        Program("ingest", [py, "-m", "services.ingest.server"], priority=40, env=_otel("ingest")),
    ]
    if settings.factcheck.backend != "none":
        out.append(
            Program(
                "worker",
                [*rampart, "worker", "--concurrency", str(s.workers)],
                priority=40,
                env={
                    **_otel("factcheck-worker"),
                    # prefork children write their metrics here; the worker's parent serves the sum
                    "PROMETHEUS_MULTIPROC_DIR": str(worker_metrics_dir(settings)),
                    "RAMPART_FACTCHECK__CELERY__METRICS_PORT": str(s.worker_metrics_port),
                },
                stop_wait_s=30,
            )
        )
    out += [
        Program(
            "orchestrator",
            [*rampart, "serve-ray"],
            priority=50,
            env=_otel("orchestrator"),
            stop_wait_s=60,
            stop_as_group=False,  # a group SIGTERM kills Ray's controller before Serve can shut down
        ),
        Program("gateway", [*rampart, "serve"], priority=60, env=_otel("gateway")),
    ]
    return out


def worker_metrics_dir(settings: RampartSettings) -> Path:
    return settings.stack_dir().resolve() / "worker-metrics"


def _otel(service: str) -> dict[str, str]:
    return {"OTEL_SERVICE_NAME": f"rampart-{service}"}
