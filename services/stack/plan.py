"""What the stack runs: one :class:`Program` per service, and the environment that wires them together.

Every program reads the same ``RampartSettings`` from the environment; the stack only sets the
addresses that turn each stage remote (``remote.*``, Celery and session URLs, Triton) and the
credentials, fresh at each start (:class:`StackSecrets`): the internal token, a CA and one
certificate per gRPC service (mTLS), one Redis user per role, Ray's token. A user's own ``RAMPART_*``
and ``OTEL_*`` variables pass through unchanged, so ``OTEL_EXPORTER_OTLP_ENDPOINT=… rampart stack up``
traces the whole stack.

Secrets travel only in supervisord's own environment (its children inherit it): a program that needs
its own (a Redis URL with its role's password) names the shared variable in ``env_refs``, which the
configuration file renders as a reference (``%(ENV_NAME)s``), never as the value.
"""

from __future__ import annotations

import secrets
import sys
from dataclasses import dataclass, field
from pathlib import Path

from services.common.dev_certs import DevCerts
from services.common.errors import ErrorCode, RampartError
from services.common.redis_server import (
    INSTALL_HINT,
    RedisAuth,
    RedisTls,
    redis_command,
    redis_server_binary,
    redis_url,
)
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
    # variable -> name of a variable of supervisord's environment (a secret the file must not hold)
    env_refs: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Addresses:
    """Where each service listens; ``retrieval`` and ``ingest`` list every replica (comma-separated,
    the form ``remote.*_address`` balances over: services/common/grpc_client.py)."""

    retrieval: str
    ingest: str
    orchestrator_url: str
    gateway_url: str

    @classmethod
    def of(cls, settings: RampartSettings) -> Addresses:
        n = settings.stack.replicas
        return cls(
            retrieval=",".join(
                f"{LOOPBACK}:{replica_port(settings, settings.retrieval_service.port, i)}" for i in range(n)
            ),
            ingest=",".join(
                f"{LOOPBACK}:{replica_port(settings, settings.ingest_service.port, i)}" for i in range(n)
            ),
            orchestrator_url=f"http://{LOOPBACK}:{settings.serve.port}",
            gateway_url=f"http://{LOOPBACK}:{settings.gateway.port}",
        )


def replica_port(settings: RampartSettings, port: int, i: int) -> int:
    """Port of replica ``i`` (from 0) of a service whose first replica listens on ``port`` (0: off)."""
    if port == 0:
        return 0
    got = port + i * settings.stack.replica_port_step
    if got > 65535:
        raise RampartError(
            ErrorCode.INVALID_ARGUMENT,
            f"replica {i} of the service on port {port} would listen on {got} (> 65535) with "
            f"stack.replica_port_step={settings.stack.replica_port_step}; lower the step "
            "(RAMPART_STACK__REPLICA_PORT_STEP), the port or --replicas",
        )
    return got


def replica_name(service: str, i: int) -> str:
    """``retrieval``, ``retrieval-1``, …: the first replica keeps the service's name."""
    return service if i == 0 else f"{service}-{i}"


def opensearch_url(settings: RampartSettings) -> str:
    """The node the stack's index lives on: ``opensearch.url`` (attach), else the local node on
    ``opensearch.port`` (the stack's own ``opensearch`` program, or one ``rampart opensearch up`` runs)."""
    return settings.opensearch.url or f"http://{LOOPBACK}:{settings.opensearch.port}"


def runs_node(settings: RampartSettings) -> bool:
    """Whether the stack starts a node itself: on OpenSearch, with no URL given and no node already
    running from ``opensearch.data_dir`` (then the stack attaches to that one)."""
    from services.retrieval.opensearch_node import running_pid

    if settings.index.backend != "opensearch" or settings.opensearch.url:
        return False
    return running_pid(settings.opensearch.data_dir.resolve()) is None


def check_replicas(settings: RampartSettings) -> None:
    n = settings.stack.replicas
    if n > 1 and settings.index.backend != "opensearch":
        raise RampartError(
            ErrorCode.FAILED_PRECONDITION,
            f"stack.replicas={n}, but the embedded index is one process's (the retrieval service's); run "
            "the index on OpenSearch for replicas: `rampart stack up --index opensearch --replicas "
            f"{n}`, or keep --replicas 1",
        )


