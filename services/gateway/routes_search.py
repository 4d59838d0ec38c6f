"""``/v1/search`` and ``/v1/answer``: authenticated, then forwarded to the orchestrator (in-process
or the stack's Serve ingress) with the principal; the outcome's stages and verdicts are counted, and
the returned and withheld documents go to the audit log, and what the caller was shown to the
feedback store (the impression ``POST /v1/feedback`` is checked against)."""

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
from services.gateway.access import Access, Caller, require
from services.gateway.audit import AuditEvent, AuditSink, query_fields
from services.gateway.backends import GatewayBackends
from services.gateway.errors import ERROR_RESPONSES
from services.gateway.routes_feedback import remember_shown
from services.learning.feedback_store import FeedbackStore
from services.orchestrator.serving.messages import PipelineAnswerRequest, PipelineSearchRequest


def search_router(
    backends: GatewayBackends, access: Access, audit: AuditSink, feedback: FeedbackStore
) -> APIRouter:
    router = APIRouter(tags=["search"], responses=ERROR_RESPONSES)

    def record(
        action: str,
        c: Caller,
        query: str,
        response: SearchResponse | AnswerResponse,
        answer: str | None = None,
    ) -> None:
        digest, text = query_fields(query, audit.include_text)
        audit.record(
            AuditEvent(
                action=action,
                outcome="ok",
                tenant=c.principal.tenant,
                user=c.principal.user,
                credential=c.credential,
                client=c.client,
                request_id=response.request_id,
                trace_id=response.trace_id,
                doc_ids=list(dict.fromkeys(h.doc_id for h in response.results)),
                chunk_ids=[h.chunk_id for h in response.results],
                withheld_doc_ids=list(dict.fromkeys(f.doc_id for f in response.filtered)),
                answer=answer if audit.include_text else None,
                query_sha256=digest,
                query=text,
            )
        )

    @router.post("/v1/search", response_model=SearchResponse)
    async def search(
        body: SearchRequest, request: Request, c: Caller = Depends(access.caller("search"))
    ) -> SearchResponse:
        """Hybrid search over the chunks the caller may read (tenant + ACL filtered inside the index);
        with ``adaptive: true``, the routed pipeline (docs/orchestration.md)."""
        require(c.principal, "search")
        call = PipelineSearchRequest(principal=c.principal, request=body, request_id=request.state.request_id)
        response = (await backends.orchestrator.search(call)).unwrap()
        count(response.degraded, response.results, response.filtered)
        record("search", c, body.query, response)
        await remember_shown(feedback, backends.settings.feedback, c, "search", body.query, response)
        return response

    @router.post("/v1/answer", response_model=AnswerResponse)
    async def answer(
        body: AnswerRequest, request: Request, c: Caller = Depends(access.caller("answer"))
    ) -> AnswerResponse:
        """Answer a question from the verified context, with citations (docs/orchestration.md).

        The adaptive pipeline routes the question, rewrites follow-ups (send the returned session_id
        with the next turn), chains multi-hop questions, grades and corrects the retrieval, fact-checks
        it and answers: extractively by default, with the configured LLM when there is one. It costs
        more of the rate limit than a search (gateway.costs)."""
        require(c.principal, "search")
        call = PipelineAnswerRequest(principal=c.principal, request=body, request_id=request.state.request_id)
        response = (await backends.orchestrator.answer(call)).unwrap_answer()
        count(response.degraded, response.results, response.filtered)
        record("answer", c, body.query, response, response.answer)
        await remember_shown(feedback, backends.settings.feedback, c, "answer", body.query, response)
        return response

    return router


def count(stages: list[str], hits: list[SearchHit], filtered: list[FilteredHit]) -> None:
    """Outcome metrics: degraded stages and every verdict, returned or withheld."""
    judged = [h.verdict.verdict.value for h in hits if h.verdict is not None]
    rampart_metrics.record_outcome(stages, [*judged, *(j.verdict.value for j in filtered)])
