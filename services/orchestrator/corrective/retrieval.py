"""CRAG's corrective retrieval (papers.md §3): grade the retrieved set, then act on the grade.

- Correct → ``refine``: the primary hits, refined into their best strips.
- Incorrect → ``secondary``: rewrite the query, search the secondary source, refine what it returns
  (CRAG discards the primary set: the evaluator judged it wrong).
- Ambiguous → ``both``: primary and secondary hits merged (primary first, duplicates dropped), refined.

The secondary search runs on a worker thread bounded by ``grading.secondary.timeout_ms``: a source
that errors or does not answer in time leaves the primary results, refined, with ``"secondary"`` in
``degraded`` (docs/architecture.md, "Degrade or fail") — never a hang. With no source configured, an Incorrect set is searched once
more in the primary corpus with the rewritten query (the caller's ``searcher``, so the caller's ACL
filter applies) and merged; ``action`` then says ``refine``.
"""

from __future__ import annotations

import concurrent.futures as cf
import contextvars
import logging
from dataclasses import dataclass, field
from typing import Literal

from services.common.errors import RampartError
from services.common.tracing import content_attributes, stage_span
from services.common.types import Principal, ScoredChunk
from services.common.verdicts import Judgement
from services.factcheck.stage import FactCheckStage
from services.orchestrator.corrective.config import GradingSettings
from services.orchestrator.corrective.grading import RetrievalGrader
from services.orchestrator.corrective.refine import KnowledgeRefiner, RefinedContext
from services.orchestrator.corrective.rewrite_query import QueryRewriter
from services.orchestrator.corrective.secondary import SecondarySource
from services.orchestrator.plan import Grade, Searcher
from services.retrieval.hybrid import SearchOutcome

log = logging.getLogger(__name__)

Action = Literal["refine", "secondary", "both"]
ACTIONS: dict[Grade, Action] = {
    Grade.CORRECT: "refine",
    Grade.INCORRECT: "secondary",
    Grade.AMBIGUOUS: "both",
}
PRIMARY = "primary"
# secondary searches in flight at once; a source that hangs past its deadline holds one thread until
# its own HTTP timeout ends it (it is not waited for)
SECONDARY_THREADS = 4


@dataclass
class CorrectiveResult:
    """What the corrective stage decided and produced; ``origins[i]`` says where ``hits[i]`` came from."""

    grade: Grade
    score: float
    action: Action
    features: dict[str, float]
    hits: list[ScoredChunk]
    origins: list[str]
    refined: RefinedContext
    rewritten_query: str | None = None
    rewrite_method: str | None = None
    secondary: str | None = None  # the source's name when it was asked
    degraded: list[str] = field(default_factory=list)
    filtered: list[Judgement] = field(default_factory=list)  # secondary results the fact-check withheld
    calls: int = 0  # retrieval calls made here (the primary call is the caller's)

    def summary(self) -> dict[str, object]:
        """What the response carries about the grading (JSON-ready; no query text, no passage text)."""
        return {
            "grade": self.grade.value,
            "score": self.score,
            "action": self.action,
            "features": self.features,
            "secondary": self.secondary,
            "rewrite": self.rewrite_method,
            "strips": len(self.refined.strips),
            "filtered": len(self.filtered),
        }


