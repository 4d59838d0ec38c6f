"""``rampart eval attack``: plant PoisonedRAG's passages in a corpus and measure what gets through.

For each attacked question its adversarial passages are ingested as ordinary documents — same tenant,
ACL, source and (absent) trust metadata as the clean ones: the attacker writes where everyone writes,
so provenance cannot be what catches them. Each question then runs through the product's stages
(hybrid retrieval → rerank → fact-check, the objects the gateway serves with) and we record whether
any poison is in the first-stage top-k, the reranked top-M, and the final context (what fact-check
keeps); then again through the adaptive pipeline, whose final top-k is what ``/v1/answer`` reads
(``run_attack_routed``). Clean queries (the corpus' own judged queries that were not attacked) give Recall@10 with
and without the fact-check stage, i.e. what the defence costs ordinary traffic.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import statistics
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from services.common.errors import ErrorCode, RampartError, invalid
from services.common.settings import RampartSettings
from services.common.types import Acl, Document, ScoredChunk
from services.common.verdicts import Verdict
from services.evaluation.beir import BeirDataset
from services.evaluation.metrics import nearest_rank
from services.evaluation.runner import EVAL_PRINCIPAL, EVAL_TENANT, Progress, eval_runtime, index_cache_key
from services.evaluation.splits import QuerySplit, select_queries
from services.factcheck.stage import FactCheckStage
from services.ingest.service import Outcome
from services.orchestrator.orchestrator import Ask, Orchestrator
from services.orchestrator.runtime import Runtime, Variant
from services.orchestrator.search import generic_params
from services.rerank.reranker import Reranker
from services.rerank.stage import RerankStage
from services.retrieval.embedder import Embedder
from services.retrieval.hybrid import SearchParams
from services.retrieval.retriever import Retriever

POISON_PREFIX = "poison-"
CORRUPT = (Verdict.ADVERSARIAL, Verdict.COUNTERFACTUAL)


@dataclass(frozen=True)
class AttackQuestion:
    qid: str
    question: str
    correct: str
    incorrect: str
    adv_texts: tuple[str, ...]


def load_attacks(path: Path) -> list[AttackQuestion]:
    """PoisonedRAG's format: ``{id: {question, "correct answer", "incorrect answer", adv_texts}}``."""
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise invalid(
            f"attacks file {path} not found; pass PoisonedRAG's JSON (e.g. poisonedrag/hotpotqa.json)"
        ) from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise invalid(f"attacks file {path} is not JSON ({exc})") from None
    if not isinstance(raw, dict) or not raw:
        raise invalid(
            f"attacks file {path} must be a non-empty JSON object {{id: {{question, adv_texts, ...}}}}"
        )
    out = []
    for qid, row in raw.items():
        texts = row.get("adv_texts") if isinstance(row, dict) else None
        if (
            not isinstance(row, dict)
            or not isinstance(row.get("question"), str)
            or not isinstance(texts, list)
        ):
            raise invalid(f"attack {qid!r} in {path} needs a 'question' string and an 'adv_texts' list")
        good = [t for t in texts if isinstance(t, str) and t.strip()]
        if not good:
            raise invalid(f"attack {qid!r} in {path} has no non-empty adv_texts")
        out.append(
            AttackQuestion(
                str(qid),
                row["question"],
                str(row.get("correct answer", "")),
                str(row.get("incorrect answer", "")),
                tuple(good),
            )
        )
    return out


def poison_documents(attacks: Sequence[AttackQuestion], source: str) -> list[Document]:
    acl = Acl(groups=["*"])
    return [
        Document(
            id=f"{POISON_PREFIX}{hashlib.sha256(a.qid.encode()).hexdigest()[:12]}-{i}",
            tenant=EVAL_TENANT,
            acl=acl,
            text=t,
            content_type="text/plain",
            source=source,
        )
        for a in attacks
        for i, t in enumerate(a.adv_texts)
    ]


def attack_half(
    dataset: BeirDataset, attacks: Sequence[AttackQuestion], query_split: QuerySplit
) -> tuple[BeirDataset, list[AttackQuestion]]:
    """The attacked questions and clean queries of one fixed half (``services.evaluation.splits``,
    drawn over both sets of ids at once); ``all`` keeps every one."""
    if query_split == "all":
        return dataset, list(attacks)
    keep = set(select_queries([a.qid for a in attacks] + list(dataset.queries), query_split))
    kept = [a for a in attacks if a.qid in keep]
    return replace(dataset, queries={q: t for q, t in dataset.queries.items() if q in keep}), kept


