"""The orchestrator as a Ray Serve application (distributed mode; docs/ray-serve.md).

Two deployments composed with a handle::

    HTTP proxy ──► OrchestratorIngress (FastAPI, stateless) ──handle──► PipelineDeployment (models, index)

``PipelineDeployment`` is a thin shell around :class:`PipelineService`, the object the embedded mode
uses in-process, so both modes run the same code. ``build_app(settings)`` is the typed builder;
``app_builder`` is the same for ``serve run services.orchestrator.serving.serve_app:app_builder`` and Serve
config files (KubeRay). Run it with ``rampart serve-ray`` or ``python -m services.orchestrator.serving.serve_app``.

No ``from __future__ import annotations`` here: Serve reads ``app_builder``'s annotation as a class.
"""

import logging
import os
import signal
import threading
import time
from typing import Any

import httpx
import ray
from fastapi import FastAPI
from ray import serve
from ray.exceptions import RayError
from ray.serve import Application
from ray.serve.exceptions import RayServeException
from ray.serve.handle import DeploymentHandle

from services.common.errors import ErrorCode, RampartError
from services.common.internal_auth import INTERNAL_TOKEN_HEADER
from services.common.metrics import start_metrics_server
from services.common.otel import (
    configure_tracing,
    start_client_tracing,
    trace_headers,
)
from services.common.service_auth import is_loopback
from services.common.settings import RampartSettings
from services.orchestrator.serving.http_app import create_orchestrator_app
from services.orchestrator.serving.messages import PipelineAnswerRequest, PipelineReply, PipelineSearchRequest
from services.orchestrator.serving.pipeline_service import PipelineService
from services.orchestrator.serving.ray_auth import prepare_ray_auth
from services.orchestrator.serving.serve_config import (
    LiveTunables,
    ServeAppArgs,
    apply_tunables,
    code_version,
    ingress_options,
    pipeline_options,
)

log = logging.getLogger(__name__)

PIPELINE = "PipelineDeployment"
SERVICE_NAME = "rampart-orchestrator"  # OTel service.name of both deployments' replicas
INGRESS = "OrchestratorIngress"
# Ray phones home unless told not to; nothing may leave these machines.
RAY_ENV = {"RAY_USAGE_STATS_ENABLED": "0"}


@serve.deployment(name=PIPELINE)
class PipelineDeployment:
    """One replica = one :class:`PipelineService` (models loaded once, index open)."""

    def __init__(self, settings: RampartSettings) -> None:
        # a replica is its own process: exporters from its OTEL_* env; its outgoing hops (retrieval
        # over gRPC, Celery fact-checks, Redis) continue the request's trace
        start_client_tracing(SERVICE_NAME)
        self._metrics = _metrics_server(settings)
        self._service = PipelineService.open(settings)

    def reconfigure(self, user_config: dict[str, Any]) -> None:
        """Serve calls this at start and whenever only ``user_config`` changed (no restart)."""
        self._service.reconfigure(LiveTunables.parse(user_config))

    def search(self, call: PipelineSearchRequest) -> PipelineReply:
        return self._service.reply(call)

    def answer(self, call: PipelineAnswerRequest) -> PipelineReply:
        return self._service.reply(call)

    def readiness(self) -> dict[str, Any]:
        """Like ``check_health`` but as data, for the ingress's /readyz."""
        try:
            self._service.check_health()
            return self._service.readiness()
        except RampartError as exc:
            return {"status": "unavailable", "error": exc.to_dict()}

    def info(self) -> dict[str, Any]:
        """Which process answers and with which tunables (tests, operators)."""
        s = self._service.settings
        return {
            "pid": os.getpid(),
            "tunables": self._service.tunables.to_user_config(),
            "rerank_enabled": s.rerank.enabled,
            "rerank_depth": s.rerank.depth,
            "factcheck_depth": s.factcheck.depth,
            "routing_min_confidence": s.routing.min_confidence,
            "grading": [s.grading.incorrect_threshold, s.grading.correct_threshold],
        }

    def check_health(self) -> None:
        """Serve restarts the replica when this raises (index closed, in-process model broken)."""
        try:
            self._service.check_health()
        except RampartError as exc:
            # a plain exception: RampartError does not survive Ray's exception serialisation
            raise RuntimeError(exc.message) from None

    def __del__(self) -> None:
        service = getattr(self, "_service", None)
        if service is not None:
            service.close()  # releases the index lock for the next replica


