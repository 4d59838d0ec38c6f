"""``POST /v1/feedback`` and the impressions it is checked against.

After every search and answer, :func:`remember_shown` records what the caller was shown (request id,
query, results in rank order) in the feedback store (``services/learning/feedback_store.py``); the
feedback route takes labels only on results of the caller's own impressions, so a principal can label
what it saw and nothing else. Authenticated and rate-limited like a search (``gateway.costs.feedback``,
1), ``search`` scope, audited with the labelled ids and labels (never the comments).
"""

from __future__ import annotations

import logging
import time
from collections import Counter

from fastapi import APIRouter, Depends, Request
from starlette.concurrency import run_in_threadpool

from services.api.feedback import FeedbackRequest, FeedbackResponse
from services.api.schemas import AnswerResponse, SearchResponse
from services.common.errors import ErrorCode, RampartError
from services.gateway.access import Access, Caller, require
from services.gateway.audit import AuditEvent, AuditSink
from services.gateway.errors import ERROR_RESPONSES
from services.learning.config import FeedbackSettings
from services.learning.feedback_store import FeedbackItem, FeedbackStore, Impression, Shown, admit

log = logging.getLogger(__name__)


def feedback_router(store: FeedbackStore, access: Access, audit: AuditSink) -> APIRouter:
    router = APIRouter(tags=["feedback"], responses=ERROR_RESPONSES)

    @router.post("/v1/feedback", response_model=FeedbackResponse)
    async def feedback(
        body: FeedbackRequest, request: Request, c: Caller = Depends(access.caller("feedback"))
    ) -> FeedbackResponse:
        """Label results of a search or answer you received: relevant, not_relevant or clicked.

        Only results that response returned to you are taken (another principal's request id is
        unknown to you: 404, as for one never issued); all labels of a call are stored or none."""
        require(c.principal, "search")
        own_id: str = request.state.request_id
        who = c.principal
        items = [FeedbackItem(i.chunk_id, i.label, i.comment) for i in body.feedback]
        try:
            imp = await run_in_threadpool(store.impression, who.tenant, who.user, body.request_id)
            events = admit(imp, body.request_id, items, credential=c.credential, feedback_request_id=own_id)
            await run_in_threadpool(store.append, events)
        except RampartError as exc:
            record(
                audit,
                c,
                own_id,
                body,
                "not_found" if exc.code is ErrorCode.NOT_FOUND else "error",
                exc.message,
            )
            raise
        labels = Counter(i.label for i in items)
        record(audit, c, own_id, body, "ok", " ".join(f"{k}={v}" for k, v in sorted(labels.items())))
        return FeedbackResponse(accepted=len(events), request_id=body.request_id, feedback_request_id=own_id)

    return router


def record(
    audit: AuditSink, c: Caller, own_id: str, body: FeedbackRequest, outcome: str, detail: str
) -> None:
    """The audit event of one feedback call: the labelled search's request id and the labels in
    ``detail``, the chunk ids; never the comments (user text, like the documents' text)."""
    audit.record(
        AuditEvent(
            action="feedback",
            outcome=outcome,
            tenant=c.principal.tenant,
            user=c.principal.user,
            credential=c.credential,
            client=c.client,
            request_id=own_id,
            chunk_ids=[i.chunk_id for i in body.feedback],
            detail=f"on request_id {body.request_id}: {detail}",
        )
    )


async def remember_shown(
    store: FeedbackStore, settings: FeedbackSettings, c: Caller, action: str, query: str,
    response: SearchResponse | AnswerResponse,
) -> None:  # fmt: skip
    """Record the impression of ``response`` for its caller. A store that cannot take it does not
    fail the search the caller already has: the response lists ``feedback`` under ``degraded``
    (feedback on it will be refused as unknown) and the log says why."""
    now = time.time()
    imp = Impression(
        tenant=c.principal.tenant,
        user=c.principal.user,
        request_id=response.request_id,
        action=action,
        query=query,
        results=tuple(Shown(h.chunk_id, h.doc_id, h.rank) for h in response.results),
        created=now,
        expires=now + settings.impression_ttl_s,
    )
    try:
        await run_in_threadpool(store.remember, imp)
    except RampartError as exc:
        log.warning("impression not recorded", extra={"error": exc.message})
        response.degraded.append("feedback")