@dataclass(frozen=True, repr=False)
class StackSecrets:
    """One start's credentials: the internal token, the Redis users' passwords, Ray's token, Triton's
    caller key (the user's ``rerank.triton.key`` if set)."""

    token: str
    redis: RedisAuth | None = None
    ray_token: str | None = None
    triton_key: str | None = None

    @classmethod
    def fresh(cls, settings: RampartSettings, token: str) -> StackSecrets:
        s = settings.stack
        given = settings.rerank.triton.key
        return cls(
            token,
            RedisAuth.fresh() if s.redis_auth else None,
            secrets.token_hex(32) if s.ray_auth else None,
            (given.get_secret_value() if given else secrets.token_urlsafe(32))
            if runs_triton(settings)
            else None,
        )

    def __repr__(self) -> str:
        return (
            f"StackSecrets(redis={self.redis!r}, ray={'set' if self.ray_token else None}, "
            f"triton={'set' if self.triton_key else None})"
        )


def certs(settings: RampartSettings) -> DevCerts | None:
    """The stack's CA and service certificates (``stack.tls``), made at each start."""
    return DevCerts(settings.stack_dir().resolve() / "certs") if settings.stack.tls else None


def redis_tls(settings: RampartSettings) -> RedisTls | None:
    made = certs(settings)
    if not settings.stack.redis_tls:
        return None
    if made is None:
        raise RampartError(
            ErrorCode.FAILED_PRECONDITION,
            "stack.redis_tls needs the stack's CA (stack.tls); set RAMPART_STACK__TLS=true or "
            "RAMPART_STACK__REDIS_TLS=false",
        )
    return RedisTls(made.cert("redis"), made.key("redis"), made.ca)


def redis_acl_path(settings: RampartSettings) -> Path:
    return settings.stack_dir().resolve() / "redis-users.acl"


def ray_token_path(settings: RampartSettings) -> Path:
    return settings.stack_dir().resolve() / "ray-auth-token"


REDIS_DBS = {"broker": 0, "results": 1, "sessions": 2}
FEEDBACK_DB = 3  # the gateway's: feedback streams and impressions (the chart's rate-limit database too)


def redis_ref(role: str, db: str) -> str:
    """The shared variable holding ``role``'s URL of ``db`` (:data:`REDIS_DBS`)."""
    return f"RAMPART_STACK_REDIS_URL_{role.upper()}_{db.upper()}"


def _redis_urls(settings: RampartSettings, stack_secrets: StackSecrets) -> dict[str, str]:
    auth, tls, port = stack_secrets.redis, redis_tls(settings), settings.stack.redis_port
    roles = ("orchestrator", "worker")
    urls = {
        redis_ref(role, db): redis_url(port, n, role=role if auth else None, auth=auth, tls=tls)
        for role in roles
        for db, n in REDIS_DBS.items()
    }
    gateway = "gateway" if auth else None
    urls[redis_ref("gateway", "feedback")] = redis_url(port, FEEDBACK_DB, role=gateway, auth=auth, tls=tls)
    return urls


def stack_env(settings: RampartSettings, stack_secrets: StackSecrets | str) -> dict[str, str]:
    """Variables every program gets on top of the caller's environment (``stack_secrets``: this
    start's credentials; a bare token: no Redis users and no Ray token)."""
    if isinstance(stack_secrets, str):
        stack_secrets = StackSecrets(stack_secrets)
    token = stack_secrets.token
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
        # N pipeline replicas from the start; Serve's autoscaler may add more up to the maximum
        "RAMPART_SERVE__PIPELINE_MIN_REPLICAS": str(max(s.replicas, settings.serve.pipeline_min_replicas)),
        "RAMPART_SERVE__PIPELINE_MAX_REPLICAS": str(max(s.replicas, settings.serve.pipeline_max_replicas)),
        "RAMPART_INDEX__BACKEND": settings.index.backend,
        "RAMPART_FACTCHECK__BACKEND": "celery" if settings.factcheck.backend != "none" else "none",
        "RAMPART_SESSIONS__BACKEND": "redis",
        **_redis_urls(settings, stack_secrets),
        "RAY_USAGE_STATS_ENABLED": "0",
        "PYTHONUNBUFFERED": "1",
    }
    if stack_secrets.ray_token is not None:
        env["RAY_AUTH_MODE"] = "token"
        env["RAY_AUTH_TOKEN_PATH"] = str(ray_token_path(settings))
    else:
        env["RAY_AUTH_MODE"] = "disabled"
    if settings.index.backend == "opensearch":
        env["RAMPART_OPENSEARCH__URL"] = opensearch_url(settings)
        env["RAMPART_OPENSEARCH__DATA_DIR"] = str(settings.opensearch.data_dir.resolve())
    if settings.rerank.backend != "none":
        env["RAMPART_RERANK__BACKEND"] = "triton" if s.triton else "onnx"
        env["RAMPART_RERANK__TRITON__URL"] = f"{LOOPBACK}:{s.triton_grpc_port}"
    if stack_secrets.triton_key is not None:  # Triton's launcher requires it, the reranker sends it
        env["RAMPART_RERANK__TRITON__KEY"] = stack_secrets.triton_key
    return env