class HandleBackend:
    """:class:`OrchestratorBackend` over a Serve handle to the pipeline deployment."""

    def __init__(self, pipeline: DeploymentHandle[Any]) -> None:
        self._pipeline = pipeline

    async def search(self, call: PipelineSearchRequest) -> PipelineReply:
        return await self._call("search", call)

    async def answer(self, call: PipelineAnswerRequest) -> PipelineReply:
        return await self._call("answer", call)

    async def _call(self, method: str, call: PipelineSearchRequest | PipelineAnswerRequest) -> PipelineReply:
        # a handle call carries no trace context: the message does (PipelineService.reply attaches it)
        call = call.model_copy(update={"trace_context": trace_headers()})
        try:
            reply: PipelineReply = await getattr(self._pipeline, method).remote(call)
        except (RayError, RayServeException) as exc:
            raise RampartError(
                ErrorCode.UNAVAILABLE, f"the pipeline deployment did not answer ({type(exc).__name__}); retry"
            ) from exc
        return reply

    async def readiness(self) -> dict[str, Any]:
        try:
            state: dict[str, Any] = await self._pipeline.readiness.remote()
        except (RayError, RayServeException) as exc:
            raise RampartError(
                ErrorCode.UNAVAILABLE, f"the pipeline deployment did not answer ({type(exc).__name__})"
            ) from exc
        if state.get("status") != "ready":
            err = state.get("error") or {}
            raise RampartError(ErrorCode.UNAVAILABLE, str(err.get("message", "pipeline not ready")))
        return state


def _metrics_server(settings: RampartSettings) -> object | None:
    """The replica's ``/metrics`` (stage histograms, verdict and degradation counters live here, where
    the pipeline runs). Optional: a port taken (another replica on this host) is logged, not fatal."""
    s = settings.serve
    if not s.metrics_port:
        return None
    try:
        return start_metrics_server(s.host, s.metrics_port)[0]
    except RampartError as exc:
        log.warning("pipeline replica serves no /metrics: %s", exc.message)
        return None


@serve.deployment(name=INGRESS)
@serve.ingress()
class OrchestratorIngress:
    """The HTTP entry (FastAPI); stateless, so it autoscales without touching the models."""

    def __init__(self, pipeline: DeploymentHandle[Any], token: str | None = None) -> None:
        configure_tracing(SERVICE_NAME)
        self._backend = HandleBackend(pipeline)
        self._token = token

    def __serve_build_asgi_app__(self) -> FastAPI:
        return create_orchestrator_app(self._backend, token=self._token)


def build_app(settings: RampartSettings, tunables: LiveTunables | None = None) -> Application:
    """The Serve application for these settings; a bad config is refused here, before any deploy."""
    s = settings.serve
    if s.pipeline_max_replicas > 1 and not shared_index(settings):
        raise RampartError(
            ErrorCode.FAILED_PRECONDITION,
            f"serve.pipeline_max_replicas={s.pipeline_max_replicas}, but the embedded index is opened by "
            "one process at a time; keep 1 (scale the ingress instead), serve the index from the "
            "retrieval service (remote.retrieval_address) or put it on OpenSearch "
            "(RAMPART_INDEX__BACKEND=opensearch)",
            field="serve.pipeline_max_replicas",
        )
    chosen = tunables or LiveTunables()
    apply_tunables(settings, chosen)  # raises RampartError naming the bad key
    settings = _absolute_paths(settings)
    version = code_version(settings)
    secret = settings.remote.internal_token
    token = secret.get_secret_value() if secret else None
    check_ingress_exposure(settings.serve.host, token)
    # ``_internal`` lets us pin the version (see code_version): only then does a tunables-only
    # redeploy reconfigure the running replicas instead of restarting them.
    pipeline = PipelineDeployment.options(  # type: ignore[attr-defined]
        version=version,
        user_config=chosen.to_user_config(),
        _internal=True,
        **pipeline_options(settings),
    ).bind(settings)
    app: Application = OrchestratorIngress.options(  # type: ignore[attr-defined]
        version=version, _internal=True, **ingress_options(settings)
    ).bind(pipeline, token)
    return app


