"""What the gateway calls behind its auth and limits: the pipeline and ingest, local or remote.

Embedded (``rampart serve``): both run in this process over the local index. Distributed (the
stack, ``remote.orchestrator_url`` + ``remote.ingest_address`` set): search/answer go to the
orchestrator's Serve ingress over HTTP and documents to the durable ingest service over gRPC; the
gateway holds no index and no model. The endpoints cannot tell the two apart.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import httpx

from services.api.schemas import AnswerResponse, ErrorBody, SearchResponse
from services.common.config import RemoteSettings
from services.common.errors import ErrorCode, RampartError
from services.common.internal_auth import INTERNAL_TOKEN_HEADER
from services.common.otel import trace_headers
from services.common.settings import RampartSettings
from services.ingest.ingestor import Ingestor, build_ingestor
from services.orchestrator.serving.http_app import InProcessBackend, OrchestratorBackend
from services.orchestrator.serving.messages import PipelineAnswerRequest, PipelineReply, PipelineSearchRequest

if TYPE_CHECKING:
    from services.orchestrator.runtime import Runtime


@dataclass
class GatewayBackends:
    settings: RampartSettings
    ingestor: Ingestor
    orchestrator: OrchestratorBackend

    @classmethod
    def embedded(cls, runtime: Runtime) -> GatewayBackends:
        """Search, answers and ingest in this process, over ``runtime`` (its owner closes it)."""
        from services.orchestrator.serving.pipeline_service import PipelineService

        return cls(
            runtime.settings,
            build_ingestor(runtime.settings, runtime.ingest),
            InProcessBackend(PipelineService(runtime)),
        )

    @classmethod
    def remote(cls, settings: RampartSettings) -> GatewayBackends:
        """Clients only; nothing connects until the first call (start-up checks use ``readiness``)."""
        r = settings.remote
        if not r.orchestrator_url or not r.ingest_address:
            raise RampartError(
                ErrorCode.FAILED_PRECONDITION,
                "the remote gateway needs both remote.orchestrator_url and remote.ingest_address "
                f"(got {r.orchestrator_url!r}, {r.ingest_address!r}); set RAMPART_REMOTE__… or use "
                "`rampart serve` without them for the embedded mode",
            )
        return cls(settings, build_ingestor(settings), HttpOrchestrator(r))

    async def readiness(self) -> dict[str, Any]:
        """``/readyz``: the pipeline's readiness (raises when it cannot serve) plus ingest's."""
        from fastapi.concurrency import run_in_threadpool

        body = dict(await self.orchestrator.readiness())
        try:
            await run_in_threadpool(self.ingestor.check_ready)
            body["ingest"] = "ready"
        except RampartError as exc:
            body["ingest"] = f"degraded: {exc.message}"  # search still serves; documents are refused
        return body

    async def aclose(self) -> None:
        closer = getattr(self.orchestrator, "aclose", None)
        if closer is not None:
            await closer()
        self.ingestor.close()  # an in-process ingestor's is a no-op: the runtime's owner closes the index


class HttpOrchestrator:
    """The orchestrator's Serve HTTP ingress (``services.orchestrator.serving.http_app``) as a backend.

    The principal travels in the body, so the ingress must trust its caller: the shared
    ``remote.internal_token`` proves it. Trace context goes as W3C ``traceparent``.
    """

    def __init__(self, remote: RemoteSettings) -> None:
        assert remote.orchestrator_url is not None
        self.url = remote.orchestrator_url.rstrip("/")
        self.timeout_s = remote.orchestrator_timeout_s
        self._token = remote.internal_token.get_secret_value() if remote.internal_token else None
        self._client: httpx.AsyncClient | None = None

    def _http(self) -> httpx.AsyncClient:
        if self._client is None:
            self._client = httpx.AsyncClient(base_url=self.url, timeout=self.timeout_s)
        return self._client

    def _headers(self) -> dict[str, str]:
        headers = {"content-type": "application/json"}
        if self._token:
            headers[INTERNAL_TOKEN_HEADER] = self._token
        return {**headers, **trace_headers()}

    async def _post(self, path: str, body: str) -> httpx.Response:
        try:
            return await self._http().post(path, content=body, headers=self._headers())
        except httpx.TimeoutException as exc:
            raise RampartError(
                ErrorCode.DEADLINE_EXCEEDED,
                f"the orchestrator at {self.url} did not answer within {self.timeout_s:.0f}s "
                "(remote.orchestrator_timeout_s)",
                stage="orchestrator",
            ) from exc
        except httpx.HTTPError as exc:
            raise RampartError(
                ErrorCode.UNAVAILABLE,
                f"the orchestrator at {self.url} is unreachable ({type(exc).__name__}); is "
                "`rampart serve-ray` running?",
                stage="orchestrator",
            ) from exc

    async def search(self, call: PipelineSearchRequest) -> PipelineReply:
        r = await self._post("/v1/search", call.model_dump_json())
        if r.status_code == 200:
            return PipelineReply(response=SearchResponse.model_validate_json(r.content))
        return _failed(r)

    async def answer(self, call: PipelineAnswerRequest) -> PipelineReply:
        r = await self._post("/v1/answer", call.model_dump_json())
        if r.status_code == 200:
            return PipelineReply(answer=AnswerResponse.model_validate_json(r.content))
        return _failed(r)

    async def readiness(self) -> dict[str, Any]:
        try:
            r = await self._http().get("/readyz", headers=self._headers())
        except httpx.HTTPError as exc:
            raise RampartError(
                ErrorCode.UNAVAILABLE,
                f"the orchestrator at {self.url} is unreachable ({type(exc).__name__})",
                stage="orchestrator",
            ) from exc
        if r.status_code != 200:
            _failed(r).unwrap()  # raises the ingress's error as the RampartError it was
        return dict(r.json())

    async def aclose(self) -> None:
        if self._client is not None:
            with contextlib.suppress(httpx.HTTPError):
                await self._client.aclose()


def _failed(r: httpx.Response) -> PipelineReply:
    """The ingress answers every error, the caller's included, as ``{code, message, details}``; an
    answer without that body is its proxy's, never a verdict on the request: Ray Serve's proxy answers
    404 while the application (re)deploys and 5xx while a replica is gone. So it is 503 ``unavailable``
    whatever its status, and the client retries instead of "fixing" a valid request."""
    try:
        body = ErrorBody.model_validate_json(r.content)
    except ValueError:
        return PipelineReply(
            error=ErrorBody(
                code=ErrorCode.UNAVAILABLE.value,
                message=f"the orchestrator answered HTTP {r.status_code} without an error body (its "
                "Serve proxy is starting, redeploying or lost a replica); retry shortly",
                details={"stage": "orchestrator", "upstream_status": r.status_code},
            ),
            status=503,
        )
    return PipelineReply(error=body, status=r.status_code)
