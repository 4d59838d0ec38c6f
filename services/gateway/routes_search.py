"""``/v1/search`` and ``/v1/answer``: authenticated, then forwarded to the orchestrator (in-process
or the stack's Serve ingress) with the principal; the outcome's stages and verdicts are counted."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request

from services.api.schemas import (
    AnswerRequest,
    AnswerResponse,
    FilteredHit,
    SearchHit,
    SearchRequest,
    SearchResponse,
)
from services.common import metrics as rampart_metrics
from services.common.types import Principal
from services.gateway.access import Access, require
from services.gateway.backends import GatewayBackends
from services.gateway.errors import ERROR_RESPONSES
from services.orchestrator.serving.messages import PipelineAnswerRequest, PipelineSearchRequest


def search_router(backends: GatewayBackends, access: Access) -> APIRouter:
    router = APIRouter(tags=["search"], responses=ERROR_RESPONSES)

    @router.post("/v1/search", response_model=SearchResponse)
    async def search(
        body: SearchRequest, request: Request, who: Principal = Depends(access.principal)
    ) -> SearchResponse:
        """Hybrid search over the chunks the caller may read (tenant + ACL filtered inside the index);
        with ``adaptive: true``, the routed pipeline (docs/orchestration.md)."""
        require(who, "search")
        call = PipelineSearchRequest(principal=who, request=body, request_id=request.state.request_id)
        response = (await backends.orchestrator.search(call)).unwrap()
        count(response.degraded, response.results, response.filtered)
        return response

    @router.post("/v1/answer", response_model=AnswerResponse)
    async def answer(
        body: AnswerRequest, request: Request, who: Principal = Depends(access.principal)
    ) -> AnswerResponse:
        """Answer a question from the verified context, with citations (docs/orchestration.md).

        The adaptive pipeline routes the question, rewrites follow-ups (send the returned session_id
        with the next turn), chains multi-hop questions, grades and corrects the retrieval, fact-checks
        it and answers: extractively by default, with the configured LLM when there is one."""
        require(who, "search")
        call = PipelineAnswerRequest(principal=who, request=body, request_id=request.state.request_id)
        response = (await backends.orchestrator.answer(call)).unwrap_answer()
        count(response.degraded, response.results, response.filtered)
        return response

    return router


def count(stages: list[str], hits: list[SearchHit], filtered: list[FilteredHit]) -> None:
    """Outcome metrics: degraded stages and every verdict, returned or withheld."""
    judged = [h.verdict.verdict.value for h in hits if h.verdict is not None]
    rampart_metrics.record_outcome(stages, [*judged, *(j.verdict.value for j in filtered)])
