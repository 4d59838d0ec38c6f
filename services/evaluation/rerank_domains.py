"""``rampart eval rerank-domains``: what the reranker adds on each kind of corpus (issue 38).

The cross-encoder costs most of a search's time; it must earn it on corpora it was never trained on,
not only on the one it was trained next to. So its gain is measured per **domain**, and a training
recipe is judged by its worst domain when that domain was left out of its training (leave one domain
out: train on four domains, score on the fifth; ``docs/reranking.md``).

Each domain's evaluation queries are ones no recipe trains on:

- ``scifact``: the ``heldout`` half of SciFact's ``train`` qrels (hash split; recipes trained with
  ``--domain-halves`` see only the other half);
- ``hotpotqa``: the ``heldout`` half of HotpotQA-500 (every recipe trains on the ``train`` half);
- ``nq-oracle``: the ``heldout`` half of the NQ-open oracle questions;
- ``2wikimultihopqa``: the ``heldout`` half of 2WikiMultihopQA-164;
- ``classic``: Cranfield (150 queries), CISI, CACM and MED, whole (``classic_ir_beir``); recipes train
  only on the other four classic collections (NPL, TIME, LISA, ADI), so even the all-domain model has
  never seen these collections.

The shipped model (trained before this rule) saw all of SciFact's ``train`` qrels and every NQ question:
its figures on those two halves flatter it, which makes a new recipe's comparison against it
conservative. Per domain: nDCG@10 of the first stage as configured, the first stage blended with the
cross-encoder (``+rerank-fused``, how the stage serves) and the cross-encoder's own order; a domain of
several collections is their unweighted mean, so a large collection does not speak for the others.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from services.common.errors import invalid
from services.evaluation.general import NQ, Harness, load_source
from services.evaluation.runner import PipelineSpec, evaluate_pipelines
from services.evaluation.splits import QuerySplit

METRIC = "ndcg@10"


@dataclass(frozen=True)
class Part:
    """One collection of a domain: a source of :func:`~services.evaluation.general.load_source`, its
    split, the half of its queries and how many (hash-ordered) at most."""

    source: str
    split: str = "test"
    half: QuerySplit = "all"
    limit: int | None = None

    @property
    def name(self) -> str:
        """The collection's folder (``classic_ir_beir/cisi`` → ``cisi``, ``hotpotqa_dev500/beir`` →
        ``hotpotqa_dev500``)."""
        return [p for p in self.source.split("/") if p != "beir"][-1]


@dataclass(frozen=True)
class Domain:
    name: str
    parts: tuple[Part, ...]


DOMAINS: tuple[Domain, ...] = (
    Domain("scifact", (Part("scifact", "train", "heldout", 200),)),
    Domain("hotpotqa", (Part("hotpotqa_dev500/beir", "test", "heldout"),)),
    Domain("nq-oracle", (Part(NQ, "train", "heldout", 200),)),
    Domain("2wikimultihopqa", (Part("2wikimultihopqa_dev164/beir", "test", "heldout"),)),
    Domain(
        "classic",
        (
            Part("classic_ir_beir/cranfield", limit=150),
            Part("classic_ir_beir/cisi"),
            Part("classic_ir_beir/cacm"),
            Part("classic_ir_beir/med"),
        ),
    ),
)
DOMAIN_NAMES = tuple(d.name for d in DOMAINS)


def select_domains(names: str | None) -> list[Domain]:
    """The domains ``names`` lists (comma-separated; None: all), in table order."""
    if names is None:
        return list(DOMAINS)
    wanted = [n.strip() for n in names.split(",") if n.strip()]
    unknown = [n for n in wanted if n not in DOMAIN_NAMES]
    if unknown or not wanted:
        raise invalid(f"unknown domains {unknown or names!r}; choose from {', '.join(DOMAIN_NAMES)}")
    return [d for d in DOMAINS if d.name in wanted]


def pipelines(h: Harness) -> tuple[str, str, str]:
    """(first stage as configured, the same blended with the cross-encoder, cross-encoder order)."""
    first = f"hybrid-{h.settings.fusion.method.value}"
    return first, f"{first}+rerank-fused", f"{first}+rerank"


def part_figures(part: Part, h: Harness) -> dict[str, Any]:
    """nDCG@10 of the three pipelines on one collection."""
    dataset = load_source(part.source, part.split, h).half(part.half).sample(part.limit)
    names = pipelines(h)
    specs = [PipelineSpec.parse(p, h.settings) for p in names]
    summary, _, _ = evaluate_pipelines(
        dataset, h.settings, h.embedder, specs, h.cache_root, reranker=h.reranker, progress=h.progress
    )
    first, fused, pure = (round(summary[p][METRIC], 4) for p in names)
    return {
        "part": part.name,
        "queries": len(dataset.queries),
        "first_stage": first,
        "fused": fused,
        "pure": pure,
    }


def domain_row(domain: Domain, h: Harness) -> dict[str, Any]:
    """A domain's figures: each part's, their unweighted mean, and the gains over the first stage."""
    parts = [part_figures(p, h) for p in domain.parts]

    def mean(key: str) -> float:
        return round(sum(float(p[key]) for p in parts) / len(parts), 4)

    first, fused, pure = mean("first_stage"), mean("fused"), mean("pure")
    return {
        "domain": domain.name,
        "queries": sum(p["queries"] for p in parts),
        "first_stage": first,
        "fused": fused,
        "pure": pure,
        "gain_fused": round(fused - first, 4),
        "gain_pure": round(pure - first, 4),
        "parts": parts,
    }


def run_domains(domains: Sequence[Domain], h: Harness, model: dict[str, Any]) -> dict[str, Any]:
    """Every domain's row and the worst fused gain (the figure a recipe is chosen on)."""
    if h.reranker is None:
        raise invalid("rerank-domains measures a reranker; turn reranking on (RAMPART_RERANK__ENABLED=true)")
    rows = [domain_row(d, h) for d in domains]
    worst = min(rows, key=lambda r: r["gain_fused"])
    return {
        "model": model,
        "metric": METRIC,
        "rows": rows,
        "worst_gain_fused": {"domain": worst["domain"], "value": worst["gain_fused"]},
    }
