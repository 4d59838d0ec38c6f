"""The orchestrator's one entry point, the same object in-process and inside a Ray Serve replica.

:class:`PipelineService` owns a :class:`Runtime`, turns a :class:`PipelineSearchRequest` into a
:class:`SearchResponse`, applies live tunables, and says whether its stages are healthy. The Serve
deployment (``serve_app.py``) is a thin shell around it, so Serve adds transport, not behaviour.
The routed orchestrator (routing, grading, chains, ``answer``) plugs in here.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from opentelemetry import context as otel_context

from services.api.schemas import AnswerResponse, Conversation, SearchRequest, SearchResponse
from services.common import telemetry
from services.common.errors import ErrorCode, RampartError, invalid
from services.common.otel import context_from, current_trace_id
from services.common.query_text import check_query
from services.common.settings import RampartSettings
from services.common.types import Principal, SearchFilters
from services.orchestrator.orchestrator import Ask
from services.orchestrator.runtime import Runtime
from services.orchestrator.serving.messages import PipelineAnswerRequest, PipelineReply, PipelineSearchRequest
from services.orchestrator.serving.responses import (
    to_adaptive,
    to_citations,
    to_filtered,
    to_hits,
    to_search_response,
)
from services.orchestrator.serving.serve_config import LiveTunables, apply_tunables
from services.retrieval.fusion import Bounds

log = logging.getLogger(__name__)


class PipelineService:
    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self.base_settings = runtime.settings  # tunables apply on top of these, never cumulatively
        self.settings = runtime.settings
        self.tunables = LiveTunables()
        self._lock = threading.Lock()

    @classmethod
    def open(cls, settings: RampartSettings) -> PipelineService:
        return cls(Runtime.open(settings))

    # ---- requests ----------------------------------------------------------------------------------
    def search(self, call: PipelineSearchRequest) -> SearchResponse:
        """Search as ``call.principal``; raises ``RampartError`` on bad input (bounded work first)."""
        who, body = call.principal, call.request
        self._check(who, body.tenant, body.query, body.top_k, body)
        if body.adaptive:
            if body.fusion or body.rerank or body.factcheck:
                raise invalid(
                    "fusion/rerank/factcheck options pick the stages of a plain search; in adaptive mode "
                    "the route picks them (docs/orchestration.md): drop them or set adaptive=false",
                    field="adaptive",
                )
            done = self.runtime.orchestrator.run(_ask(body, body.query, body.top_k, body.filters), who)
            return to_search_response(
                body.query,
                replace(done.outcome, hits=done.outcome.hits[: body.top_k]),
                timings_ms=done.timings_ms,
                adaptive=to_adaptive(done),
                request_id=call.request_id or "",
                trace_id=current_trace_id(),
            )
        if body.session_id or body.history:
            raise invalid(
                "session_id and history need adaptive=true (a plain search has no conversation)",
                field="adaptive",
            )
        pipeline = self.runtime.search
        f, r, fc = body.fusion, body.rerank, body.factcheck
        self._check_links(who, body)
        params = pipeline.params(
            top_k=body.top_k,
            method=f.method if f else None,
            weights=f.weights if f else None,
            rrf_k=f.rrf_k if f else None,
            candidates=f.candidates if f else None,
            fill_missing=f.fill_missing if f else None,
            link_seeds=f.link_seeds if f else None,
            backlinks=f.backlinks if f else None,
            graph_depth=f.graph_depth if f else None,
            bounds={k: Bounds(v.low, v.high) for k, v in f.bounds.items()} if f and f.bounds else None,
            filters=body.filters,
        )
        rerank = pipeline.rerank_options(
            enabled=r.enabled if r else None,
            depth=r.depth if r else None,
            mode=r.mode if r else None,
            weight=r.weight if r else None,
            link_weight=r.link_weight if r else None,
        )
        factcheck = pipeline.factcheck_options(
            enabled=fc.enabled if fc else None,
            depth=fc.depth if fc else None,
            min_keep=fc.min_keep if fc else None,
        )
        outcome = pipeline.search(body.query, who, params, rerank, factcheck)
        return to_search_response(
            body.query, outcome, request_id=call.request_id or "", trace_id=current_trace_id()
        )

    def answer(self, call: PipelineAnswerRequest) -> AnswerResponse:
        """Answer ``call.request.query`` from what ``call.principal`` may read (docs/orchestration.md)."""
        who, body = call.principal, call.request
        self._check(who, body.tenant, body.query, body.top_k, body)
        done = self.runtime.orchestrator.run(
            _ask(body, body.query, body.top_k, body.filters, answer=True), who
        )
        o, a = done.outcome, done.answer
        return AnswerResponse(
            query=body.query,
            answer=a.shown() if a else "",
            method=a.method if a else "none",
            caution=a.caution if a else None,
            citations=to_citations(a) if a else [],
            retrieval_skipped=done.retrieval_skipped,
            results=to_hits(o.hits[: body.top_k]),
            adaptive=to_adaptive(done),
            degraded=o.degraded,
            filtered=to_filtered(o.filtered),
            factcheck_fallback=o.fallback,
            timings_ms={k: round(v, 2) for k, v in done.timings_ms.items()},
            request_id=call.request_id or "",
            trace_id=current_trace_id(),
        )

    def reply(self, call: PipelineSearchRequest | PipelineAnswerRequest) -> PipelineReply:
        """:meth:`search` or :meth:`answer` with every error as data (what crosses a Serve handle)."""
        if call.request_id:
            telemetry.request_id.set(call.request_id)
        # across a Serve handle the caller's span arrives as data: continue its trace here
        token = otel_context.attach(context_from(call.trace_context)) if call.trace_context else None
        try:
            if isinstance(call, PipelineAnswerRequest):
                return PipelineReply.ok(self.answer(call))
            return PipelineReply.ok(self.search(call))
        except RampartError as exc:
            return PipelineReply.failed(exc)
        except Exception:
            log.exception("request failed", extra={"request_id": call.request_id or ""})
            return PipelineReply.failed(
                RampartError(ErrorCode.INTERNAL, "internal error in the orchestrator; see its logs")
            )
        finally:
            if token is not None:
                otel_context.detach(token)

    def _check(self, who: Principal, tenant: str | None, query: str, top_k: int, conv: Conversation) -> None:
        """Scope, tenant and size limits: refused before any work is done."""
        limits = self.settings.gateway
        if not who.can("search"):
            raise RampartError(
                ErrorCode.PERMISSION_DENIED,
                f"principal {who.tenant}/{who.user} lacks the 'search' scope; give its key --scopes search",
            )
        if tenant is not None and tenant != who.tenant:
            raise RampartError(
                ErrorCode.PERMISSION_DENIED,
                f"this key belongs to tenant {who.tenant!r} and cannot search tenant {tenant!r}",
            )
        if top_k > limits.max_top_k:
            raise invalid(
                f"top_k={top_k} exceeds the limit of {limits.max_top_k}; ask for fewer results",
                limit=limits.max_top_k,
            )
        if len(query) > limits.max_query_chars:
            raise invalid(
                f"query is {len(query)} characters, the limit is {limits.max_query_chars}; shorten it",
                limit=limits.max_query_chars,
            )
        check_query(query)
        if conv.session_id and conv.history:
            raise invalid(
                "send either session_id (the server keeps the conversation) or history, not both",
                field="session_id",
            )
        for i, turn in enumerate(conv.history or []):
            if len(turn) > limits.max_query_chars:
                raise invalid(
                    f"history[{i}] is {len(turn)} characters, the limit is {limits.max_query_chars}",
                    field="history",
                )

    def _check_links(self, who: Principal, body: SearchRequest) -> None:
        """Refuse a request that asks a generic tenant for a link feature: the pipeline would switch it
        off (:meth:`SearchPipeline.profiled`), and a knob ignored without a word reads as a feature that
        found nothing. 0 (off) is accepted from anyone. FAILED_PRECONDITION (412), not 400: the request
        is well formed (the OpenAPI document admits it); the tenant's configuration refuses it."""
        if self.runtime.search.linked(who):
            return
        f, r = body.fusion, body.rerank
        asked = {
            "fusion.link_seeds": f.link_seeds if f else None,
            "fusion.backlinks": f.backlinks if f else None,
            "rerank.link_weight": r.link_weight if r else None,
        }
        for name, value in asked.items():
            if value:
                fix = json.dumps({who.tenant: "linked"})
                raise RampartError(
                    ErrorCode.FAILED_PRECONDITION,
                    f"{name}={value} follows title links, which tenant {who.tenant!r} does not use: its corpus "
                    "profile is generic; drop the option, or give the tenant the linked profile "
                    f"(RAMPART_CORPUS__TENANTS='{fix}', docs/corpus-profiles.md)",
                    field=name,
                )

    # ---- live tunables -----------------------------------------------------------------------------
    def reconfigure(self, tunables: LiveTunables) -> None:
        """Apply tunables to new requests (in-flight ones finish with the old); refuse invalid ones whole."""
        settings = apply_tunables(self.base_settings, tunables)  # raises before anything changes
        with self._lock:
            pipeline = self.runtime.search
            pipeline.rerank_defaults = settings.rerank
            pipeline.factcheck_defaults = settings.factcheck
            # the routed orchestrator is built lazily from runtime.settings: one built after this call
            # sees the routing/grading tunables; one built before keeps its thresholds (needs a hook)
            self.runtime.settings = settings
            self.settings = settings
            self.tunables = tunables
        log.info("tunables applied", extra={"tunables": tunables.to_user_config()})

    # ---- health ------------------------------------------------------------------------------------
    def check_health(self) -> None:
        """Raise ``RampartError(UNAVAILABLE)`` when a stage this process owns is broken.

        A closed or corrupt local index and a failed in-process model mean this replica cannot serve,
        and a restart (what Serve does on failure) can fix it. Remote backends (the retrieval service,
        Triton, Celery) being down is not a replica fault: restarting replicas would not bring them
        back; search degrades or fails clearly (docs/architecture.md) and ``readiness`` reports it.
        """
        s = self.settings
        if not s.remote.retrieval_address:
            try:
                self.runtime.index.stats()
            except Exception as exc:
                raise RampartError(
                    ErrorCode.UNAVAILABLE, f"index is not usable ({exc}); restart the replica", stage="index"
                ) from exc
        if self.runtime.reranker is not None and s.rerank.backend == "onnx":
            _stage_ready("rerank", self.runtime.reranker.check_ready)
        if self.runtime.fact_checker is not None and s.factcheck.backend == "inprocess":
            _stage_ready("factcheck", self.runtime.fact_checker.check_ready)

    def readiness(self) -> dict[str, Any]:
        """What /readyz shows: each stage ready, degraded (remote down) or disabled."""
        rt = self.runtime
        stages: dict[str, str] = {}
        for name, stage in (("rerank", rt.reranker), ("factcheck", rt.fact_checker)):
            if stage is None:
                stages[name] = "disabled"
                continue
            try:
                stage.check_ready()
                stages[name] = "ready"
            except RampartError as exc:
                stages[name] = f"degraded: {exc.message}"
        return {
            "status": "ready",
            "embedder": rt.embedder.model_id,
            "reranker": rt.reranker.model_id if rt.reranker else None,
            "fact_checker": rt.fact_checker.model_id if rt.fact_checker else None,
            **stages,
            "index": rt.index.stats(),
            "tunables": self.tunables.to_user_config(),
        }

    def close(self) -> None:
        self.runtime.close()


def _ask(
    conv: Conversation, query: str, top_k: int, filters: SearchFilters | None, *, answer: bool = False
) -> Ask:
    return Ask(
        query=query,
        top_k=top_k,
        session_id=conv.session_id,
        history=tuple(t for t in conv.history or [] if t.strip()),
        filters=filters,
        answer=answer,
    )


def _stage_ready(stage: str, check: Callable[[], None]) -> None:
    try:
        check()
    except RampartError as exc:
        raise RampartError(
            ErrorCode.UNAVAILABLE, f"{stage} is not ready ({exc.message}); restart the replica", stage=stage
        ) from exc
