"""Claim alignment: do two passages state different numbers, dates or polarity about the same thing?

Used for COUNTERFACTUAL beside the trained contradiction classifier. Sentences from two passages are
*aligned* when they share most of their content terms (numbers aside); aligned sentences *conflict*
when both state numbers (or years) and none agree, or when one negates what the other asserts.
Cheap, explainable, and blind to paraphrase — which is what the classifier is for.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from services.common.words import terms
from services.factcheck.detectors import Signal
from services.factcheck.text import sentences

_NUMBER = re.compile(r"(?<![\w.])[-+]?\d{1,3}(?:,\d{3})+(?:\.\d+)?|(?<![\w.])[-+]?\d+(?:\.\d+)?")
_NEGATION = re.compile(
    r"\b(not|no|never|none|neither|nor|cannot|can't|won't|isn't|aren't|wasn't|weren't|doesn't|don't|"
    r"didn't|hasn't|haven't|hadn't|without|fails? to|lacks?|absence of|unrelated)\b",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class Claim:
    """One sentence reduced to what alignment needs."""

    text: str
    terms: frozenset[str]
    numbers: frozenset[str]
    negated: bool


def extract_claims(text: str, *, max_sentences: int = 40) -> list[Claim]:
    out = []
    for s in sentences(text)[:max_sentences]:
        nums = frozenset(n.replace(",", "") for n in _NUMBER.findall(s))
        t = frozenset(w for w in terms(s) if not w.replace(".", "").isdigit())
        if len(t) >= 3:
            out.append(Claim(s, t, nums, bool(_NEGATION.search(s))))
    return out


def _overlap(a: frozenset[str], b: frozenset[str]) -> float:
    return len(a & b) / min(len(a), len(b)) if a and b else 0.0


def claim_conflict(a: list[Claim], b: list[Claim], *, align: float = 0.6, min_shared: int = 4) -> Signal:
    """Strongest conflict between any aligned sentence pair of ``a`` and ``b`` (0 when none align).

    Aligned = at least ``min_shared`` content terms in common *and* ``align`` of the shorter
    sentence's terms: short sentences about different subjects ("born in 1950" / "born in 1962")
    must not count as the same claim."""
    best, why = 0.0, ""
    for ca in a:
        for cb in b:
            if len(ca.terms & cb.terms) < min_shared:
                continue
            ov = _overlap(ca.terms, cb.terms)
            if ov < align:
                continue
            if ca.numbers and cb.numbers and not (ca.numbers & cb.numbers):
                score = ov
                reason = (
                    f"numbers differ ({', '.join(sorted(ca.numbers))} vs {', '.join(sorted(cb.numbers))})"
                )
            elif ca.negated != cb.negated and ov >= 0.75:
                score = ov * 0.8
                reason = "one negates the other"
            else:
                continue
            if score > best:
                best, why = score, f"{reason}: {ca.text[:90]!r} / {cb.text[:90]!r}"
    return Signal(round(best, 4), why)