def _replicas(settings: RampartSettings, py: str) -> list[Program]:
    """``retrieval``/``ingest`` and their replicas, each on its own ports; ingest worker i > 0 keeps its
    own journal (``<journal_dir>-i``): a worker replays only what it acknowledged itself."""
    out: list[Program] = []
    r, g = settings.retrieval_service, settings.ingest_service
    for i in range(settings.stack.replicas):
        out.append(
            Program(
                replica_name("retrieval", i),
                [py, "-m", "services.retrieval.server"],
                priority=30,
                env={
                    **_otel("retrieval"),
                    **_tls(settings, "retrieval"),
                    "RAMPART_RETRIEVAL_SERVICE__PORT": str(replica_port(settings, r.port, i)),
                    "RAMPART_RETRIEVAL_SERVICE__METRICS_PORT": str(replica_port(settings, r.metrics_port, i)),
                },
            )
        )
    for i in range(settings.stack.replicas):
        journal = settings.ingest_journal_dir().resolve()
        out.append(
            Program(
                replica_name("ingest", i),
                [py, "-m", "services.ingest.server"],
                priority=40,
                env={
                    **_otel("ingest"),
                    **_tls(settings, "ingest"),
                    "RAMPART_INGEST_SERVICE__PORT": str(replica_port(settings, g.port, i)),
                    "RAMPART_INGEST_SERVICE__METRICS_PORT": str(replica_port(settings, g.metrics_port, i)),
                    "RAMPART_INGEST_SERVICE__JOURNAL_DIR": str(journal if i == 0 else Path(f"{journal}-{i}")),
                },
            )
        )
    return out


def programs(settings: RampartSettings, *, python: Path | None = None) -> list[Program]:
    """The stack's processes, dependencies first: redis, Triton, the OpenSearch node (when the stack
    runs one), retrieval and ingest (``stack.replicas`` of each), fact-check workers, orchestrator,
    gateway. Raises when a required binary is missing, naming how to install it."""
    py = str(python or Path(sys.executable))
    rampart = [py, "-m", "services.cli.main"]
    s = settings.stack
    check_replicas(settings)
    out = [_redis(settings)]
    if runs_triton(settings):
        out.append(_triton(settings, rampart))
    if runs_node(settings):
        # the node in the foreground under supervisord (SIGTERM closes its shards); retrieval and
        # ingest exit while it is not green yet and supervisord starts them again
        out.append(Program("opensearch", [*rampart, "opensearch", "run"], priority=15, stop_wait_s=30))
    out += _replicas(settings, py)
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
                env_refs=_redis_refs("worker"),
                stop_wait_s=30,
            )
        )
    out += [
        Program(
            "orchestrator",
            [*rampart, "serve-ray"],
            priority=50,
            env={
                **_otel("orchestrator"),
                **_tls(settings, "orchestrator"),
                **_triton_client_tls(settings, "orchestrator"),
            },
            env_refs=_redis_refs("orchestrator"),
            stop_wait_s=60,
            stop_as_group=False,  # a group SIGTERM kills Ray's controller before Serve can shut down
        ),
        Program(
            "gateway",
            [*rampart, "serve"],
            priority=60,
            # feedback in Redis streams (durable: the stack's Redis keeps an append-only file), as the
            # gateway's ACL user, so gateway replicas share impressions and feedback
            env={**_otel("gateway"), **_tls(settings, "gateway"), "RAMPART_FEEDBACK__BACKEND": "redis"},
            env_refs={"RAMPART_FEEDBACK__REDIS_URL": redis_ref("gateway", "feedback")},
        ),
    ]
    return out


