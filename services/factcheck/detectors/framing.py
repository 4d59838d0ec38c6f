"""Counterfactual-framing detector: a passage that says its own claim is not how things are.

A planted false claim has to get past a reader who knows better, so generated attacks wrap it in a
frame that excuses it: "In an alternate universe, the Titanic sank in the Pacific", "Contrary to popular
belief, the father of behaviorism is Freud", "In a rare historical mix-up, …". Whatever follows such a
frame is, by the passage's own words, not the established fact, so it cannot serve as evidence for a
factual answer. Genuine reference text rarely frames itself this way: on the HotpotQA-500, NQ-open oracle
and SciFact corpora (12,641 passages) these patterns match one passage, against 16% of PoisonedRAG's
planted NQ texts and 13% of its MS MARCO ones (docs/journal/2026-11-24-factcheck-framing.md).

The patterns are narrow on purpose. A fiction page's "an alternate history novel" or "set in a parallel
universe" describes a work, not the world, so the frame must *open a sentence* ("In an alternate
universe, …"); "contrary to" alone, "often wrongly attributed" and "surprisingly" are common in genuine
text (a page correcting a myth uses them) and do not count.
"""

from __future__ import annotations

import re

from services.factcheck.detectors import Signal

_SETTING = (
    r"(?:universe|dimension|timeline|reality|realm|history|world|scenario"
    r"|version of (?:history|events|reality|the \w+))"
)
# A sentence that opens inside another world: "In an alternate universe, …", "In our reimagined history, …".
_OPENS_ELSEWHERE = re.compile(
    r"(?:^|[.!?:;]\s+|[\"“(]\s*)(?:In|Within|From)\s+(?:an?|the|this|that|our|some|one)\s+"
    r"(?:[\w'’-]+\s+){0,3}?"
    r"(?:alternate|alternative|parallel|revised|reimagined|rewritten|hypothetical|imaginary)\s+" + _SETTING
)
# "Contrary to popular belief, …": the passage announces it departs from what is known.
_CONTRARY = re.compile(
    r"\b[Cc]ontrary to (?:popular|common|general|widespread|conventional|usual|established)\s+"
    r"(?:beliefs?|knowledge|opinion|perception|understanding|expectations?|assumptions?|wisdom"
    r"|records?|accounts?)\b"
)
# "In a rare historical mix-up, …", "In a surprising twist of history, …".
_TWIST = re.compile(
    r"\b[Ii]n an? (?:rare|surprising|peculiar|unusual|unique|strange|bizarre|unexpected)\s+"
    r"(?:(?:twist|turn|mix-up|revision) of (?:history|events|fate)|(?:historical\s+)?(?:twist|mix-up)\b)"
)
PATTERNS = (_OPENS_ELSEWHERE, _CONTRARY, _TWIST)


def detect_framing(text: str) -> Signal:
    """Score 1 with the matched frame when the passage frames a claim as contrary to fact, else none.
    ``text`` is bounded by the caller (:func:`services.factcheck.evidence.bounded_text`)."""
    for pattern in PATTERNS:
        m = pattern.search(text)
        if m is not None:
            return Signal(1.0, repr(m.group(0).strip(' "“(.!?:;')))
    return Signal.none()
