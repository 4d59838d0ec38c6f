"""``rampart eval``: index a BEIR folder into a fresh index (cached), run pipelines, score.

The index is built and searched by the product's own runtime (:class:`Runtime` over the cache
folder: parse → contextual chunks → embed → index, then the served search pipeline), so the figures
measure what users run. Chunk hits are aggregated to documents by their
best chunk (MaxP) before scoring, since BEIR judges documents.
"""

from __future__ import annotations

import hashlib
import re
import shutil
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path

from services.common.config import CorpusProfile
from services.common.errors import ErrorCode, RampartError, invalid
from services.common.settings import RampartSettings
from services.common.types import Acl, Document, FusionMethod, Principal, ScoredChunk
from services.common.verdicts import Judgement
from services.evaluation.beir import BeirDataset, iter_corpus
from services.evaluation.metrics import evaluate_run_per_query, latency_summary
from services.evaluation.report import EvalReport
from services.evaluation.significance import standard_comparisons
from services.ingest.service import Outcome
from services.orchestrator.chain.retriever import ChainRetriever
from services.orchestrator.chain.subqueries import build_proposer
from services.orchestrator.runtime import Runtime, Variant
from services.rerank.reranker import Reranker, build_reranker
from services.rerank.stage import Mode
from services.retrieval.embedder import Embedder
from services.retrieval.hybrid import SearchOutcome, SearchParams

EVAL_TENANT = "eval"
EVAL_PRINCIPAL = Principal(tenant=EVAL_TENANT, user="evaluator", groups=[], scopes=["search"])


def with_profile(settings: RampartSettings, profile: CorpusProfile | None) -> RampartSettings:
    """``settings`` with the evaluation tenant's corpus profile set (``--profile``; ``None`` keeps the
    settings'): the evaluated pipeline reads the profile from the principal's tenant, as served, so the
    figures measure the code a tenant of that profile gets (docs/corpus-profiles.md)."""
    if profile is None:
        return settings
    return settings.model_copy(update={"corpus": settings.corpus.with_tenant(EVAL_TENANT, profile)})


DEFAULT_PIPELINES = ("bm25", "dense", "hybrid-minmax", "hybrid-zscore", "hybrid-rrf")
METRICS = (
    "ndcg@10",
    "recall@100",
    "mrr@10",
    "recall@10",
    "all_supporting@2",
    "all_supporting@5",
    "all_supporting@10",
)
DOC_DEPTH = 100  # documents scored per query (Recall@100)
CHUNK_DEPTH = 300  # chunks retrieved per query before MaxP aggregation to documents

Progress = Callable[[str, int, int], None]


SERVED = ("search", "search-unchecked")
RERANK_SUFFIXES = {"+rerank": "pure", "+rerank-fused": "fused", "+rerank-residual": "residual"}
CHAIN_HOP_DEFAULT = "hybrid-minmax+rerank-fused"


@dataclass(frozen=True)
class Retrieved:
    """What one query through a pipeline gave: ranked hits, how many retrieval calls it cost, and
    what the fact-check withheld (the diagnosis of a defence's cost reads it)."""

    hits: list[ScoredChunk]
    calls: int = 1
    filtered: list[Judgement] = field(default_factory=list)


QueryPipeline = Callable[[str], Retrieved]
"""Any pipeline ``rampart eval`` can score: single-shot search, a chain, the routed orchestrator."""


