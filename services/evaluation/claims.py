"""``rampart eval claims``: the fact-check classifier's per-class precision/recall on SciFact claims.

Each claim is the query; its judged set is what the product would see: the abstracts (title + joined
sentences; the title goes in ``CheckInput.title``, beside the body, as for an indexed chunk) of the
claim's cited documents, plus its evidence documents that were not cited (peers for the consensus
rule). One check per claim with the configured checker. Gold per (claim, document):
SUPPORT → RELEVANT, CONTRADICT → COUNTERFACTUAL (a document with both labels takes the majority, a tie
is not scored), a cited document without evidence → NEI (reported in the confusion matrix only).

The metric functions are pure (a confusion matrix in, figures out) so they can be unit-tested.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from services.common.errors import invalid
from services.common.verdicts import Verdict
from services.evaluation.metrics import nearest_rank
from services.evaluation.runner import Progress
from services.factcheck.checker import FactChecker
from services.factcheck.evidence import CheckInput

SUPPORT, CONTRADICT, NEI = "SUPPORT", "CONTRADICT", "NEI"
GOLD_CLASSES = (SUPPORT, CONTRADICT, NEI)
# Gold class whose documents are the positives of each scored verdict.
POSITIVES = {Verdict.RELEVANT: SUPPORT, Verdict.COUNTERFACTUAL: CONTRADICT}
SPLITS = ("train", "dev")

Confusion = dict[str, dict[str, int]]


@dataclass(frozen=True)
class ClaimCase:
    """One claim: the passages judged together and the gold class of each scored document."""

    claim_id: str
    claim: str
    passages: tuple[CheckInput, ...]
    gold: Mapping[str, str]  # doc_id -> SUPPORT | CONTRADICT | NEI (tied documents are absent)
    ties: int = 0


@dataclass
class ClaimsRun:
    pairs: list[tuple[str, Verdict]] = field(default_factory=list)
    latencies_ms: list[float] = field(default_factory=list)
    degraded: int = 0


def gold_label(evidence_sets: Sequence[Mapping[str, Any]]) -> str | None:
    """Majority label of a document's evidence sets; ``None`` on a SUPPORT/CONTRADICT tie."""
    support = sum(1 for e in evidence_sets if e.get("label") == SUPPORT)
    contradict = sum(1 for e in evidence_sets if e.get("label") == CONTRADICT)
    if support == contradict:
        return None
    return SUPPORT if support > contradict else CONTRADICT


def confusion_matrix(pairs: Iterable[tuple[str, Verdict]]) -> Confusion:
    """Gold {SUPPORT, CONTRADICT, NEI} × predicted verdict counts, every cell present."""
    out: Confusion = {g: {v.value: 0 for v in Verdict} for g in GOLD_CLASSES}
    for gold, verdict in pairs:
        out[gold][verdict.value] += 1
    return out


def precision_recall(confusion: Confusion, verdict: Verdict) -> dict[str, float | int]:
    """Precision/recall of ``verdict`` with its gold class (:data:`POSITIVES`) as the positives, over
    the SUPPORT and CONTRADICT documents only (NEI is not scored)."""
    positive = POSITIVES[verdict]
    scored = (SUPPORT, CONTRADICT)
    tp = confusion.get(positive, {}).get(verdict.value, 0)
    predicted = sum(confusion.get(g, {}).get(verdict.value, 0) for g in scored)
    positives = sum(confusion.get(positive, {}).values())
    return {
        "precision": round(tp / predicted, 4) if predicted else 0.0,
        "recall": round(tp / positives, 4) if positives else 0.0,
        "true_positives": tp,
        "predicted": predicted,
        "positives": positives,
    }


def summarize(run: ClaimsRun, *, claims: int, ties: int) -> dict[str, Any]:
    confusion = confusion_matrix(run.pairs)
    return {
        "claims": claims,
        "checks": len(run.latencies_ms),
        "degraded_checks": run.degraded,
        "documents_scored": len(run.pairs),
        "skipped_ties": ties,
        "gold_counts": {g: sum(row.values()) for g, row in confusion.items()},
        "confusion": confusion,
        "relevant": precision_recall(confusion, Verdict.RELEVANT),
        "counterfactual": precision_recall(confusion, Verdict.COUNTERFACTUAL),
        "latency_ms_p50": nearest_rank(run.latencies_ms, 0.5),
        "latency_ms_p95": nearest_rank(run.latencies_ms, 0.95),
    }


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    try:
        with path.open(encoding="utf-8") as fh:
            return [json.loads(line) for line in fh if line.strip()]
    except FileNotFoundError:
        raise invalid(
            f"{path} not found; pass the scifact_claims folder (claims_<split>.jsonl, corpus.jsonl)"
        ) from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise invalid(f"{path} is not JSON lines ({exc})") from None


def load_claims(folder: Path, split: str) -> list[ClaimCase]:
    """The claims of ``split`` (train or dev: test labels are not public) with their judged sets."""
    if split not in SPLITS:
        raise invalid(
            f"--split {split}: SciFact claims_{split} has no public labels to score; use --split dev (or train)"
        )
    rows = _read_jsonl(folder / f"claims_{split}.jsonl")
    corpus = {str(d["doc_id"]): d for d in _read_jsonl(folder / "corpus.jsonl")}
    cases = []
    for row in rows:
        evidence: dict[str, list[dict[str, Any]]] = {str(k): v for k, v in row.get("evidence", {}).items()}
        cited = [str(d) for d in row.get("cited_doc_ids", [])]
        doc_ids = list(dict.fromkeys(cited + list(evidence)))
        passages, gold, ties = [], {}, 0
        for doc_id in doc_ids:
            doc = corpus.get(doc_id)
            if doc is None:
                raise invalid(f"claim {row.get('id')!r} cites document {doc_id} missing from corpus.jsonl")
            title = str(doc.get("title", ""))
            # as the product sees a chunk: the title beside the body, not inside it
            text = " ".join(str(s) for s in doc.get("abstract", []))
            passages.append(CheckInput(chunk_id=doc_id, doc_id=doc_id, title=title, text=text))
            if doc_id in evidence:
                label = gold_label(evidence[doc_id])
                if label is None:
                    ties += 1
                else:
                    gold[doc_id] = label
            else:
                gold[doc_id] = NEI
        cases.append(ClaimCase(str(row["id"]), str(row["claim"]), tuple(passages), gold, ties))
    return cases


def run_claims(
    cases: Sequence[ClaimCase],
    checker: FactChecker,
    *,
    deadline_s: float = 60.0,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """One check per claim; the (gold, verdict) of every scored document, then :func:`summarize`."""
    run = ClaimsRun()
    for i, case in enumerate(cases, start=1):
        t0 = time.perf_counter()
        outcome = checker.check(case.claim, case.passages, deadline_s=deadline_s)
        run.latencies_ms.append((time.perf_counter() - t0) * 1000)
        if outcome.unverified or len(outcome.judgements) != len(case.passages):
            run.degraded += 1
        else:
            run.pairs += [
                (case.gold[j.doc_id], j.verdict) for j in outcome.judgements if j.doc_id in case.gold
            ]
        if progress and (i % 10 == 0 or i == len(cases)):
            progress("claims", i, len(cases))
    return summarize(run, claims=len(cases), ties=sum(c.ties for c in cases))
