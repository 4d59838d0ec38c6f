"""In-process fact-checker (embedded default): evidence on a thread pool, verdicts on the caller.

The pool bounds how many checks run at once (``factcheck.workers``) and lets a slow check be
abandoned at its deadline: the caller gets ``unverified`` and the search goes on. The work itself
is one batched embedding call plus regex detectors, well inside the default deadline on a laptop.
With an LLM judge, each passage also costs a chat call: the deadline must cover them (docs/factcheck.md).
"""

from __future__ import annotations

import concurrent.futures as cf
from collections.abc import Sequence
from typing import TYPE_CHECKING

from services.common.verdicts import Judgement
from services.factcheck.checker import CheckOutcome
from services.factcheck.classifier import decide_head
from services.factcheck.config import FactCheckSettings
from services.factcheck.evidence import EVIDENCE_VERSION, CheckInput, gather_evidence
from services.factcheck.inputs import check_items
from services.retrieval.embedder import Embedder

if TYPE_CHECKING:
    from services.factcheck.llm_judge import LlmJudge
    from services.factcheck.model_conflicts import ModelConflicts


class InProcessFactChecker:
    def __init__(
        self,
        embedder: Embedder,
        settings: FactCheckSettings,
        judge: LlmJudge | None = None,
        conflicts: ModelConflicts | None = None,
    ) -> None:
        """``judge``: the optional LLM judge (``build_judge``); the checker owns it and closes it.
        ``conflicts``: the contradiction classifier over pairs of passages (rule 3), if loaded."""
        self.embedder = embedder
        self.settings = settings
        self.unlinked = settings.for_corpus(linked=False)  # what a check of a generic corpus decides with
        self.judge = judge
        self.conflicts = conflicts
        self._pool = cf.ThreadPoolExecutor(max_workers=settings.workers, thread_name_prefix="factcheck")

    @property
    def model_id(self) -> str:
        base = f"{EVIDENCE_VERSION}+{self.embedder.model_id}"
        return f"{base}+{self.judge.model_id}" if self.judge is not None else base

    def check(
        self,
        query: str,
        items: Sequence[CheckInput],
        *,
        deadline_s: float,
        context: Sequence[CheckInput] = (),
        linked: bool = True,
    ) -> CheckOutcome:
        everything = check_items(query, items, context)
        if not items:
            return CheckOutcome()
        settings = self.settings if linked else self.unlinked
        future = self._pool.submit(self._judge, query, everything, len(items), settings)
        try:
            return CheckOutcome(future.result(timeout=max(0.0, deadline_s)))
        except cf.TimeoutError:
            future.cancel()
            return CheckOutcome(
                unverified=True, reason=f"fact-check did not finish within {deadline_s * 1000:.0f} ms"
            )

    def _judge(
        self, query: str, everything: list[CheckInput], n: int, settings: FactCheckSettings
    ) -> list[Judgement]:
        # context passages are only peers for clustering: the LLM judge never reads them
        evidence = gather_evidence(query, everything[:n], self.embedder, settings, self.judge)
        evidence += gather_evidence(query, everything[n:], self.embedder, settings)
        return decide_head(query, everything, evidence, n, settings, self.conflicts)

    def check_ready(self) -> None:
        return None

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
        if self.judge is not None:
            self.judge.close()