@dataclass(frozen=True)
class PipelineSpec:
    """``bm25``, ``dense`` or ``hybrid-<minmax|zscore|rrf>[:<bm25 weight>]``, optionally followed by
    ``+rerank`` (cross-encoder order) or ``+rerank-fused`` (blended with the first-stage score); or
    ``chain[:<beams>][@<hop pipeline>]``: chain-of-retrieval, each hop searched with the hop pipeline
    (default hybrid-minmax+rerank-fused, beams default chain.beam_width); ``search``: ``/v1/search`` as
    served (every setting, fact-check on, top 10), ``search-unchecked`` the same with the fact-check
    off — the pair that shows what the defence costs (``rampart eval general``)."""

    name: str
    weights: dict[str, float]
    method: FusionMethod
    rerank: Mode | None = None
    chain_beams: int | None = None  # set: chain-of-retrieval with this many beams
    routed: bool = False  # the full adaptive orchestrator (route, chain, CRAG, fact-check)
    served: bool = False  # /v1/search with every setting as served, scored at its top 10
    checked: bool = False  # a served search with the fact-check on

    @property
    def checks(self) -> bool:
        """Whether this pipeline runs the fact-check (the runtime must load one)."""
        return self.routed or self.checked

    @classmethod
    def parse(cls, spec: str, settings: RampartSettings) -> PipelineSpec:
        default = {"bm25": settings.fusion.bm25_weight, "dense": settings.fusion.dense_weight}
        if spec == "routed":
            return cls(spec, default, settings.fusion.method, routed=True)
        if spec in SERVED:
            return cls(spec, default, settings.fusion.method, served=True, checked=spec == "search")
        if spec == "chain" or spec.startswith(("chain:", "chain@")):
            return cls._parse_chain(spec, settings)
        for suffix, mode in RERANK_SUFFIXES.items():
            if spec.endswith(suffix):
                first = cls.parse(spec.removesuffix(suffix), settings)
                return cls(spec, first.weights, first.method, mode)  # type: ignore[arg-type]
        if "+" in spec:
            raise invalid(f"unknown stage in pipeline {spec!r}; append +rerank or +rerank-fused")
        return cls._parse_first_stage(spec, settings)

    @classmethod
    def _parse_chain(cls, spec: str, settings: RampartSettings) -> PipelineSpec:
        """``chain[:<beams>][@<hop pipeline>]``; the hop pipeline is any single-shot one."""
        head, _, hop_spec = spec.partition("@")
        _, _, beams = head.partition(":")
        try:
            b = int(beams) if beams else settings.chain.beam_width
        except ValueError:
            raise invalid(f"bad beam count in pipeline {spec!r}; write e.g. chain:2") from None
        if not 1 <= b <= 16:
            raise invalid(f"beam count {b} in pipeline {spec!r} must be within [1, 16]")
        hop = cls.parse(hop_spec or CHAIN_HOP_DEFAULT, settings)
        if hop.chain_beams is not None:
            raise invalid(f"pipeline {spec!r}: a chain's hop pipeline cannot be a chain")
        return cls(spec, hop.weights, hop.method, hop.rerank, chain_beams=b)

    @classmethod
    def _parse_first_stage(cls, spec: str, settings: RampartSettings) -> PipelineSpec:
        """``bm25``, ``dense`` or ``hybrid-<method>[:<bm25 weight>]``, with no stage after it."""
        base, _, weight = spec.partition(":")
        if base == "bm25":
            return cls(spec, {"bm25": 1.0, "dense": 0.0}, FusionMethod.MINMAX)
        if base == "dense":
            return cls(spec, {"bm25": 0.0, "dense": 1.0}, FusionMethod.MINMAX)
        if base.startswith("hybrid-"):
            try:
                method = FusionMethod(base.removeprefix("hybrid-"))
            except ValueError:
                raise invalid(
                    f"unknown fusion in pipeline {spec!r}; use hybrid-minmax, hybrid-zscore or hybrid-rrf"
                ) from None
            return cls(spec, _hybrid_weights(spec, weight, settings), method)
        raise invalid(
            f"unknown pipeline {spec!r}; choose from {', '.join(DEFAULT_PIPELINES)} (hybrid-*:W sets the "
            "BM25 weight), optionally +rerank / +rerank-fused, or chain[:B]"
        )


def _hybrid_weights(spec: str, weight: str, settings: RampartSettings) -> dict[str, float]:
    """The fusion weights a ``hybrid-*`` pipeline names (``:W`` is the BM25 weight), else the settings'."""
    if not weight:
        return {"bm25": settings.fusion.bm25_weight, "dense": settings.fusion.dense_weight}
    try:
        w = float(weight)
    except ValueError:
        raise invalid(f"bad weight in pipeline {spec!r}; write e.g. hybrid-minmax:0.4") from None
    if not 0.0 <= w <= 1.0:
        raise invalid(f"weight {w} in pipeline {spec!r} must be within [0, 1]")
    return {"bm25": w, "dense": 1.0 - w}


def index_cache_key(dataset: BeirDataset, settings: RampartSettings, embedder: Embedder) -> str:
    """Content hash of the corpus + everything that changes the index (model, chunking, BM25, the
    graph's extraction)."""
    config = (
        settings.chunking.model_dump_json()
        + settings.index.model_dump_json(include={"vector_kind"})
        + settings.graph.model_dump_json(include={"extractor", "max_entities_per_chunk", "max_chars"})
        + embedder.model_id
    )
    h = hashlib.sha256(config.encode()).hexdigest()[:10]
    return f"{dataset.name}-{dataset.content_hash()[:12]}-{h}"