class CorrectiveRetrieval:
    """Grades a primary outcome and runs CRAG's action for the grade."""

    def __init__(
        self,
        grader: RetrievalGrader,
        refiner: KnowledgeRefiner,
        rewriter: QueryRewriter,
        settings: GradingSettings,
        secondary: SecondarySource | None = None,
        *,
        factcheck: FactCheckStage | None = None,
        factcheck_deadline_s: float = 2.0,
        trace_content: bool = False,
    ) -> None:
        self.grader = grader
        self.refiner = refiner
        self.rewriter = rewriter
        self.settings = settings
        self.source = secondary
        self.factcheck = factcheck
        self.factcheck_deadline_s = factcheck_deadline_s
        self.trace_content = trace_content
        # only deployments with a secondary source pay for the threads
        self._pool = (
            cf.ThreadPoolExecutor(SECONDARY_THREADS, thread_name_prefix="crag-secondary")
            if secondary is not None
            else None
        )

    def run(
        self,
        query: str,
        principal: Principal,
        outcome: SearchOutcome,
        searcher: Searcher,
        *,
        refine: bool = True,
    ) -> CorrectiveResult:
        """Grade, act, and (``refine``) refine the merged hits; the orchestrator refines later itself,
        once the fact-check has said which hits the answer may read."""
        graded = self.grader.grade(query, outcome)
        action = ACTIONS[graded.grade]
        with stage_span("rampart.crag", grade=graded.grade.value, action=action, score=graded.score) as span:
            primary = list(outcome.hits)
            result = CorrectiveResult(
                graded.grade, graded.score, action, graded.features, [], [], RefinedContext([])
            )
            extra: list[ScoredChunk] = []
            origin = PRIMARY
            if action != "refine":
                rewritten, method = self.rewriter.rewrite(query)
                result.rewritten_query, result.rewrite_method = rewritten, method
                span.set_attributes(content_attributes(self.trace_content, rewritten_query=rewritten))
                if self.source is not None:
                    result.secondary = origin = self.source.name
                    got = self._secondary(rewritten, principal)
                    result.calls += 1
                    if got is None:
                        result.degraded.append("secondary")
                    else:
                        extra = self._vet(query, got, result)
                elif graded.grade is Grade.INCORRECT:
                    # nowhere else to look: the primary corpus once more, with the rewritten query
                    result.action = "refine"
                    if self.settings.research_primary and rewritten.strip() and rewritten != query:
                        extra = searcher(rewritten).hits
                        result.calls += 1
                else:
                    result.action = "refine"
            # Incorrect with a secondary answer: the primary set is dropped, as in CRAG
            keep_primary = not (result.action == "secondary" and extra)
            hits, origins = _merge(primary if keep_primary else [], extra, origin)
            result.hits, result.origins = hits, origins
            if refine:
                result.refined = self.refiner.refine(query, hits, origins)
            span.set_attributes(
                {
                    "action_taken": result.action,
                    "secondary": result.secondary or "",
                    "degraded": ",".join(result.degraded),
                    "strips": len(result.refined.strips),
                }
            )
        return result

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
        self.rewriter.close()
        if self.source is not None:
            self.source.close()

    def _vet(self, query: str, hits: list[ScoredChunk], result: CorrectiveResult) -> list[ScoredChunk]:
        """Fact-check a source's results that did not come through the pipeline (outside content is
        the likeliest to be adversarial); a fact-check that cannot answer flags ``factcheck``."""
        assert self.source is not None
        if self.source.vetted or self.factcheck is None or not self.factcheck.enabled or not hits:
            return hits
        checked = self.factcheck.apply(
            query, hits, depth=len(hits), min_keep=0, deadline_s=self.factcheck_deadline_s
        )
        result.filtered += checked.filtered
        result.degraded += [d for d in checked.degraded if d not in result.degraded]
        return checked.hits

    def _secondary(self, query: str, principal: Principal) -> list[ScoredChunk] | None:
        """The source's hits, or ``None`` when it failed or ran past its deadline."""
        assert self.source is not None
        timeout_s = self.settings.secondary.timeout_ms / 1000
        # the worker runs in this context, so the source's own spans nest under rampart.crag
        ctx = contextvars.copy_context()
        assert self._pool is not None
        future = self._pool.submit(
            ctx.run, self.source.search, query, principal, self.settings.secondary.top_k
        )
        try:
            return future.result(timeout=timeout_s)
        except cf.TimeoutError:
            future.cancel()
            log.warning(
                "secondary source %s gave no answer within %.1f s; primary only", self.source.name, timeout_s
            )
        except RampartError as exc:
            log.warning("secondary source %s failed (%s); primary only", self.source.name, exc.code.value)
        except Exception as exc:  # a source bug must not fail the search: flagged, primary only
            log.warning("secondary source %s raised %s; primary only", self.source.name, type(exc).__name__)
        return None


def _merge(
    primary: list[ScoredChunk], extra: list[ScoredChunk], origin: str
) -> tuple[list[ScoredChunk], list[str]]:
    """Primary hits then the extra ones, each chunk once."""
    hits: list[ScoredChunk] = []
    origins: list[str] = []
    seen: set[str] = set()
    for group, name in ((primary, PRIMARY), (extra, origin)):
        for h in group:
            if h.chunk.chunk_id not in seen:
                seen.add(h.chunk.chunk_id)
                hits.append(h)
                origins.append(name)
    return hits, origins