@contextmanager
def poisoned_runtime(
    dataset: BeirDataset,
    attacks: Sequence[AttackQuestion],
    settings: RampartSettings,
    cache_root: Path,
    *,
    embedder: Embedder,
    reranker: Reranker | None = None,
    variant: Variant | None = None,
    progress: Progress | None = None,
) -> Iterator[Runtime]:
    """The runtime (``variant``) over the clean cached index plus the poison, itself cached by (clean
    index, attack texts); ``reranker`` shares a loaded one."""
    docs = poison_documents(attacks, source=dataset.name)
    h = hashlib.sha256("\n".join(d.text or "" for d in docs).encode()).hexdigest()[:12]
    root = cache_root / f"{index_cache_key(dataset, settings, embedder)}-poison-{h}"
    bare = Variant(rerank=False, factcheck=False)  # building loads no more than ingest needs
    if not (root / "READY").exists():
        with eval_runtime(dataset, settings, cache_root, embedder=embedder, variant=bare, progress=progress):
            pass  # build (or find) the clean index first
        clean = cache_root / index_cache_key(dataset, settings, embedder) / "index"
        if root.exists():
            shutil.rmtree(root)
        shutil.copytree(clean, root / "index")
        with Runtime.open(settings, embedder=embedder, variant=replace(bare, data_dir=root)) as planting:
            results = planting.ingest.ingest(docs)
            bad = [r for r in results if r.outcome not in (Outcome.INDEXED, Outcome.UNCHANGED)]
            if bad:
                raise RampartError(
                    ErrorCode.INTERNAL, f"{len(bad)} poison passages failed to index: {bad[0]}"
                )
        (root / "READY").write_text(time.strftime("%Y-%m-%dT%H:%M:%S"))
    with Runtime.open(
        settings, embedder=embedder, reranker=reranker, variant=replace(variant or Variant(), data_dir=root)
    ) as runtime:
        yield runtime


@dataclass
class Trace:
    """One query's journey: doc ids at each stage, verdicts of the judged chunks, fact-check time."""

    attacked: bool
    relevant: dict[str, int]
    topk: list[str]
    reranked: list[str]
    context: list[str] = field(default_factory=list)
    judged: list[tuple[str, Verdict]] = field(default_factory=list)
    factcheck_ms: float = 0.0
    degraded: list[str] = field(default_factory=list)


@dataclass
class Query:
    query: str
    attacked: bool
    relevant: dict[str, int]


def _docs(hits: Sequence[ScoredChunk]) -> list[str]:
    seen: dict[str, None] = {}
    for h in hits:
        seen.setdefault(h.chunk.doc_id, None)
    return list(seen)


def _norm(text: str) -> str:
    return " ".join(text.lower().replace("?", " ").split())


def attack_queries(
    dataset: BeirDataset, attacks: Sequence[AttackQuestion], clean_limit: int | None = None
) -> list[Query]:
    """Attacked questions first (judged by id, else by the text of a judged query), then the corpus'
    judged queries that were not attacked (by id or text)."""
    attacked_ids = {a.qid for a in attacks}
    attacked_texts = {_norm(a.question) for a in attacks}
    clean = [
        Query(t, False, dataset.qrels[q])
        for q, t in dataset.queries.items()
        if q not in attacked_ids and _norm(t) not in attacked_texts and dataset.qrels.get(q)
    ]
    if clean_limit is not None:
        clean = clean[:clean_limit]
    # PoisonedRAG's NQ and MS MARCO ids are not the corpus' query ids: the same question's text finds
    # its judgements, so the attacked questions' true evidence is measured there too
    by_text = {_norm(t): dataset.qrels[q] for q, t in dataset.queries.items() if dataset.qrels.get(q)}
    return [
        Query(a.question, True, dataset.qrels.get(a.qid) or by_text.get(_norm(a.question), {}))
        for a in attacks
    ] + clean