def eval_prefix(key: str) -> str:
    """The OpenSearch index prefix of an evaluation cache entry (``opensearch.index_prefix``'s pattern)."""
    name = re.sub(r"[^a-z0-9_-]+", "-", key.split("-")[0].lower())[:16].strip("-_") or "corpus"
    return f"eval-{name}-{hashlib.sha256(key.encode()).hexdigest()[:16]}"


@contextmanager
def eval_runtime(
    dataset: BeirDataset,
    settings: RampartSettings,
    cache_root: Path,
    *,
    embedder: Embedder,
    reranker: Reranker | None = None,
    variant: Variant | None = None,
    progress: Progress | None = None,
    batch_size: int = 128,
) -> Iterator[tuple[Runtime, dict[str, int]]]:
    """The runtime over the cached index of this corpus + config (``variant``, with the cache folder
    as its data directory), the corpus ingested through ``runtime.ingest`` first if needed; and
    ``{built, failed}``. ``embedder`` names the cache; ``reranker`` shares a loaded one."""
    key = index_cache_key(dataset, settings, embedder)
    root = cache_root / key
    ready = root / "READY"
    info = {"built": 0, "failed": 0}
    if not ready.exists() and root.exists():
        shutil.rmtree(root)  # an interrupted build: start over
    opensearch = settings.index.backend == "opensearch"
    if opensearch:  # the index is on the node, not under root: one prefix per corpus and configuration
        prefix = settings.opensearch.model_copy(update={"index_prefix": eval_prefix(key)})
        settings = settings.model_copy(update={"opensearch": prefix})
    with Runtime.open(
        settings, embedder=embedder, reranker=reranker, variant=replace(variant or Variant(), data_dir=root)
    ) as runtime:
        if ready.exists() and opensearch and runtime.index.stats()["chunks"] == 0:
            ready.unlink()  # the node lost (or never had) what the marker says was built
        if not ready.exists():
            info["failed"] = _ingest_corpus(dataset, runtime, progress, batch_size)
            info["built"] = 1
            root.mkdir(parents=True, exist_ok=True)  # on OpenSearch nothing was written under it
            ready.write_text(time.strftime("%Y-%m-%dT%H:%M:%S"))
        yield runtime, info


def _ingest_corpus(dataset: BeirDataset, runtime: Runtime, progress: Progress | None, batch_size: int) -> int:
    """Index every document of the corpus through the product's ingest; returns how many failed."""
    acl = Acl(groups=["*"])
    total = len(dataset.corpus)
    batch: list[Document] = []
    done = failed = 0

    def flush() -> None:
        nonlocal done, failed
        results = runtime.ingest.ingest(batch)
        failed += sum(r.outcome not in (Outcome.INDEXED, Outcome.UNCHANGED) for r in results)
        done += len(batch)
        batch.clear()
        if progress:
            progress("index", done, total)

    for doc in iter_corpus(dataset.path):
        text = doc.text if doc.text.strip() else doc.title
        if not text.strip():
            failed += 1
            continue
        batch.append(
            Document(
                id=doc.doc_id,
                tenant=EVAL_TENANT,
                acl=acl,
                title=doc.title,
                text=text,
                content_type="text/plain",
                source=dataset.name,
            )
        )
        if len(batch) >= batch_size:
            flush()
    if batch:
        flush()
    return failed


def maxp(hits: Sequence[tuple[str, float]], depth: int = DOC_DEPTH) -> dict[str, float]:
    """Document score = its best chunk's score (hits arrive best first)."""
    out: dict[str, float] = {}
    for doc_id, score in hits:
        if doc_id not in out:
            out[doc_id] = score
            if len(out) >= depth:
                break
    return out


