"""Builds the :class:`Orchestrator` and its stages from settings, once (called by ``Runtime.open``)."""

from __future__ import annotations

from services.common.llm_client import ChatClient
from services.common.settings import RampartSettings
from services.orchestrator.answer import ExtractiveAnswerer, LlmAnswerer
from services.orchestrator.chain.pair_order import SHIPPED_PAIRS, PairModel
from services.orchestrator.chain.subqueries import build_proposer
from services.orchestrator.conversation.rewrite import ConversationalRewriter
from services.orchestrator.conversation.sessions import build_session_store
from services.orchestrator.corrective.grading import RetrievalGrader
from services.orchestrator.corrective.refine import KnowledgeRefiner
from services.orchestrator.corrective.retrieval import CorrectiveRetrieval
from services.orchestrator.corrective.rewrite_query import QueryRewriter
from services.orchestrator.corrective.secondary import build_secondary
from services.orchestrator.orchestrator import Orchestrator
from services.orchestrator.routing.router import build_router
from services.orchestrator.search import SearchPipeline
from services.retrieval.embedder import Embedder


def build_orchestrator(
    settings: RampartSettings, pipeline: SearchPipeline, embedder: Embedder
) -> Orchestrator:
    llm = settings.llm if settings.llm.base_url is not None and settings.answer.use_llm else None

    def similarity(query: str, names: list[str]) -> list[float]:
        vecs = embedder.embed([query, *names])
        return [max(0.0, float(v @ vecs[0])) for v in vecs[1:]]

    rewriter = ConversationalRewriter(
        similarity,
        alpha=settings.sessions.alpha,
        llm=ChatClient(llm) if llm is not None else None,
        max_chars=settings.gateway.max_query_chars,
    )
    corrective = None
    if settings.grading.enabled:
        corrective = CorrectiveRetrieval(
            RetrievalGrader(settings.grading, settings.factcheck),
            KnowledgeRefiner(embedder, settings.grading),
            QueryRewriter(llm),
            settings.grading,
            build_secondary(settings.grading.secondary, pipeline),
            trace_content=settings.trace_content,
        )
    return Orchestrator(
        settings,
        pipeline,
        rewriter,
        build_session_store(settings.sessions),
        ExtractiveAnswerer(embedder, settings.answer.max_sentences),
        router=build_router(settings.routing, embedder, settings.models_dir),
        corrective=corrective,
        proposer=build_proposer(settings.chain, settings.llm),  # chain.use_llm decides, not answer.use_llm
        llm_answerer=LlmAnswerer(ChatClient(llm), settings.answer.max_context_chars)
        if llm is not None
        else None,
        # read only for tenants of the linked corpus profile (orchestrator.pair_plan): none, none loaded
        pairs=PairModel.load(settings.chain.pair_model_dir or SHIPPED_PAIRS)
        if settings.chain.pair_order and settings.corpus.any_linked()
        else None,
    )
