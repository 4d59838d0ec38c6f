"""The rerank stage: reorder the fused top-N with a cross-encoder, or degrade to fused order.

Modes (``rerank.mode``, per request too; ``auto`` picks ``residual`` for models trained that way):

- ``residual``: ``logit + w * minmax(first-stage score)`` with ``w`` learned during training
  (``rampart train reranker --prior-weight``): the model was trained to correct the fused ranking, and
  is served exactly as it was trained.
- ``pure``: the top ``depth`` results are ordered by the cross-encoder alone.
- ``fused``: ``weight * minmax(rerank logit) + (1 - weight) * minmax(first-stage score)`` over the
  reranked candidates — the first-stage score is evidence too (on SciFact a reranker trained here
  helps when fused and can hurt when its order replaces the hybrid's;
  docs/journal/2026-11-22-reranker-shipped.md).

Results below ``depth`` keep their first-stage order; their ``fused`` score is shifted, if need be, to
stay below every reranked score, so the list is sorted by ``fused`` from top to bottom whatever the
mode (a logit and a min-max score live on different scales; a client, or an evaluation, that sorts by
score must get the order the stage chose). Each reranked hit carries its raw logit in
``scores["rerank"]``; per-retriever scores are untouched.

With ``link_weight`` > 0, a candidate linked by title to one of the two best is then lifted toward
that page's score (``link_lift``): the second page of a two-hop question, which a pairwise model
cannot see is needed.

When the reranker is unavailable, too slow, or fails mid-batch, the fused order is returned unchanged
with ``"rerank"`` in ``degraded`` — search never fails because reranking did.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Literal

from services.common.errors import ErrorCode, RampartError
from services.common.types import ScoredChunk
from services.rerank.link_lift import lift_linked
from services.rerank.reranker import Reranker
from services.rerank.score_cache import ScoreCache

log = logging.getLogger(__name__)
Mode = Literal["auto", "residual", "fused", "pure"]
_DEGRADE_CODES = {ErrorCode.UNAVAILABLE, ErrorCode.DEADLINE_EXCEEDED, ErrorCode.INTERNAL}


@dataclass
class RerankResult:
    hits: list[ScoredChunk]
    reranked: int = 0
    cached: int = 0
    lifted: int = 0
    degraded: list[str] = field(default_factory=list)
    reason: str | None = None
    ms: float = 0.0


def minmax(values: list[float]) -> list[float]:
    """Scale to [0, 1]; a constant list maps to 1.0 (every candidate equally good)."""
    lo, hi = min(values), max(values)
    if hi - lo <= 1e-12:
        return [1.0] * len(values)
    return [(v - lo) / (hi - lo) for v in values]


class RerankStage:
    def __init__(self, reranker: Reranker | None, cache: ScoreCache | None = None) -> None:
        self.reranker = reranker
        self.cache = cache
        self.degradations = 0

    @property
    def enabled(self) -> bool:
        return self.reranker is not None

    def apply(
        self,
        query: str,
        hits: list[ScoredChunk],
        *,
        depth: int,
        mode: Mode,
        weight: float,
        link_weight: float = 0.0,
    ) -> RerankResult:
        t0 = time.perf_counter()
        if self.reranker is None or depth <= 0 or not hits:
            return RerankResult(hits)
        head, tail = hits[:depth], hits[depth:]
        texts = [h.chunk.indexed_text for h in head]
        model_id = self.reranker.model_id
        known = self.cache.get_many(model_id, query, texts) if self.cache is not None else [None] * len(texts)
        todo = [i for i, v in enumerate(known) if v is None]
        try:
            fresh = self.reranker.score(query, [texts[i] for i in todo]) if todo else []
        except RampartError as exc:
            if exc.code not in _DEGRADE_CODES:
                raise
            return self._degrade(hits, exc.message, t0)
        except Exception as exc:  # a remote backend failing in an unforeseen way must not fail search
            log.exception("reranker failed")
            return self._degrade(hits, f"reranker error: {exc}", t0)
        if len(fresh) != len(todo):
            return self._degrade(hits, f"reranker returned {len(fresh)} scores for {len(todo)} passages", t0)
        logits = [0.0 if v is None else v for v in known]
        for i, s in zip(todo, fresh, strict=True):
            logits[i] = s
        if self.cache is not None and todo:
            self.cache.put_many(model_id, query, [texts[i] for i in todo], fresh)
        weight_learned = self.reranker.first_stage_weight
        if mode == "auto":
            mode = "residual" if weight_learned is not None else "fused"
        if mode == "pure":
            final = logits
        elif mode == "residual":
            # what residual training optimised: the logit corrects the first stage, w was learned with it
            w = weight_learned if weight_learned is not None else 0.0
            final = [s + w * p for s, p in zip(logits, minmax([h.fused for h in head]), strict=True)]
        else:
            r, f = minmax(logits), minmax([h.fused for h in head])
            final = [weight * a + (1.0 - weight) * b for a, b in zip(r, f, strict=True)]
        final, lifted = lift_linked(query, head, final, link_weight)
        rescored = [
            h.model_copy(update={"scores": {**h.scores, "rerank": s}, "fused": v})
            for h, s, v in zip(head, logits, final, strict=True)
        ]
        order = sorted(range(len(rescored)), key=lambda i: (-final[i], i))
        return RerankResult(
            [rescored[i] for i in order] + _below(tail, min(final)),
            reranked=len(head),
            cached=len(head) - len(todo),
            lifted=lifted,
            ms=(time.perf_counter() - t0) * 1000,
        )

    def _degrade(self, hits: list[ScoredChunk], reason: str, t0: float) -> RerankResult:
        self.degradations += 1
        log.warning("rerank degraded: %s", reason)
        return RerankResult(hits, degraded=["rerank"], reason=reason, ms=(time.perf_counter() - t0) * 1000)


def _below(tail: list[ScoredChunk], floor: float) -> list[ScoredChunk]:
    """``tail`` with its fused scores shifted by one offset (order and gaps kept) to sit below ``floor``."""
    if not tail or tail[0].fused < floor:
        return tail
    shift = tail[0].fused - floor + 1e-6
    return [h.model_copy(update={"fused": h.fused - shift}) for h in tail]