def build_pipeline(runtime: Runtime, spec: PipelineSpec) -> QueryPipeline:
    """The spec as a query → :class:`Retrieved` callable over ``runtime.search`` (the code the gateway
    serves with), its fusion, reranking and fact-check set per request (the check is off: a spec scores
    retrieval); a chain spec wraps it in :class:`ChainRetriever`, ``routed`` is the runtime's
    orchestrator. A degraded search (e.g. reranker down) raises: the figures would be wrong."""
    settings = runtime.settings
    pipeline = runtime.search
    if spec.rerank and not pipeline.rerank.enabled:
        raise invalid(f"pipeline {spec.name!r} needs a reranker; run `rampart models build`")
    options = pipeline.rerank_options(enabled=spec.rerank is not None, mode=spec.rerank)
    if spec.chain_beams is not None:  # as the orchestrator runs the chain: it orders by links itself
        options = replace(options, link_weight=0.0)
    unchecked = pipeline.factcheck_options(enabled=False)
    params = SearchParams.from_settings(
        settings.fusion,
        top_k=CHUNK_DEPTH,
        method=spec.method,
        weights=spec.weights,
        candidates=max(settings.fusion.candidates, CHUNK_DEPTH),
    )

    def search(query: str) -> SearchOutcome:
        outcome = pipeline.search(query, EVAL_PRINCIPAL, params, options, unchecked)
        whole(spec.name, outcome.degraded)
        return outcome

    if spec.routed or spec.served:
        if settings.rerank.enabled and not pipeline.rerank.enabled:
            raise invalid(
                f"pipeline {spec.name!r} reranks as served, but no reranker was loaded; run `rampart models build`"
            )
        return _routed(runtime) if spec.routed else _served(runtime, checked=spec.checked)
    if spec.chain_beams is None:
        return lambda query: Retrieved(search(query).hits)
    chain = ChainRetriever(
        search,
        settings.chain.model_copy(update={"beam_width": spec.chain_beams}),
        build_proposer(settings.chain, settings.llm),
        titles=pipeline.linked(EVAL_PRINCIPAL),  # as the orchestrator decides: the tenant's profile
    )

    def run_chain(query: str) -> Retrieved:
        result = chain.run(query)
        return Retrieved(result.hits, result.calls)

    return run_chain


def whole(name: str, degraded: Sequence[str]) -> None:
    """Refuse a degraded result (e.g. reranker down): the figures would score a pipeline that skipped a
    stage."""
    if degraded:
        raise RampartError(
            ErrorCode.UNAVAILABLE, f"pipeline {name!r} degraded ({list(degraded)}); figures would be wrong"
        )


ROUTED_DEPTH = 10  # the adaptive pipeline returns what an answer reads: score it at @10 and below


def _routed(runtime: Runtime) -> QueryPipeline:
    """The adaptive orchestrator as the gateway builds it (the runtime's), over the evaluation index."""
    from services.orchestrator.orchestrator import Ask

    orchestrator = runtime.orchestrator

    def run(query: str) -> Retrieved:
        done = orchestrator.run(Ask(query=query, top_k=ROUTED_DEPTH, remember=False), EVAL_PRINCIPAL)
        whole("routed", done.outcome.degraded)
        n = len(done.outcome.hits)  # scores by rank: merged sources carry scores on different scales
        hits = [h.model_copy(update={"fused": float(n - i)}) for i, h in enumerate(done.outcome.hits)]
        return Retrieved(hits, done.calls, done.outcome.filtered)

    return run


def _served(runtime: Runtime, *, checked: bool) -> QueryPipeline:
    """``/v1/search`` as the gateway serves it (fusion, links, rerank and fact-check as configured),
    at the top 10 a user reads; ``checked`` False turns only the fact-check off."""
    pipeline = runtime.search
    params = pipeline.params(top_k=ROUTED_DEPTH)
    fc = pipeline.factcheck_options(enabled=checked)
    name = "search" if checked else "search-unchecked"

    def run(query: str) -> Retrieved:
        outcome = pipeline.search(query, EVAL_PRINCIPAL, params, None, fc)
        whole(name, outcome.degraded)
        n = len(outcome.hits)  # scored by rank, as the routed pipeline is
        hits = [h.model_copy(update={"fused": float(n - i)}) for i, h in enumerate(outcome.hits)]
        return Retrieved(hits, filtered=outcome.filtered)

    return run


Observer = Callable[[str, str, Retrieved], None]
"""``(pipeline name, query id, what it retrieved)``, called per query: diagnoses read the raw results."""