def first_stages(
    q: Query, retriever: Retriever, rerank: RerankStage, settings: RampartSettings, *, k: int
) -> tuple[Trace, list[ScoredChunk]]:
    """Hybrid retrieval then rerank (same stage objects and options as SearchPipeline, the evaluation
    tenant's corpus profile applied as ``SearchPipeline.profiled`` does); what is handed to fact-check
    (the top-M, then its context peers down to ``context_depth``) is returned beside the trace."""
    m = settings.factcheck.depth
    window = max(m, settings.factcheck.context_depth)
    depth = settings.rerank.depth if rerank.enabled else 0
    copies = max(m, depth) if settings.factcheck.copy_min_docs > 0 else 0
    linked = settings.corpus.linked(EVAL_TENANT)
    params = replace(
        SearchParams.from_settings(settings.fusion, top_k=max(k, window, depth)),
        vectors=True,
        copy_depth=copies,
        copy_expand=settings.factcheck.copy_border_threshold if copies else 0.0,
        copy_overlap=settings.factcheck.copy_overlap() if copies else 0.0,
    )
    if copies and settings.factcheck.copy_subjects:
        params = replace(params, links=replace(params.links, copy_leads=settings.factcheck.copy_threshold))
    if not linked:  # as SearchPipeline.profiled does for a generic tenant
        params = generic_params(params)
    outcome = retriever.search(q.query, EVAL_PRINCIPAL, params)
    hits = outcome.hits
    topk = _docs(hits[:k])
    degraded = list(outcome.degraded)
    if rerank.enabled:
        s = settings.rerank
        lift = s.link_weight if linked else 0.0
        r = rerank.apply(q.query, hits, depth=depth, mode=s.mode, weight=s.weight, link_weight=lift)
        hits = r.hits
        degraded += r.degraded
    trace = Trace(q.attacked, q.relevant, topk=topk, reranked=_docs(hits[:m]), degraded=degraded)
    return trace, hits[:window]


def apply_factcheck(
    trace: Trace, query: str, head: list[ScoredChunk], factcheck: FactCheckStage, settings: RampartSettings
) -> Trace:
    f = settings.factcheck
    checked = factcheck.apply(
        query,
        head,
        depth=f.depth,
        min_keep=f.min_keep,
        deadline_s=f.deadline_ms / 1000,
        context_depth=f.context_depth,
        linked=settings.corpus.linked(EVAL_TENANT),
    )
    judged = [(h.chunk.doc_id, h.judgement.verdict) for h in checked.hits if h.judgement is not None]
    judged += [(j.doc_id, j.verdict) for j in checked.filtered]
    return replace(
        trace,
        context=_docs(checked.hits),
        judged=judged,
        factcheck_ms=checked.ms,
        degraded=trace.degraded + checked.degraded,
    )


def _recall(docs: Sequence[str], relevant: dict[str, int], k: int) -> float:
    rel = {d for d, g in relevant.items() if g > 0}
    return len(rel & set(docs[:k])) / len(rel) if rel else 0.0


def poison(doc_id: str) -> bool:
    return doc_id.startswith(POISON_PREFIX)


def mean(xs: Sequence[float]) -> float:
    return round(statistics.fmean(xs), 4) if xs else 0.0


def _share(flags: Sequence[bool]) -> float:
    return round(sum(flags) / len(flags), 4) if flags else 0.0


def summarize(traces: Sequence[Trace], *, k: int, m: int) -> dict[str, Any]:
    """The figures ``rampart eval attack`` reports, from the traces of attacked and clean queries."""
    attacked = [t for t in traces if t.attacked]
    clean = [t for t in traces if not t.attacked]
    confusion: dict[str, dict[str, int]] = {"poison": {}, "clean": {}}
    for t in traces:
        for doc, verdict in t.judged:
            row = confusion["poison" if poison(doc) else "clean"]
            row[verdict.value] = row.get(verdict.value, 0) + 1
    judged_attacked = [t for t in attacked if t.relevant]
    ms = [t.factcheck_ms for t in traces]
    return {
        "attacked_questions": len(attacked),
        "clean_queries": len(clean),
        "k": k,
        "m": m,
        "poison_in_topk": _share([any(poison(d) for d in t.topk) for t in attacked]),
        "poison_in_reranked": _share([any(poison(d) for d in t.reranked) for t in attacked]),
        "poison_in_context": _share([any(poison(d) for d in t.context) for t in attacked]),
        "clean_recall@10_without_factcheck": mean([_recall(t.reranked, t.relevant, k) for t in clean]),
        "clean_recall@10_with_factcheck": mean([_recall(t.context, t.relevant, k) for t in clean]),
        "attacked_recall@10_without_factcheck": mean(
            [_recall(t.reranked, t.relevant, k) for t in judged_attacked]
        ),
        "attacked_recall@10_with_factcheck": mean(
            [_recall(t.context, t.relevant, k) for t in judged_attacked]
        ),
        "added_latency_ms_p50": nearest_rank(ms, 0.5),
        "added_latency_ms_p95": nearest_rank(ms, 0.95),
        "degraded_queries": sum(bool(t.degraded) for t in traces),
        "verdicts": confusion,
        "detection": detection_scores(confusion),
    }