def runs_triton(settings: RampartSettings) -> bool:
    return settings.stack.triton and settings.rerank.backend != "none"


def triton_tls(settings: RampartSettings) -> bool:
    """Triton's gRPC on mutual TLS with the stack's CA whenever the stack runs mTLS (``stack.tls``)."""
    return runs_triton(settings) and settings.stack.tls


def _triton(settings: RampartSettings, rampart: list[str]) -> Program:
    """``rampart triton serve`` on the stack's ports; with ``stack.tls`` its gRPC port is mutual TLS
    (the ``triton`` certificate, clients need one of the stack's CA: the orchestrator's)."""
    s = settings.stack
    venv = settings.rerank.triton.venv
    if not (venv / "bin" / "python").exists():
        raise RampartError(
            ErrorCode.FAILED_PRECONDITION,
            f"no tritonserver venv at {venv} (rerank.triton.venv); run `make triton`, or rerank "
            "in-process with RAMPART_STACK__TRITON=false",
        )
    command = [
        *rampart,
        "triton",
        "serve",
        "--grpc-port",
        str(s.triton_grpc_port),
        "--http-port",
        str(s.triton_http_port),
        "--metrics-port",
        str(s.triton_metrics_port),
    ]
    made = certs(settings)
    if triton_tls(settings) and made is not None:
        command += ["--grpc-cert", str(made.cert("triton")), "--grpc-key", str(made.key("triton"))]
        command += ["--grpc-ca", str(made.ca)]
    return Program("triton", command, priority=20, stop_wait_s=30)


def _triton_client_tls(settings: RampartSettings, name: str) -> dict[str, str]:
    """``rerank.triton.tls`` of the program ``name`` that reranks on Triton: the stack's CA and its own
    certificate (Triton asks for one of the CA)."""
    made = certs(settings)
    if not triton_tls(settings) or made is None:
        return {}
    return {
        "RAMPART_RERANK__TRITON__TLS__ENABLED": "true",
        "RAMPART_RERANK__TRITON__TLS__CA_FILE": str(made.ca),
        "RAMPART_RERANK__TRITON__TLS__CERT_FILE": str(made.cert(name)),
        "RAMPART_RERANK__TRITON__TLS__KEY_FILE": str(made.key(name)),
    }


def _redis(settings: RampartSettings) -> Program:
    """redis-server with the stack's ACL users (``stack.redis_auth``) and TLS (``stack.redis_tls``)."""
    redis = redis_server_binary()
    if redis is None:
        raise RampartError(ErrorCode.FAILED_PRECONDITION, f"redis-server is not installed; {INSTALL_HINT}")
    s = settings.stack
    acl = redis_acl_path(settings) if s.redis_auth else None
    # an append-only file in the stack's folder: the feedback streams must survive a restart
    command = redis_command(
        redis, s.redis_port, aclfile=acl, tls=redis_tls(settings), persist=settings.stack_dir().resolve()
    )
    return Program("redis", command, priority=10, stop_wait_s=10)


def worker_metrics_dir(settings: RampartSettings) -> Path:
    return settings.stack_dir().resolve() / "worker-metrics"


def _otel(service: str) -> dict[str, str]:
    return {"OTEL_SERVICE_NAME": f"rampart-{service}"}


def _tls(settings: RampartSettings, name: str) -> dict[str, str]:
    """mTLS on, with ``name``'s certificate and key: paths, no secret (the key file is mode 600 in a 700
    folder). Only the programs that serve or call gRPC: the others' settings would want files too."""
    made = certs(settings)
    return made.env(name) if made is not None else {}


def _redis_refs(role: str) -> dict[str, str]:
    """``role``'s Redis URLs (broker, results, sessions), by reference to the shared environment."""
    return {
        "RAMPART_FACTCHECK__CELERY__BROKER_URL": redis_ref(role, "broker"),
        "RAMPART_FACTCHECK__CELERY__RESULT_BACKEND": redis_ref(role, "results"),
        "RAMPART_SESSIONS__REDIS_URL": redis_ref(role, "sessions"),
    }