def run_queries(
    pipeline: QueryPipeline,
    dataset: BeirDataset,
    name: str,
    *,
    progress: Progress | None = None,
    observe: Observer | None = None,
) -> tuple[dict[str, dict[str, float]], list[float], list[int]]:
    """``(run, latencies_ms, retrieval calls)`` per query; latency covers everything the pipeline does
    (query embedding, searches, fusion, reranking, every hop of a chain)."""
    run: dict[str, dict[str, float]] = {}
    latencies: list[float] = []
    calls: list[int] = []
    total = len(dataset.queries)
    for i, (qid, query) in enumerate(dataset.queries.items(), start=1):
        t0 = time.perf_counter()
        got = pipeline(query)
        latencies.append((time.perf_counter() - t0) * 1000)
        calls.append(got.calls)
        if observe:
            observe(name, qid, got)
        run[qid] = maxp([(h.chunk.doc_id, h.fused) for h in got.hits])
        if progress and (i % 25 == 0 or i == total):
            progress(name, i, total)
    return run, latencies, calls


def evaluate_pipelines(
    dataset: BeirDataset,
    settings: RampartSettings,
    embedder: Embedder,
    specs: Sequence[PipelineSpec],
    cache_root: Path,
    *,
    reranker: Reranker | None = None,
    progress: Progress | None = None,
    observe: Observer | None = None,
) -> tuple[dict[str, dict[str, float]], dict[str, dict[str, dict[str, float]]], dict[str, int]]:
    """``(summary per pipeline, per-query metrics per pipeline, index info)``.

    One runtime serves every spec: the reranker (``reranker``, when given) and the fact-check (only a
    ``routed`` spec checks) are loaded only if a spec uses them. Rerank pipelines share one score cache,
    so ``X+rerank`` and ``X+rerank-fused`` score each pair once (their latencies are then not
    comparable: the second one reads the cache).
    """
    summary: dict[str, dict[str, float]] = {}
    per_query: dict[str, dict[str, dict[str, float]]] = {}
    variant = Variant(
        rerank=reranker is not None, factcheck=any(s.checks for s in specs), rerank_cache=1_000_000
    )
    with eval_runtime(
        dataset,
        settings,
        cache_root,
        embedder=embedder,
        reranker=reranker,
        variant=variant,
        progress=progress,
    ) as (runtime, info):
        for spec in specs:
            pipeline = build_pipeline(runtime, spec)
            run, latencies, calls = run_queries(
                pipeline, dataset, spec.name, progress=progress, observe=observe
            )
            pq = evaluate_run_per_query(dataset.qrels, run, METRICS)
            per_query[spec.name] = pq
            summary[spec.name] = {
                **{m: sum(v.values()) / max(len(v), 1) for m, v in pq.items()},
                **latency_summary(latencies),
                "calls_per_query": sum(calls) / max(len(calls), 1),
            }
        info = {**info, **runtime.index.stats()}
    return summary, per_query, info


def eval_reranker(specs: Sequence[PipelineSpec], settings: RampartSettings) -> Reranker | None:
    """The served reranker, loaded only when a pipeline reranks (``+rerank*``, ``routed``, ``search*``)."""
    if not any(s.rerank or s.routed or s.served for s in specs):
        return None
    return build_reranker(settings.rerank, settings.models_dir)


def eval_report(
    dataset: BeirDataset,
    settings: RampartSettings,
    specs: Sequence[PipelineSpec],
    *,
    summary: dict[str, dict[str, float]],
    per_query: dict[str, dict[str, dict[str, float]]],
    info: dict[str, int],
    reranker: Reranker | None,
    split: str,
    command: str,
) -> EvalReport:
    """What ``rampart eval`` prints and writes for :func:`evaluate_pipelines`' results: the figures,
    the paired tests between the pipelines, and what the index and the reranker were built with, so
    a figure can be traced to its configuration."""
    rerank_notes = (
        {
            "rerank": {
                "model": reranker.model_id,
                **settings.rerank.model_dump(mode="json", exclude={"triton"}),
            }
        }
        if reranker
        else {}
    )
    return EvalReport(
        significance=standard_comparisons(per_query, specs),
        corpus_sha256=dataset.content_hash(),
        notes={
            "corpus_profile": settings.corpus.of(EVAL_TENANT).value,
            "index": info,
            "chunking": settings.chunking.model_dump(mode="json"),
            "bm25": {"k1": settings.index.bm25_k1, "b": settings.index.bm25_b},
            **rerank_notes,
        },
        dataset=dataset.name,
        split=split,
        num_queries=len(dataset.queries),
        num_docs=len(dataset.corpus),
        command=command,
        pipelines=summary,
    )
