"""The fact-check stage: judge the top-M results, keep the RELEVANT ones, flag what was done.

HAC-Retrieval keeps only RELEVANT documents and, if fewer than K survive, falls back to the whole
top-M. Rampart's fallback re-admits IRRELEVANT and COUNTERFACTUAL passages (the classifier may be too
strict about relevance or consensus) but never ADVERSARIAL ones: a passage caught addressing a model
or flooding the ranking stays out whatever the count (docs/factcheck.md). Results below ``depth``
are returned after the judged ones with no judgement (``judgement: null``). When the checker is down
or late, every result passes unverified with ``"factcheck"`` in ``degraded`` — search never fails
because fact-checking did.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

from services.common.errors import ErrorCode, RampartError
from services.common.types import ScoredChunk
from services.common.verdicts import Judgement, Verdict
from services.factcheck.checker import FactChecker
from services.factcheck.evidence import CheckInput

log = logging.getLogger(__name__)


@dataclass
class FactCheckResult:
    hits: list[ScoredChunk]
    judged: int = 0
    filtered: list[Judgement] = field(default_factory=list)
    fallback: bool = False
    degraded: list[str] = field(default_factory=list)
    reason: str | None = None
    ms: float = 0.0

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {v.value: 0 for v in Verdict}
        for h in self.hits:
            if h.judgement is not None:
                out[h.judgement.verdict.value] += 1
        for j in self.filtered:
            out[j.verdict.value] += 1
        return out


def to_input(hit: ScoredChunk) -> CheckInput:
    c = hit.chunk
    return CheckInput(
        chunk_id=c.chunk_id,
        doc_id=c.doc_id,
        text=c.text,
        title=c.title,
        source=c.source,
        metadata={"trust": c.trust} if c.trust else {},
        rerank_logit=hit.scores.get("rerank"),
        fused=hit.fused,
        vector=hit.vector,
        copy_cosines=hit.copy_cosines,
        copy_neighbors=hit.copy_neighbors,
        copy_leads=hit.copy_leads,
        arrival=hit.arrival,
        copy_arrivals=hit.copy_arrivals,
        copy_overlaps=hit.copy_overlaps,
        copy_edits=hit.copy_edits,
    )


class FactCheckStage:
    def __init__(self, checker: FactChecker | None) -> None:
        self.checker = checker
        self.degradations = 0

    @property
    def enabled(self) -> bool:
        return self.checker is not None

    def apply(
        self,
        query: str,
        hits: list[ScoredChunk],
        *,
        depth: int,
        min_keep: int,
        deadline_s: float,
        context_depth: int = 0,
        linked: bool = True,
    ) -> FactCheckResult:
        """Judge ``hits[:depth]``; ``hits[depth:context_depth]`` are read as near-duplicate peers and
        left out of the result (unjudged, they must not slip in where a judged one was filtered);
        results below both are returned after the kept ones, unjudged. ``linked``: the rules that read
        document titles apply (the tenant's corpus profile, :meth:`FactChecker.check`)."""
        t0 = time.perf_counter()
        if self.checker is None or depth <= 0 or not hits:
            return FactCheckResult(hits)
        head, tail = hits[:depth], hits[max(depth, context_depth) :]
        context = [to_input(h) for h in hits[depth:context_depth]]
        try:
            outcome = self.checker.check(
                query, [to_input(h) for h in head], deadline_s=deadline_s, context=context, linked=linked
            )
        except RampartError as exc:
            if exc.code is ErrorCode.INVALID_ARGUMENT:
                raise
            return self._degrade(hits, exc.message, t0)
        except Exception as exc:  # a remote backend failing unexpectedly must not fail search
            log.exception("fact-check failed")  # details stay in the log, not in the response
            return self._degrade(hits, f"fact-check error ({type(exc).__name__})", t0)
        if outcome.unverified or len(outcome.judgements) != len(head):
            why = outcome.reason or f"fact-check returned {len(outcome.judgements)} verdicts for {len(head)}"
            return self._degrade(hits, why, t0)
        judged = [
            h.model_copy(update={"judgement": j}) for h, j in zip(head, outcome.judgements, strict=True)
        ]
        kept = [h for h in judged if h.judgement and h.judgement.verdict is Verdict.RELEVANT]
        fallback = False
        if len(kept) < min_keep:
            fallback = True
            kept = [h for h in judged if h.judgement and h.judgement.verdict is not Verdict.ADVERSARIAL]
        kept_ids = {h.chunk.chunk_id for h in kept}
        filtered = [h.judgement for h in judged if h.judgement and h.chunk.chunk_id not in kept_ids]
        return FactCheckResult(
            kept + tail,
            judged=len(head),
            filtered=filtered,
            fallback=fallback,
            ms=(time.perf_counter() - t0) * 1000,
        )

    def _degrade(self, hits: list[ScoredChunk], reason: str, t0: float) -> FactCheckResult:
        self.degradations += 1
        log.warning("fact-check degraded: %s", reason)
        return FactCheckResult(
            hits, degraded=["factcheck"], reason=reason, ms=(time.perf_counter() - t0) * 1000
        )
