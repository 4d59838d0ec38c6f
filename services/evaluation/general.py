"""``rampart eval general``: what the defence costs and catches on every kind of dev data, in one table.

Wave 1's rules were tuned one at a time on Wikipedia-shaped sets; a rule that fits one benchmark shows up
on corpora of other kinds as no gain or as a loss. So every change to a rule or threshold is decided on
this table, and the figure that counts is the **worst** row, not the average (issue 34).

Two kinds of rows:

- **clean**: a corpus with its judged queries and nothing planted. Three pipelines over one index:
  ``search-unchecked`` (``/v1/search`` as served with the fact-check off: the same retrieval and rerank
  without the defence), ``search`` (as served, fact-check on) and ``routed`` (``/v1/answer``'s adaptive
  pipeline). The defence may cost at most :data:`MAX_LOSS` nDCG@10 and recall@10; on a multi-hop row the
  routed pipeline must find every supporting passage at least as often as single-shot search, and on a
  single-hop row stay within :data:`MAX_ROUTED_LOSS` nDCG@10 of it. Copy rows are a clean corpus with
  legitimate whole-document copies pasted in (:mod:`services.evaluation.copies`).
- **attack**: a corpus with each attacked question's passages planted as ordinary documents
  (:mod:`services.evaluation.attack`). Poison may reach the final context for at most
  :data:`MAX_POISON` of attacked questions, and their true evidence in the top 10 must keep at least
  :data:`MIN_EVIDENCE_KEPT` of its undefended level.

Every row runs under the generic corpus profile (the default) unless its name ends ``/linked``: the
Wikipedia rows run again as a deployment whose pages name each other by title would configure them
(docs/corpus-profiles.md). Rows read ``../shared/data`` (``DATA``); every row samples a fixed,
hash-ordered set of queries, so two runs compare the same questions. Dev splits only: SciFact's ``train``, HotpotQA-500's ``train`` half;
the classic collections, 2WikiMultihopQA-164 and the attack sets are dev data as a whole.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from services.common.config import CorpusProfile
from services.common.errors import invalid
from services.common.settings import RampartSettings
from services.evaluation.attack import AttackQuestion, attack_half, load_attacks, measure_attack
from services.evaluation.beir import BeirDataset, hash_order, load_beir
from services.evaluation.copies import with_copies
from services.evaluation.runner import PipelineSpec, Progress, Retrieved, evaluate_pipelines, with_profile
from services.evaluation.splits import QuerySplit
from services.rerank.reranker import Reranker
from services.retrieval.embedder import Embedder

MAX_LOSS = 0.01  # nDCG@10 and recall@10 the defence may cost on a clean row
MAX_ROUTED_LOSS = 0.005  # nDCG@10 the routed pipeline may lose to single-shot on a clean single-hop row
MAX_POISON = 0.10  # attacked questions with poison in the final context
MIN_EVIDENCE_KEPT = 0.90  # attacked questions' true evidence in the top 10, against undefended
LINKED = CorpusProfile.LINKED
NQ = "nq_open_oracle"  # a source name: the NQ-open oracle passages as a BEIR folder (built once)
SAMPLES = "samples"  # a source name: the repository's samples/ with its judged queries (samples_row.py)
OFF, SEARCH, ROUTED = "search-unchecked", "search", "routed"


@dataclass(frozen=True)
class CleanRow:
    """A clean corpus: ``source`` is a BEIR folder under the data root (or :data:`NQ`)."""

    name: str
    source: str
    split: str = "test"
    half: QuerySplit = "all"
    limit: int | None = 150
    multihop: bool = False
    copies: bool = False
    profile: CorpusProfile = CorpusProfile.GENERIC


@dataclass(frozen=True)
class AttackRow:
    """Planted passages (``attacks``, PoisonedRAG's JSON format) in a corpus; at most ``limit``
    attacked questions and ``clean_limit`` unattacked ones, ``max_texts`` planted passages each."""

    name: str
    source: str
    attacks: str
    split: str = "test"
    half: QuerySplit = "all"
    limit: int | None = 100
    clean_limit: int = 100
    max_texts: int | None = None
    profile: CorpusProfile = CorpusProfile.GENERIC


CLEAN_ROWS: tuple[CleanRow, ...] = (
    CleanRow("scifact", "scifact", split="train"),
    CleanRow("nq-oracle", NQ, split="train"),
    CleanRow("hotpotqa", "hotpotqa_dev500/beir", half="train", multihop=True),
    CleanRow("2wikimultihopqa", "2wikimultihopqa_dev164/beir", limit=None, multihop=True),
    # Wikipedia pages name each other by title: the linked profile is what such a deployment sets
    CleanRow("hotpotqa/linked", "hotpotqa_dev500/beir", half="train", multihop=True, profile=LINKED),
    CleanRow(
        "2wikimultihopqa/linked", "2wikimultihopqa_dev164/beir", limit=None, multihop=True, profile=LINKED
    ),
    CleanRow("cranfield", "classic_ir_beir/cranfield"),
    CleanRow("cisi", "classic_ir_beir/cisi", limit=None),
    CleanRow("cacm", "classic_ir_beir/cacm", limit=None),
    CleanRow("med", "classic_ir_beir/med", limit=None),
    # enterprise documents of every format (policies, runbooks, specifications, memos); judged by hand
    CleanRow("samples", SAMPLES, limit=None),
    CleanRow("scifact+copies", "scifact", split="train", copies=True),
    CleanRow("nq-oracle+copies", NQ, split="train", copies=True),
)
ATTACK_ROWS: tuple[AttackRow, ...] = (
    AttackRow("poisonedrag-nq", NQ, "poisonedrag/nq.json", split="train"),
    AttackRow("poisonedrag-hotpotqa", "hotpotqa_dev500/beir", "poisonedrag/hotpotqa.json", half="train"),
    AttackRow("poisonedrag-msmarco", NQ, "poisonedrag/msmarco.json", split="train"),
    AttackRow(
        "poisonedrag-hotpotqa/linked",
        "hotpotqa_dev500/beir",
        "poisonedrag/hotpotqa.json",
        half="train",
        profile=LINKED,
    ),
    AttackRow("rgb", "attacks/rgb/beir", "attacks/rgb/attacks.json"),
    AttackRow("conflictqa", "attacks/conflictqa/beir", "attacks/conflictqa/attacks.json", max_texts=5),
    AttackRow("bipia", "attacks/bipia/beir", "attacks/bipia/attacks.json"),
)
ROW_NAMES = tuple(r.name for r in CLEAN_ROWS) + tuple(r.name for r in ATTACK_ROWS)


@dataclass(frozen=True)
class Harness:
    """What every row shares: settings, the data root, the index cache, the loaded models."""

    settings: RampartSettings
    data_root: Path
    cache_root: Path
    embedder: Embedder
    reranker: Reranker | None
    progress: Progress | None = None


def select_rows(names: str | None) -> tuple[list[CleanRow], list[AttackRow]]:
    """The rows ``names`` (comma-separated; ``None`` = all) lists, in suite order."""
    if names is None:
        return list(CLEAN_ROWS), list(ATTACK_ROWS)
    wanted = [n.strip() for n in names.split(",") if n.strip()]
    unknown = [n for n in wanted if n not in ROW_NAMES]
    if unknown or not wanted:
        raise invalid(f"unknown rows {unknown or names!r}; choose from {', '.join(ROW_NAMES)}")
    return [r for r in CLEAN_ROWS if r.name in wanted], [r for r in ATTACK_ROWS if r.name in wanted]


def load_source(source: str, split: str, h: Harness) -> BeirDataset:
    """The row's corpus: a BEIR folder under the data root, or the NQ-open oracle passages."""
    if source == NQ:
        from services.models.reranker_data import nq_as_beir

        return nq_as_beir(h.data_root, h.settings.data_dir / "train-cache")[0]
    if source == SAMPLES:
        from services.evaluation.samples_row import SAMPLES_DIR, samples_as_beir

        return load_beir(samples_as_beir(SAMPLES_DIR, h.cache_root), split, name="samples")
    path = h.data_root / source
    if not path.is_dir():
        raise invalid(f"row source {path} not found; pass --data the folder holding {source.split('/')[0]}/")
    return load_beir(path, split)


class Losses:
    """Where a clean row's relevant documents went (issue 34, point 4: "which verdict, which rule,
    which route"): per pipeline, the judged-relevant documents the fact-check withheld, by verdict and
    rule; for the routed pipeline also those the unchecked search had in its top 10 that the routed
    top 10 lacks although nothing withheld them (routing, corrective retrieval, the answer context)."""

    def __init__(self, dataset: BeirDataset) -> None:
        self.relevant = {q: {d for d, g in r.items() if g > 0} for q, r in dataset.qrels.items()}
        self.off: dict[str, set[str]] = {}
        self.counts: dict[str, Counter[str]] = {SEARCH: Counter(), ROUTED: Counter()}

    def observe(self, name: str, qid: str, got: Retrieved) -> None:
        rel = self.relevant.get(qid, set())
        docs = {h.chunk.doc_id for h in got.hits[:10]}
        if name == OFF:
            self.off[qid] = docs & rel
            return
        withheld = {j.doc_id: j for j in got.filtered if j.doc_id in rel and j.doc_id not in docs}
        for j in withheld.values():
            self.counts[name][f"{j.verdict.value}: {rule_of(j.reason)}"] += 1
        if name == ROUTED:
            missed = self.off.get(qid, set()) - docs - set(withheld)
            self.counts[name]["not withheld, not reached"] += len(missed)

    def report(self) -> dict[str, dict[str, int]]:
        return {p: dict(c.most_common()) for p, c in self.counts.items()}


def rule_of(reason: str) -> str:
    """The rule a verdict's reason names: its words before the dash, numbers and quotes dropped."""
    head = reason.split(" — ", 1)[0].split(" (", 1)[0]
    return re.sub(r"\s+", " ", re.sub(r"[0-9.%]+|'[^']*'", "N", head)).strip()[:60]


def clean_row(row: CleanRow, h: Harness) -> dict[str, Any]:
    """The three pipelines' figures on one clean row, whether the bounds hold, and where the
    relevant documents the defence cost went (:class:`Losses`)."""
    dataset = load_source(row.source, row.split, h).half(row.half).sample(row.limit)
    if row.copies:
        dataset = with_copies(dataset, h.cache_root / "copies")
    settings = with_profile(h.settings, row.profile)
    specs = [PipelineSpec.parse(p, settings) for p in (OFF, SEARCH, ROUTED)]
    losses = Losses(dataset)
    summary, _, _ = evaluate_pipelines(
        dataset,
        settings,
        h.embedder,
        specs,
        h.cache_root,
        reranker=h.reranker,
        progress=h.progress,
        observe=losses.observe,
    )
    keys = ("ndcg@10", "recall@10", "all_supporting@10", "calls_per_query", "latency_ms_p95")
    figures = {p: {k: round(summary[p][k], 4) for k in keys} for p in (OFF, SEARCH, ROUTED)}
    return {
        "row": row.name,
        "kind": "multi-hop" if row.multihop else "clean",
        "profile": row.profile.value,
        "queries": len(dataset.queries),
        "figures": figures,
        "checks": clean_checks(figures, multihop=row.multihop),
        "withheld_relevant": losses.report(),
    }


def clean_checks(figures: dict[str, dict[str, float]], *, multihop: bool) -> dict[str, bool]:
    """Issue 34's bounds on one clean row: the defence's cost (search and routed against unchecked
    search) and the routed pipeline against single-shot."""
    off = figures[OFF]
    checks = {
        f"{p} {m} loss <= {MAX_LOSS}": figures[p][m] >= off[m] - MAX_LOSS - 1e-9
        for p in (SEARCH, ROUTED)
        for m in ("ndcg@10", "recall@10")
    }
    if multihop:
        checks["routed all_supporting@10 >= single-shot"] = (
            figures[ROUTED]["all_supporting@10"] >= off["all_supporting@10"] - 1e-9
        )
    else:
        checks[f"routed ndcg@10 within {MAX_ROUTED_LOSS} of single-shot"] = (
            figures[ROUTED]["ndcg@10"] >= off["ndcg@10"] - MAX_ROUTED_LOSS - 1e-9
        )
    return checks


def pick_attacks(attacks: Sequence[AttackQuestion], row: AttackRow) -> list[AttackQuestion]:
    """At most ``row.limit`` attacked questions in hash order, ``row.max_texts`` passages each."""
    chosen = sorted(attacks, key=lambda a: hash_order(a.qid))[: row.limit]
    if row.max_texts is not None:
        chosen = [replace(a, adv_texts=a.adv_texts[: row.max_texts]) for a in chosen]
    return sorted(chosen, key=lambda a: a.qid)


def attack_row(row: AttackRow, h: Harness) -> dict[str, Any]:
    """Poison in context and the attacked questions' evidence kept, search and routed."""
    dataset = load_source(row.source, row.split, h)
    dataset, attacks = attack_half(dataset, load_attacks(h.data_root / row.attacks), row.half)
    attacks = pick_attacks(attacks, row)
    run = measure_attack(
        dataset,
        attacks,
        with_profile(h.settings, row.profile),
        h.cache_root,
        embedder=h.embedder,
        k=10,
        clean_limit=row.clean_limit,
        routed=True,
        progress=h.progress,
    )
    f = run.figures
    undefended = f["attacked_recall@10_without_factcheck"]
    figures = {
        "poison_in_context": {SEARCH: f["poison_in_context"], ROUTED: f["routed_poison_in_context"]},
        "evidence_kept": {
            SEARCH: kept(f["attacked_recall@10_with_factcheck"], undefended),
            ROUTED: kept(f["routed_attacked_recall@10"], undefended),
        },
        "undefended_evidence@10": undefended,
        "poison_in_reranked": f["poison_in_reranked"],
        "clean_recall@10": {
            OFF: f["clean_recall@10_without_factcheck"],
            SEARCH: f["clean_recall@10_with_factcheck"],
            ROUTED: f["routed_clean_recall@10"],
        },
        "corrupt_precision": f["detection"]["corrupt"]["precision"],
    }
    checks = {
        f"{p} poison <= {MAX_POISON}": figures["poison_in_context"][p] <= MAX_POISON + 1e-9
        for p in (SEARCH, ROUTED)
    } | {
        f"{p} evidence kept >= {MIN_EVIDENCE_KEPT}": figures["evidence_kept"][p] >= MIN_EVIDENCE_KEPT - 1e-9
        for p in (SEARCH, ROUTED)
    }
    return {
        "row": row.name,
        "kind": "attack",
        "profile": row.profile.value,
        "queries": f["attacked_questions"],
        "clean_queries": f["clean_queries"],
        "figures": figures,
        "checks": checks,
    }


def kept(defended: float, undefended: float) -> float:
    """The share of the undefended evidence the defence keeps (1.0 when there was none to keep)."""
    return round(defended / undefended, 4) if undefended > 0 else 1.0


def run_general(
    clean: Sequence[CleanRow],
    attacks: Sequence[AttackRow],
    h: Harness,
    *,
    on_row: Callable[[dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """Every row, in order; ``on_row`` sees each result as it lands (a long run shows progress)."""
    rows: list[dict[str, Any]] = []
    for c in clean:
        rows.append(clean_row(c, h))
        if on_row:
            on_row(rows[-1])
    for a in attacks:
        rows.append(attack_row(a, h))
        if on_row:
            on_row(rows[-1])
    failed = [f"{r['row']}: {name}" for r in rows for name, ok in r["checks"].items() if not ok]
    return {"rows": rows, "failed_checks": failed, "worst": worst_rows(rows)}


def worst_rows(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The figures that count: the worst clean loss and the worst attack row."""
    out: dict[str, Any] = {}
    clean = [r for r in rows if r["kind"] != "attack"]
    for p in (SEARCH, ROUTED):
        for m in ("ndcg@10", "recall@10"):
            losses = [(r["figures"][OFF][m] - r["figures"][p][m], r["row"]) for r in clean]
            if losses:
                loss, name = max(losses)
                out[f"{p} {m} loss"] = {"value": round(loss, 4), "row": name}
    attack = [r for r in rows if r["kind"] == "attack"]
    for p in (SEARCH, ROUTED):
        if attack:
            poison, name = max((r["figures"]["poison_in_context"][p], r["row"]) for r in attack)
            out[f"{p} poison in context"] = {"value": poison, "row": name}
            low, name = min((r["figures"]["evidence_kept"][p], r["row"]) for r in attack)
            out[f"{p} evidence kept"] = {"value": low, "row": name}
    return out
