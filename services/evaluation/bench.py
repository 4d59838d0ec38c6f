"""``rampart bench``: indexing rate and per-stage search latency on a BEIR folder.

Indexes the first ``docs`` documents into a throw-away index (no cache: the point is to time it) of
a runtime without reranking or fact-check, then runs every judged query through its hybrid retriever
and reports p50/p95 per stage.
"""

from __future__ import annotations

import itertools
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

from services.common.settings import RampartSettings
from services.common.types import Acl, Document
from services.evaluation.beir import BeirDataset, iter_corpus
from services.evaluation.runner import EVAL_PRINCIPAL, EVAL_TENANT, Progress
from services.orchestrator.runtime import Runtime, Variant
from services.retrieval.embedder import Embedder
from services.retrieval.hybrid import SearchParams


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
    """Figures: ``index_docs_per_s``, ``index_chunks_per_s``, ``search_<stage>_ms_p50/p95``."""
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
