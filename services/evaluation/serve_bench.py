"""``rampart bench serve``: the latency Ray Serve adds over the in-process pipeline (p50/p95).

The same queries, as the same principal, on the same index, three ways: :class:`PipelineService`
called in this process, through a Serve handle to the pipeline deployment, and over HTTP through
Serve's proxy and the ingress deployment. Two request shapes: ``full`` (rerank + fact-check, as
served by default) and ``retrieval`` (both off: the transport cost is then a visible share).
One client, sequential: this measures added latency, not throughput. Ray binds every interface:
run it in a loopback-only network namespace (docs/ray-serve.md).
"""

from __future__ import annotations

import itertools
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from services.api.schemas import FactCheckOptionsIn, RerankOptionsIn, SearchRequest
from services.common.settings import RampartSettings
from services.common.types import Acl, Document
from services.evaluation.beir import BeirDataset, iter_corpus
from services.evaluation.runner import EVAL_PRINCIPAL, EVAL_TENANT, Progress
from services.orchestrator.serving.messages import PipelineSearchRequest

if TYPE_CHECKING:
    from services.orchestrator.serving.pipeline_service import PipelineService

SHAPES = ("full", "retrieval")


def requests_for(queries: list[str], shape: str, top_k: int) -> list[PipelineSearchRequest]:
    off = shape == "retrieval"
    return [
        PipelineSearchRequest(
            principal=EVAL_PRINCIPAL,
            request=SearchRequest(
                query=q,
                top_k=top_k,
                rerank=RerankOptionsIn(enabled=False) if off else None,
                factcheck=FactCheckOptionsIn(enabled=False) if off else None,
            ),
        )
        for q in queries
    ]


def run_serve_bench(
    dataset: BeirDataset,
    settings: RampartSettings,
    *,
    docs: int = 300,
    queries: int = 100,
    warmup: int = 5,
    top_k: int = 10,
    progress: Progress | None = None,
) -> dict[str, float]:
    """Figures ``<mode>_<shape>_ms_p50/p95`` for mode in inprocess/handle/http, and the added latency.

    The in-process pipeline and the Serve replica each open their own copy of one index (the
    embedded index has one process), so the three modes run interleaved query by query: load from
    other processes on the machine hits all three alike. The rerank score cache is off, or whichever
    mode ran a query second would be timed on cached scores.
    """
    from services.orchestrator.serving.pipeline_service import PipelineService

    chosen = list(dataset.queries.values())[: queries + warmup]
    calls = {shape: requests_for(chosen, shape, top_k) for shape in SHAPES}
    settings = settings.model_copy(update={"rerank": settings.rerank.model_copy(update={"cache_size": 0})})
    figures: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="rampart-serve-bench-") as tmp:
        local = settings.model_copy(update={"data_dir": Path(tmp) / "local"})
        remote = settings.model_copy(update={"data_dir": Path(tmp) / "serve"})
        service = PipelineService.open(local)
        try:
            corpus = _corpus(dataset, docs)
            for i in range(0, len(corpus), 64):
                service.runtime.ingest.ingest(corpus[i : i + 64])
                if progress:
                    progress("index", min(i + 64, len(corpus)), len(corpus))
            figures["docs"] = float(len(corpus))
            figures["chunks"] = float(service.runtime.index.stats()["chunks"])
            service.close()
            shutil.copytree(local.data_dir, remote.data_dir)
            service = PipelineService.open(local)
            figures.update(_interleaved(service, remote, calls, warmup, figures, progress))
        finally:
            service.close()
    figures["queries"] = float(len(chosen) - warmup)
    return figures


def _interleaved(
    service: PipelineService,
    settings: RampartSettings,
    calls: dict[str, list[PipelineSearchRequest]],
    warmup: int,
    figures: dict[str, float],
    progress: Progress | None,
) -> dict[str, float]:
    import httpx

    from services.orchestrator.serving import serve_app

    timings: dict[str, list[float]] = {}
    started = time.perf_counter()
    # replica logs streamed to this process would be printed while it times the in-process calls
    serve_app.connect(settings, log_to_driver=False)
    try:
        serve_app.deploy(settings)
        serve_app.wait_http_ready(settings)
        figures["serve_ready_s"] = round(time.perf_counter() - started, 1)
        figures["ray_pss_mb"] = round(pss_mb(os.getpid()), 1)
        handle = serve_app.pipeline_handle(settings)
        with httpx.Client(base_url=serve_app.base_url(settings), timeout=120) as http:

            def via_handle(call: PipelineSearchRequest) -> Any:
                return handle.search.remote(call).result(timeout_s=120).unwrap()

            def via_http(call: PipelineSearchRequest) -> Any:
                r = http.post("/v1/search", json=call.model_dump(mode="json"))
                r.raise_for_status()
                return r

            modes: list[tuple[str, Callable[[PipelineSearchRequest], Any]]] = [
                ("inprocess", service.search),
                ("handle", via_handle),
                ("http", via_http),
            ]
            total = sum(len(c) for c in calls.values())
            done = 0
            for shape in SHAPES:
                for n, call in enumerate(calls[shape]):
                    # rotate the order, so no mode always runs first (or right after another)
                    for name, run in modes[n % 3 :] + modes[: n % 3]:
                        t0 = time.perf_counter()
                        run(call)
                        if n >= warmup:
                            timings.setdefault(f"{name}_{shape}", []).append(
                                (time.perf_counter() - t0) * 1000
                            )
                    done += 1
                    if progress and (done % 10 == 0 or done == total):
                        progress("search", done, total)
    finally:
        serve_app.shutdown()
    out: dict[str, float] = {}
    for name, values in timings.items():
        out[f"{name}_ms_p50"] = round(float(np.percentile(values, 50)), 2)
        out[f"{name}_ms_p95"] = round(float(np.percentile(values, 95)), 2)
    for mode in ("handle", "http"):
        for shape in SHAPES:
            for q in ("p50", "p95"):
                added = out[f"{mode}_{shape}_ms_{q}"] - out[f"inprocess_{shape}_ms_{q}"]
                out[f"added_{mode}_{shape}_ms_{q}"] = round(added, 2)
            # the same query, moments apart: the median of per-query differences is the steadier figure
            paired = np.subtract(timings[f"{mode}_{shape}"], timings[f"inprocess_{shape}"])
            out[f"paired_added_{mode}_{shape}_ms_p50"] = round(float(np.percentile(paired, 50)), 2)
    return out


def _corpus(dataset: BeirDataset, docs: int) -> list[Document]:
    return [
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


def descendants(root: int) -> set[int]:
    """Every live process below ``root`` (a local Ray cluster: gcs, raylet, workers), from /proc."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parents[int(entry.name)] = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
    found: set[int] = set()
    frontier = {root}
    while frontier:
        frontier = {p for p, pp in parents.items() if pp in frontier} - found
        found |= frontier
    return found


def pss_mb(root: int) -> float:
    """Proportional memory of every process below ``root`` (the local Ray cluster and its replicas)."""
    total_kb = 0
    for pid in descendants(root):
        try:
            for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
                if line.startswith("Pss:"):
                    total_kb += int(line.split()[1])
        except (OSError, ValueError):
            continue
    return total_kb / 1024