def check_ingress_exposure(host: str, token: str | None) -> None:
    """The ingress trusts the principal in the body: on an address other hosts reach, only callers
    with the internal token may send one. Refused here, before anything is deployed."""
    if token or is_loopback(host):
        return
    raise RampartError(
        ErrorCode.FAILED_PRECONDITION,
        f"the orchestrator ingress would listen on {host!r} (serve.host), reachable from other hosts, "
        "without remote.internal_token: anyone there could search as any user; set "
        "RAMPART_REMOTE__INTERNAL_TOKEN (the gateway sends the same) or RAMPART_SERVE__HOST=127.0.0.1",
        field="serve.host",
    )


def shared_index(settings: RampartSettings) -> bool:
    """Whether any number of pipeline replicas may open the index: it is the retrieval service's
    (each replica a gRPC client) or an OpenSearch cluster's (each replica a client of it); the
    embedded index is one process's."""
    return bool(settings.remote.retrieval_address) or settings.index.backend == "opensearch"


def app_builder(args: ServeAppArgs) -> Application:
    """``serve run services.orchestrator.serving.serve_app:app_builder`` / Serve config ``import_path``."""
    parsed = ServeAppArgs.model_validate(args)
    return build_app(RampartSettings(), parsed.tunables)


def _absolute_paths(settings: RampartSettings) -> RampartSettings:
    """Replicas may run in another working directory (another node, a container)."""
    return settings.model_copy(
        update={
            "data_dir": settings.data_dir.resolve(),
            "models_dir": settings.models_dir.resolve(),
            "eval_data_dir": settings.eval_data_dir.resolve(),
        }
    )


# ---- running it ------------------------------------------------------------------------------------
def connect(settings: RampartSettings, *, log_to_driver: bool = True) -> None:
    """Join ``serve.ray_address`` or start a local cluster, then Serve's HTTP proxy on host:port.

    ``log_to_driver=False`` keeps replica logs out of this process (benchmarks time work in it).
    """
    for key, value in RAY_ENV.items():
        os.environ.setdefault(key, value)
    s = settings.serve
    if not ray.is_initialized():
        prepare_ray_auth(settings)
        if s.ray_address:
            ray.init(address=s.ray_address, include_dashboard=False, log_to_driver=log_to_driver)
        else:
            ray.init(
                include_dashboard=False,
                object_store_memory=s.object_store_mb * 1024 * 1024,
                log_to_driver=log_to_driver,
            )
    serve.start(http_options={"host": s.host, "port": s.port})


def deploy(settings: RampartSettings, tunables: LiveTunables | None = None) -> DeploymentHandle[Any]:
    """Deploy (or update) the app and wait until it is RUNNING; returns the ingress handle.

    Re-deploying with other ``tunables`` only reconfigures the running pipeline replicas.
    """
    app = build_app(settings, tunables)
    if _app_status(settings.serve.app_name) == "DEPLOY_FAILED":
        # Serve does not retry a version whose deploy failed, and ours is pinned: start over
        serve.delete(settings.serve.app_name)
    try:
        handle: DeploymentHandle[Any] = serve.run(app, name=settings.serve.app_name, route_prefix="/")
    except RuntimeError as exc:
        cause = _deploy_failure(settings.serve.app_name)
        raise RampartError(
            ErrorCode.UNAVAILABLE,
            f"Ray Serve could not deploy {settings.serve.app_name!r}: {cause or exc}; the replica logs "
            "(<ray session>/logs/serve) have the rest",
        ) from exc
    return handle


