"""``rampart bench``: indexing rate and per-stage search latency on a BEIR folder.

Indexes the first ``docs`` documents into a throw-away index (no cache: the point is to time it) of
a runtime without reranking or fact-check, then runs every judged query through its hybrid retriever
and reports p50/p95 per stage. On ``index.backend=opensearch`` the throw-away index is a fresh prefix on
the configured node, dropped at the end.

The raw embedding rate is measured on the same chunks after indexing: the corpus chunked again
(untimed) and only the embedder's calls timed, on what ingest embeds (each chunk's indexed text and,
with ``index.claim_vectors``, its text), in the same batches; ``index_vs_embed`` is the indexing rate
over it (issue 35's goal: at least 0.8).
"""

from __future__ import annotations

import itertools
import tempfile
import time
import uuid
from dataclasses import replace
from pathlib import Path

import numpy as np

from services.common.settings import RampartSettings
from services.common.types import Acl, Document
from services.evaluation.beir import BeirDataset, iter_corpus
from services.evaluation.runner import EVAL_PRINCIPAL, EVAL_TENANT, Progress
from services.ingest.chunker import build_chunker
from services.ingest.parsing import parse_text
from services.orchestrator.runtime import Runtime, Variant
from services.retrieval.embedder import Embedder
from services.retrieval.hybrid import SearchParams
from services.retrieval.opensearch_migrate import drop_prefix


def run_bench(
    dataset: BeirDataset,
    settings: RampartSettings,
    embedder: Embedder,
    *,
    docs: int = 500,
    queries: int = 200,
    batch_size: int = 64,
    progress: Progress | None = None,
) -> dict[str, float]:
    """Figures: ``index_docs_per_s``, ``index_chunks_per_s``, ``search_<stage>_ms_p50/p95``,
    ``embed_chunks_per_s`` and ``index_vs_embed`` (module doc)."""
    corpus = [
        Document(
            id=d.doc_id,
            tenant=EVAL_TENANT,
            acl=Acl(groups=["*"]),
            title=d.title,
            text=d.text or d.title,
            content_type="text/plain",
        )
        for d in itertools.islice(iter_corpus(dataset.path), docs)
        if (d.text or d.title).strip()
    ]
    bare = Variant(rerank=False, factcheck=False)  # what is timed: ingest and hybrid retrieval
    if settings.index.backend == "opensearch":
        prefix = f"bench-{uuid.uuid4().hex[:10]}"
        settings = settings.model_copy(
            update={"opensearch": settings.opensearch.model_copy(update={"index_prefix": prefix})}
        )
    try:
        figures = _run(dataset, corpus, settings, embedder, bare, queries, batch_size, progress)
    finally:
        if settings.index.backend == "opensearch":
            drop_prefix(settings.opensearch)
    figures.update(_embed_rate(corpus, settings, embedder, batch_size, figures))
    return figures


def _run(
    dataset: BeirDataset,
    corpus: list[Document],
    settings: RampartSettings,
    embedder: Embedder,
    bare: Variant,
    queries: int,
    batch_size: int,
    progress: Progress | None,
) -> dict[str, float]:
    with (
        tempfile.TemporaryDirectory(prefix="rampart-bench-") as tmp,
        Runtime.open(settings, embedder=embedder, variant=replace(bare, data_dir=Path(tmp))) as runtime,
    ):
        started = time.perf_counter()
        for i in range(0, len(corpus), batch_size):
            runtime.ingest.ingest(corpus[i : i + batch_size])
            if progress:
                progress("index", min(i + batch_size, len(corpus)), len(corpus))
        elapsed = time.perf_counter() - started
        chunks = runtime.index.stats()["chunks"]
        retriever = runtime.search.retriever
        params = SearchParams.from_settings(settings.fusion, top_k=10)
        stages: dict[str, list[float]] = {}
        chosen = list(dataset.queries.values())[:queries]
        for n, query in enumerate(chosen, start=1):
            t0 = time.perf_counter()
            outcome = retriever.search(query, EVAL_PRINCIPAL, params)
            stages.setdefault("total", []).append((time.perf_counter() - t0) * 1000)
            for stage, ms in outcome.timings_ms.items():
                stages.setdefault(stage, []).append(ms)
            if progress and (n % 25 == 0 or n == len(chosen)):
                progress("search", n, len(chosen))
    figures = {
        "docs": float(len(corpus)),
        "chunks": float(chunks),
        "index_seconds": round(elapsed, 2),
        "index_docs_per_s": round(len(corpus) / elapsed, 2),
        "index_chunks_per_s": round(chunks / elapsed, 2),
        "queries": float(len(chosen)),
    }
    for stage, values in stages.items():
        figures[f"search_{stage}_ms_p50"] = round(float(np.percentile(values, 50)), 2)
        figures[f"search_{stage}_ms_p95"] = round(float(np.percentile(values, 95)), 2)
    return figures


def _embed_rate(
    corpus: list[Document],
    settings: RampartSettings,
    embedder: Embedder,
    batch_size: int,
    figures: dict[str, float],
) -> dict[str, float]:
    """The embedder alone on what ingest embedded (module doc); the chunking is not timed."""
    chunker = build_chunker(settings.chunking, embedder)
    batches: list[list[str]] = []
    chunks = 0
    for i in range(0, len(corpus), batch_size):
        texts: list[str] = []
        claims: list[str] = []
        for d in corpus[i : i + batch_size]:
            parsed = parse_text(d.text or "", d.content_type or "text/plain")
            for c in chunker.chunk(
                d.id, d.tenant, parsed, title=d.title or parsed.title, source=d.source, version=1
            ):
                texts.append(c.indexed_text)
                claims.append(c.text)
        chunks += len(texts)
        batches.append(texts + (claims if settings.index.claim_vectors else []))
    started = time.perf_counter()
    for batch in batches:
        embedder.embed(batch)
    seconds = time.perf_counter() - started
    rate = chunks / seconds
    return {
        "embed_chunks": float(chunks),
        "embed_seconds": round(seconds, 2),
        "embed_chunks_per_s": round(rate, 2),
        "index_vs_embed": round(figures["index_chunks_per_s"] / rate, 3),
    }
