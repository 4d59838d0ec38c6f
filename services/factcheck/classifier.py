"""Turn per-document evidence plus set-level signals into the four verdicts, one rule at a time.

The rules are functions of :mod:`services.factcheck.rules`, each saying why it exists and where
docs/factcheck.md ("The rules") describes it; :func:`decide` applies them in this order:

1. **ADVERSARIAL / COUNTERFACTUAL**, per passage, first match wins (:data:`PASSAGE_RULES`): a
   passage whose detectors ran past their time budget, text addressed to a model, a near-duplicate cluster, planted copies, the query pasted in, keyword
   stuffing; a passage framing its claim as contrary to fact is COUNTERFACTUAL.
2. **IRRELEVANT**, per passage: with an LLM judge its verdict replaces rules 2-4 (a passage it calls
   RELEVANT stands, locked); otherwise both the calibrated reranker and the sentence strips say so.
   Then, over the set (:data:`SET_RULES`): a standing passage repeating what rule 1's group asserts
   joins it (planted claim, rule 1); a bridge and a page the query names stand again (rule 2).
3. **COUNTERFACTUAL**: the consensus of the standing passages outvotes one that contradicts more of
   them than any passage it conflicts with.
4. **RELEVANT**: every passage still standing.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from services.common.verdicts import Judgement
from services.factcheck.config import FactCheckSettings
from services.factcheck.evidence import CheckInput, Evidence
from services.factcheck.rules import adversarial, consensus, relevance
from services.factcheck.rules.check import STANDS, Check, ConflictFn, Ruling, Stands

if TYPE_CHECKING:
    from services.factcheck.model_conflicts import ModelConflicts

PassageRule = Callable[[Check, int], Ruling | Stands | None]
SetRule = Callable[[Check], None]

# Rules 1 and 2 on each passage, in order: the first that rules decides it.
PASSAGE_RULES: tuple[PassageRule, ...] = (
    adversarial.overrun,
    adversarial.injection,
    adversarial.altered_copy,
    adversarial.near_duplicate_cluster,
    adversarial.planted_copies,
    adversarial.query_copy,
    adversarial.stuffing,
    adversarial.framing,
    relevance.llm_judge,
    relevance.low_relevance,
)
# Then over the whole set, in order: each reads the verdicts the earlier ones left.
SET_RULES: tuple[SetRule, ...] = (
    adversarial.planted_claim,
    relevance.bridges,
    relevance.named_by_query,
    consensus.consensus,
)


def decide(
    query: str,
    items: Sequence[CheckInput],
    evidence: Sequence[Evidence],
    settings: FactCheckSettings,
    conflict: ConflictFn = consensus.heuristic_conflict,
    *,
    context: Sequence[tuple[CheckInput, Evidence]] = (),
    model_conflicts: ModelConflicts | None = None,
) -> list[Judgement]:
    """Verdicts for ``items``; ``context`` (the results ranked just below them) joins only the
    near-duplicate clustering and the planted-claim rule, as peers that may vouch for a group but get
    no verdict here. ``conflict``: rule 3's claim alignment of two passages. ``model_conflicts``: the
    trained contradiction classifier, scoring the most similar pairs of standing passages beside it."""
    if len(evidence) != len(items):
        raise ValueError(f"{len(items)} passages but {len(evidence)} evidence records: pass one per passage")
    if not items:
        return []
    check = Check.open(query, items, evidence, settings, conflict, context, model_conflicts)
    for k in range(len(items)):
        for rule in PASSAGE_RULES:
            ruling = rule(check, k)
            if ruling is STANDS:
                check.locked.add(k)
            elif isinstance(ruling, Ruling):
                check.verdicts[k] = ruling
            if ruling is not None:
                break
    for set_rule in SET_RULES:
        set_rule(check)
    return [_judgement(check, k) for k in range(len(items))]


def decide_head(
    query: str,
    everything: Sequence[CheckInput],
    evidence: Sequence[Evidence],
    judged: int,
    settings: FactCheckSettings,
    model_conflicts: ModelConflicts | None = None,
) -> list[Judgement]:
    """:func:`decide` for a check's passages as the checkers hold them: the first ``judged`` get
    verdicts, the rest are their context peers."""
    return decide(
        query,
        everything[:judged],
        evidence[:judged],
        settings,
        context=list(zip(everything[judged:], evidence[judged:], strict=True)),
        model_conflicts=model_conflicts,
    )


def _judgement(c: Check, k: int) -> Judgement:
    """Passage ``k``'s verdict (RELEVANT, rule 4, when it still stands), with the detector scores
    behind it, its cluster score and its highest cosine to another document's passage."""
    item, ev = c.items[k], c.evidence[k]
    ruling = c.verdicts[k] or relevance.relevant(c, k)
    return Judgement(
        chunk_id=item.chunk_id,
        doc_id=item.doc_id,
        verdict=ruling.verdict,
        score=round(min(1.0, max(0.0, ruling.score)), 4),
        reason=ruling.reason,
        signals={**ev.signals, "cluster": c.clusters[k].score, "peer_cosine": c.peers[k]},
    )
