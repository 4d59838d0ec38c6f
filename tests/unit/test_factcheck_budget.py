"""The fact-check detectors' per-passage time budget (issue 36, point 6): past it the remaining
detectors are skipped and the passage is withheld as ADVERSARIAL with the reason; within it nothing
changes; the worst shapes found by the audit stay far inside the default budget."""

from __future__ import annotations

import time

import pytest

from services.common.verdicts import Verdict
from services.factcheck import evidence as evidence_module
from services.factcheck.classifier import decide
from services.factcheck.config import FactCheckSettings
from services.factcheck.evidence import DETECTORS, OVERRUN, CheckInput, bounded_text, detect, gather_evidence

QUERY = "how many weeks of parental leave do I get"
PASSAGE = "Parental leave is sixteen weeks for every parent. It can be split into two blocks."


def _item(text: str, chunk_id: str = "c1") -> CheckInput:
    return CheckInput(chunk_id=chunk_id, doc_id=chunk_id, text=text, title="Leave policy", rerank_logit=3.0)


def _burn(seconds: float) -> None:
    """Spend CPU time (the budget counts this thread's CPU, not sleep)."""
    end = time.thread_time() + seconds
    spins = 0
    while time.thread_time() < end:
        spins += 1


def test_within_the_budget_the_evidence_is_what_it_was(monkeypatch: pytest.MonkeyPatch) -> None:
    with_budget = detect(QUERY, _item(PASSAGE), PASSAGE, FactCheckSettings())
    without = detect(QUERY, _item(PASSAGE), PASSAGE, FactCheckSettings(detector_budget_ms=0))
    assert with_budget == without
    assert OVERRUN not in with_budget[0] and list(with_budget[0]) == list(DETECTORS)


def test_past_the_budget_the_rest_is_skipped_and_the_passage_is_adversarial(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ran: list[str] = []
    slow = dict(DETECTORS)

    def stalling(query: str, item: CheckInput, text: str, settings: FactCheckSettings) -> tuple[float, str]:
        ran.append("query_copy")
        _burn(0.08)
        return 0.0, ""

    def later(query: str, item: CheckInput, text: str, settings: FactCheckSettings) -> tuple[float, str]:
        ran.append("stuffing")
        return 0.0, ""

    slow["query_copy"], slow["stuffing"] = stalling, later
    monkeypatch.setattr(evidence_module, "DETECTORS", slow)
    settings = FactCheckSettings(detector_budget_ms=20)
    [ev] = gather_evidence(QUERY, [_item(PASSAGE)], None, settings)
    assert ran == ["query_copy"], "the detectors after the budget ran out must not run"
    assert ev.signals[OVERRUN] == 1.0 and ev.signals["stuffing"] == 0.0 and ev.signals["coverage"] == 0.0
    note = ev.notes[OVERRUN]
    assert "RAMPART_FACTCHECK__DETECTOR_BUDGET_MS" in note and "'query_copy'" in note and "20 ms" in note
    [judgement] = decide(QUERY, [_item(PASSAGE)], [ev], settings)
    assert judgement.verdict is Verdict.ADVERSARIAL
    assert judgement.reason.startswith("detectors over budget")


# The shapes that were slow before the rewrites, at the longest a passage is read (MAX_CHARS).
WORST = {
    "dots": "a" + "." * 20_000,
    "images with ?": "![](http://?" * 1700,
    "blank lines": "a" + "\n" * 20_000 + "x",
    "parens": "(" * 20_000,
    "one long word": "x" * 20_000,
    "words": "a " * 10_000,
}


@pytest.mark.parametrize("shape", sorted(WORST))
def test_the_worst_shapes_stay_inside_the_default_budget(shape: str) -> None:
    text = bounded_text(WORST[shape])
    signals, notes = detect(QUERY, _item(text), text, FactCheckSettings())
    assert OVERRUN not in signals, notes.get(OVERRUN)