def _app_status(app_name: str) -> str:
    app = serve.status().applications.get(app_name)
    return app.status.value if app is not None else ""


def _deploy_failure(app_name: str) -> str:
    """The last line of the failing deployment's message (the replica's own error), if Serve has one."""
    try:
        app = serve.status().applications.get(app_name)
    except RayError:
        return ""
    if app is None:
        return ""
    for name, dep in app.deployments.items():
        lines = [line.strip() for line in (dep.message or "").splitlines() if line.strip()]
        if lines and dep.status.value not in ("HEALTHY", "UPDATING"):
            return f"{name}: {lines[-1][:500]}"
    return ""


def pipeline_handle(settings: RampartSettings) -> DeploymentHandle[Any]:
    """A handle straight to the pipeline deployment (in-cluster callers, tests, the bench)."""
    return serve.get_deployment_handle(PIPELINE, app_name=settings.serve.app_name)


def base_url(settings: RampartSettings) -> str:
    host = settings.serve.host
    return f"http://{'127.0.0.1' if host in ('0.0.0.0', '::') else host}:{settings.serve.port}"  # noqa: S104


def wait_http_ready(settings: RampartSettings, stop: threading.Event | None = None) -> None:
    """Poll /readyz through the proxy until it answers 200 (the proxy starts after the app); returns
    early once ``stop`` is set (a SIGTERM while starting must not wait out the timeout)."""
    deadline = time.monotonic() + settings.serve.ready_timeout_s
    last = "no answer"
    secret = settings.remote.internal_token
    headers = {INTERNAL_TOKEN_HEADER: secret.get_secret_value()} if secret else {}
    while time.monotonic() < deadline:
        if stop is not None and stop.is_set():
            return
        try:
            r = httpx.get(f"{base_url(settings)}/readyz", headers=headers, timeout=5)
            if r.status_code == 200:
                return
            last = f"HTTP {r.status_code}: {r.text[:200]}"
        except httpx.TransportError as exc:
            last = str(exc)
        time.sleep(0.2)
    raise RampartError(
        ErrorCode.UNAVAILABLE,
        f"the orchestrator at {base_url(settings)} was not ready within {settings.serve.ready_timeout_s} s "
        f"({last}); raise RAMPART_SERVE__READY_TIMEOUT_S or check the Serve logs",
    )


def shutdown() -> None:
    """Stop the app, Serve and (if this process started it) the local Ray cluster."""
    if ray.is_initialized():
        serve.shutdown()  # type: ignore[no-untyped-call]
        ray.shutdown()


def serve_forever(settings: RampartSettings, tunables: LiveTunables | None = None) -> None:
    """Start, block until SIGINT/SIGTERM, stop cleanly (what the CLI and ``python -m`` run)."""
    if tunables is not None:
        apply_tunables(settings, tunables)  # refuse a bad config before starting a cluster
    stop = threading.Event()
    previous: dict[int, Any] = {}
    try:
        connect(settings)
        # after ray.init: its own SIGTERM handler aborts the process and orphans Ray's agents
        for sig in (signal.SIGINT, signal.SIGTERM):
            previous[int(sig)] = signal.signal(sig, lambda *_: stop.set())
        deploy(settings, tunables)
        wait_http_ready(settings, stop)
        if not stop.is_set():  # a signal during start-up: shut down without announcing anything
            log.info("orchestrator serving", extra={"url": base_url(settings)})
            print(
                f"serving {base_url(settings)}/v1/search (Ray Serve app {settings.serve.app_name!r})",
                flush=True,
            )
            stop.wait()
    finally:
        shutdown()
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def main() -> None:
    from services.common.telemetry import configure_logging

    settings = RampartSettings()
    configure_logging(settings.log_level, settings.log_format)
    serve_forever(settings)


if __name__ == "__main__":
    main()


__all__ = [
    "INGRESS",
    "PIPELINE",
    "OrchestratorIngress",
    "PipelineDeployment",
    "app_builder",
    "build_app",
    "connect",
    "deploy",
    "pipeline_handle",
    "serve_forever",
    "shutdown",
]