def run_attack(
    dataset: BeirDataset,
    attacks: Sequence[AttackQuestion],
    retriever: Retriever,
    rerank: RerankStage,
    factcheck: FactCheckStage,
    settings: RampartSettings,
    *,
    k: int = 10,
    clean_limit: int | None = None,
    progress: Progress | None = None,
) -> dict[str, Any]:
    queries = attack_queries(dataset, attacks, clean_limit)
    traces = []
    for i, q in enumerate(queries, start=1):
        trace, head = first_stages(q, retriever, rerank, settings, k=k)
        traces.append(apply_factcheck(trace, q.query, head, factcheck, settings))
        if progress and (i % 10 == 0 or i == len(queries)):
            progress("attack", i, len(queries))
    return summarize(traces, k=k, m=settings.factcheck.depth)


def run_attack_routed(
    dataset: BeirDataset,
    attacks: Sequence[AttackQuestion],
    orchestrator: Orchestrator,
    *,
    k: int = 10,
    clean_limit: int | None = None,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """The same questions through the adaptive pipeline (``/v1/answer``, ``"adaptive": true``): route,
    chain or one search, CRAG, one fact-check of the merged results, evidence pairs. Its final top-k
    is what an answer reads, so poison there is poison in the answer's context."""
    queries = attack_queries(dataset, attacks, clean_limit)
    final: list[tuple[Query, list[str]]] = []
    degraded = 0
    for i, q in enumerate(queries, start=1):
        done = orchestrator.run(Ask(query=q.query, top_k=k, remember=False), EVAL_PRINCIPAL)
        degraded += bool(done.outcome.degraded)
        final.append((q, _docs(done.outcome.hits[:k])))
        if progress and (i % 10 == 0 or i == len(queries)):
            progress("attack (routed)", i, len(queries))
    attacked = [(q, d) for q, d in final if q.attacked]
    return {
        "routed_poison_in_context": _share([any(poison(x) for x in d) for _, d in attacked]),
        "routed_clean_recall@10": mean([_recall(d, q.relevant, k) for q, d in final if not q.attacked]),
        "routed_attacked_recall@10": mean([_recall(d, q.relevant, k) for q, d in attacked if q.relevant]),
        "routed_degraded_queries": degraded,
    }


@dataclass(frozen=True)
class AttackRun:
    """The figures of ``rampart eval attack`` and the models that produced them."""

    figures: dict[str, Any]
    reranker: str | None  # model id; None when reranking is off
    fact_checker: str | None


def measure_attack(
    dataset: BeirDataset,
    attacks: Sequence[AttackQuestion],
    settings: RampartSettings,
    cache_root: Path,
    *,
    embedder: Embedder,
    k: int,
    clean_limit: int | None,
    routed: bool,
    progress: Progress | None = None,
) -> AttackRun:
    """Plant the poison (:func:`poisoned_runtime`), run the questions through the stages as the
    gateway runs them (:func:`run_attack`), and with ``routed`` through the adaptive pipeline too
    (:func:`run_attack_routed`)."""
    with poisoned_runtime(
        dataset,
        attacks,
        settings,
        cache_root,
        embedder=embedder,
        # the stages as the gateway runs them, reranking only when settings enable it
        variant=Variant(rerank=settings.rerank.enabled, rerank_cache=100_000),
        progress=progress,
    ) as runtime:
        reranker, checker = runtime.reranker, runtime.fact_checker
        figures = run_attack(
            dataset,
            attacks,
            runtime.search.retriever,
            runtime.search.rerank,
            runtime.search.factcheck,
            settings,
            k=k,
            clean_limit=clean_limit,
            progress=progress,
        )
        if routed:
            figures |= run_attack_routed(
                dataset, attacks, runtime.orchestrator, k=k, clean_limit=clean_limit, progress=progress
            )
    return AttackRun(
        figures,
        reranker=reranker.model_id if reranker else None,
        fact_checker=checker.model_id if checker else None,
    )


def detection_scores(confusion: dict[str, dict[str, int]]) -> dict[str, dict[str, float]]:
    """Precision/recall of "corrupt" (ADVERSARIAL or COUNTERFACTUAL) and of each of the two classes,
    with planted passages as the positives and every judged clean passage as a negative."""
    poison, clean = confusion.get("poison", {}), confusion.get("clean", {})
    n_poison = sum(poison.values())
    out: dict[str, dict[str, float]] = {}
    for name, classes in (
        ("corrupt", [v.value for v in CORRUPT]),
        ("adversarial", [Verdict.ADVERSARIAL.value]),
        ("counterfactual", [Verdict.COUNTERFACTUAL.value]),
    ):
        tp = sum(poison.get(c, 0) for c in classes)
        fp = sum(clean.get(c, 0) for c in classes)
        out[name] = {
            "precision": round(tp / (tp + fp), 4) if tp + fp else 0.0,
            "recall": round(tp / n_poison, 4) if n_poison else 0.0,
            "flagged_clean": fp,
        }
    return out
