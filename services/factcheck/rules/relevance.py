"""Rules 2 and 4 of docs/factcheck.md ("The rules", 2 and 4), and the LLM judge that replaces 2-4.

IRRELEVANT needs both the calibrated reranker and the sentence strips to agree; two title links then
give a passage back (a bridge, a page the query names). Whatever no rule withheld is RELEVANT.
"""

from __future__ import annotations

import math

from services.common.titles import clean_title, common_name, names
from services.common.verdicts import Verdict
from services.factcheck.rules.check import (
    STANDS,
    Check,
    Ruling,
    Stands,
    spelled_text,
    term_set,
)

# Score of an LLM's ADVERSARIAL / COUNTERFACTUAL verdict: uncalibrated, so neither sure nor unsure.
LLM_SCORE = 0.5


def relevance_probability(logit: float | None, calibration: tuple[float, float]) -> float | None:
    """The reranker's logit as a probability, ``sigmoid(a * logit + b)`` with the fitted Platt
    calibration ``(a, b)``; ``None`` when the passage was not reranked."""
    if logit is None:
        return None
    a, b = calibration
    z = a * logit + b
    return 1.0 / (1.0 + math.exp(-z)) if z > -60 else 0.0


def llm_judge(c: Check, k: int) -> Ruling | Stands | None:
    """With an LLM judge (``llm_judge.py``), its parsed verdict replaces rules 2-4 for a passage rule 1
    let through (reason ``"LLM judge: ..."``). A passage it called RELEVANT stands, locked: it still
    votes in the consensus of rule 3 but is never outvoted. It gives no probability: IRRELEVANT keeps
    the heuristic score, ADVERSARIAL and COUNTERFACTUAL get :data:`LLM_SCORE`. No answer (``None``): the
    heuristics decide. docs/factcheck.md, "LLM judge (optional)"."""
    ev = c.evidence[k]
    if ev.llm_verdict is None:
        return None
    if ev.llm_verdict is Verdict.RELEVANT:
        return STANDS
    p = relevance_probability(c.items[k].rerank_logit, c.settings.calibration)
    score = 1.0 - max(ev.signals["coverage"], p or 0.0) if ev.llm_verdict is Verdict.IRRELEVANT else LLM_SCORE
    return Ruling(ev.llm_verdict, score, f"LLM judge: {ev.llm_reason}")


def low_relevance(c: Check, k: int) -> Ruling | None:
    """IRRELEVANT when the calibrated reranker probability is below ``relevance_threshold`` *and* no
    sentence strip covers ``coverage_threshold`` of the query's terms. Both must agree: the reranker
    misses paraphrase-free matches less than strips do, strips catch reranker blind spots.
    docs/factcheck.md, rule 2."""
    ev, s = c.evidence[k], c.settings
    p = relevance_probability(c.items[k].rerank_logit, s.calibration)
    cov = ev.signals["coverage"]
    low_model = p is None or p < s.relevance_threshold
    if low_model and cov < s.coverage_threshold:
        why = f"no sentence covers the query (best covers {cov:.0%} of its terms)"
        if p is not None:
            why += f" and the reranker gives P(relevant) = {p:.3f}"
        return Ruling(Verdict.IRRELEVANT, 1.0 - max(cov, p or 0.0), why)
    return None


def bridges(c: Check) -> None:
    """An IRRELEVANT passage linked by title to a standing passage of another document stands again
    (``title_bridges``): a two-hop question needs the page its answer page names ("the label of the band
    that released *Bleach*": the *Bleach* page names *Sub Pop*), which alone addresses little of it.
    Either way round: the standing passage names this one's title (loosely counts too: every title
    term the query does not use, in any order and case, "A41" for *A41 road*), or this one names the
    standing passage's title *and* holds a query term that passage lacks (the *World Summit of Nobel
    Peace Laureates* page names *Mikhail Gorbachev* and says "forum"; a page that merely mentions him
    adds nothing). Only rule 2 is undone: rule 1's verdicts stand. docs/factcheck.md, rule 2
    ("Bridges stay")."""
    if not c.settings.title_bridges:
        return
    items, asked = c.items, term_set(c.query)
    relevant = [
        (items[k].doc_id, items[k].title, spelled_text(items[k].text), term_set(items[k].text))
        for k in c.standing()
    ]
    found: dict[int, str] = {}
    for k, v in enumerate(c.verdicts):
        if v is None or v.verdict is not Verdict.IRRELEVANT:
            continue
        doc, title = items[k].doc_id, items[k].title
        # named loosely counts too: every title term the query does not use, in any order and case
        # ("A41" for "A41 road" asked as "what road", "the cranberry" for "Cranberry")
        loose = term_set(clean_title(title)) - asked if title else frozenset()
        namer = next(
            (
                t
                for d, t, text, said in relevant
                if d != doc and title and (names(text, title) or (loose and loose <= said))
            ),
            None,
        )
        adds = asked & term_set(items[k].text)
        if namer is None and adds:
            own = spelled_text(items[k].text)
            namer = next(
                (t for d, t, _, said in relevant if d != doc and t and adds - said and names(own, t)), None
            )
        if namer is not None:
            found[k] = clean_title(namer) or namer
    for k, namer in found.items():
        c.verdicts[k] = None
        c.kept[k] = f"a bridge: the relevant passage {namer!r} names it"


def named_by_query(c: Check) -> None:
    """An IRRELEVANT passage whose title the query spells out stands again (``title_bridges``; not a
    common word: "Hotel" beside "the hotel"). The user asked about that page: comparison and bridge
    questions name each page they need ("Who was born first, Connie Willis or Margaret Landon?"), and
    the page of the second name usually says nothing of the first, so term coverage and a pairwise
    cross-encoder both call it off-topic. Only rule 2 is undone: a planted page titled after what the
    query names still meets every detector. docs/factcheck.md, rule 2 ("Pages the query names stay")."""
    if not c.settings.title_bridges:
        return
    said = spelled_text(c.query)
    for k, v in enumerate(c.verdicts):
        if v is None or v.verdict is not Verdict.IRRELEVANT:
            continue
        title = c.items[k].title
        if title and names(said, title) and not common_name(title, said + spelled_text(c.items[k].text)):
            c.verdicts[k] = None
            c.kept[k] = f"the query names it ({clean_title(title)!r})"


def relevant(c: Check, k: int) -> Ruling:
    """RELEVANT: a passage no rule withheld. Its score is the better of strip coverage and the
    calibrated reranker probability; its reason says which rule kept it, or which sentence addresses
    the query. docs/factcheck.md, rule 4."""
    item, ev = c.items[k], c.evidence[k]
    p = relevance_probability(item.rerank_logit, c.settings.calibration)
    score = max(ev.signals["coverage"], p or 0.0)
    if k in c.locked:
        why = f"LLM judge: {ev.llm_reason}"
    elif k in c.kept:
        why = c.kept[k]
    else:
        why = "addresses the query" + (
            f": {ev.notes['coverage'][:120]!r}" if ev.notes.get("coverage") else ""
        )
    return Ruling(Verdict.RELEVANT, score, why)
