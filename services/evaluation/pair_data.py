"""Training examples for the evidence-pair model: what the routed pipeline verified, per question.

Each Complex-routed question of a BEIR set runs through the adaptive orchestrator exactly as served
(over an evaluation index built by the product's ingest), with pair ordering off; its verified head
(``chain.pair_depth`` documents), the cross-encoder's logit of each for the question, and the
qrels' supporting documents make one :class:`PairExample`. The model then learns to reorder what
serving will hand it: the evaluation tenant runs under the linked corpus profile whatever the settings
say, since only a linked tenant's results ever reach the model (docs/corpus-profiles.md).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from services.common.config import CorpusProfile
from services.common.settings import RampartSettings
from services.evaluation.beir import BeirDataset
from services.evaluation.runner import EVAL_PRINCIPAL, ROUTED_DEPTH, eval_runtime, with_profile
from services.models.pair_train import PairExample
from services.orchestrator.chain.pair_order import doc_heads, pair_docs, question_logits
from services.orchestrator.plan import QueryType
from services.orchestrator.runtime import Variant
from services.rerank.reranker import Reranker
from services.retrieval.embedder import Embedder

Progress = Callable[[str, int, int], None]


def collect_examples(
    dataset: BeirDataset,
    settings: RampartSettings,
    embedder: Embedder,
    reranker: Reranker,
    cache_root: Path,
    *,
    progress: Progress | None = None,
) -> tuple[list[PairExample], dict[str, int]]:
    """``(examples, counts)``: one example per Complex-routed question with qrels; ``counts`` says how
    many questions were read, routed elsewhere, or had fewer than two head documents."""
    from services.orchestrator.orchestrator import Ask

    linked = with_profile(settings, CorpusProfile.LINKED)
    off = linked.model_copy(update={"chain": settings.chain.model_copy(update={"pair_order": False})})
    depth = settings.chain.pair_depth
    examples: list[PairExample] = []
    counts = {"questions": 0, "not_complex": 0, "short_head": 0}
    with eval_runtime(
        dataset,
        off,
        cache_root,
        embedder=embedder,
        reranker=reranker,
        variant=Variant(rerank_cache=200_000),
        progress=progress,
    ) as (runtime, _):
        orchestrator, stage = runtime.orchestrator, runtime.search.rerank
        total = len(dataset.queries)
        for n, (qid, question) in enumerate(dataset.queries.items(), start=1):
            gold = frozenset(d for d, g in dataset.qrels.get(qid, {}).items() if g > 0)
            if not gold:
                continue
            counts["questions"] += 1
            # as deep as serving judges and pairs: top_k raises the fact-check's depth here
            ask = Ask(query=question, top_k=max(ROUTED_DEPTH, depth), remember=False)
            done = orchestrator.run(ask, EVAL_PRINCIPAL)
            if done.route.type is not QueryType.COMPLEX:
                counts["not_complex"] += 1
                continue
            hits = done.outcome.hits
            heads = doc_heads(hits, depth)
            logits = question_logits(stage, question, hits, heads)
            if len(heads) < 2 or logits is None:
                counts["short_head"] += 1
                continue
            examples.append(
                PairExample(
                    qid=qid,
                    question=question,
                    docs=tuple(pair_docs(hits, heads, logits)),
                    doc_ids=tuple(hits[i].chunk.doc_id for i in heads),
                    gold=gold,
                )
            )
            if progress and (n % 10 == 0 or n == total):
                progress("route", n, total)
    return examples, counts
