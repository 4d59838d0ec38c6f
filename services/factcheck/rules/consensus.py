"""Rule 3 of docs/factcheck.md ("The rules", 3): the consensus of the standing passages outvotes one
that contradicts more of them than any passage it conflicts with.
"""

from __future__ import annotations

from services.common.verdicts import Verdict
from services.factcheck.detectors import Signal
from services.factcheck.detectors.claims import claim_conflict
from services.factcheck.evidence import CheckInput, Evidence, bounded_text
from services.factcheck.model_conflicts import Side
from services.factcheck.rules.check import Check, Ruling, claims_of


def heuristic_conflict(a: str, b: str) -> Signal:
    """Claim alignment between two passages (``detectors/claims.py``: numbers or dates that differ, or
    opposite polarity, in sentences that share most of their terms); claims cached per text."""
    return claim_conflict(list(claims_of(a)), list(claims_of(b)))


def consensus(c: Check) -> None:
    """COUNTERFACTUAL for a standing passage whose claims conflict with more of its peers than any
    passage it conflicts with: the consensus outvotes it. A conflict between two passages and nobody
    else is *disputed*: both stand. Votes are counted by voice (``Check.voice``: one document, or one
    text pasted into several documents). Pairs of one voice are not compared, nor (``title_links``) two
    passages each about its own titled subject: "decided 5-4 in 1982" and "decided in 2010" are two
    court cases, not one disputed fact. The trained contradiction classifier (``model_conflicts``)
    scores the most similar pairs beside the claim alignment; passages the LLM judge called RELEVANT
    vote but are never marked. docs/factcheck.md, rule 3 and "In the stage: passage pairs"."""
    items, s, sim, model = c.items, c.settings, c.sim, c.model_conflicts
    alive = c.standing()
    edges: dict[int, list[tuple[int, Signal]]] = {k: [] for k in alive}
    pairs = [
        (i, j)
        for x, i in enumerate(alive)
        for j in alive[x + 1 :]
        if c.voice[i] != c.voice[j] and not (c.subjects is not None and c.subjects[i, j])
    ]
    found: dict[tuple[int, int], Signal] = {}
    for i, j in pairs:
        sig = c.conflict(items[i].text, items[j].text)
        if sig.score >= s.conflict_threshold:
            found[(i, j)] = sig
    if model is not None and pairs and model.max_pairs > 0:
        if (
            sim is not None
        ):  # the most similar pairs first: contradictions are between passages on one subject
            pairs = sorted(pairs, key=lambda p: -float(sim[p[0], p[1]]))
        asked = pairs[: model.max_pairs]
        sides = [(_side(items[i], c.evidence[i]), _side(items[j], c.evidence[j])) for i, j in asked]
        for pair, sig in zip(asked, model(sides), strict=True):
            if sig.score >= s.contradiction_threshold and sig.score > found.get(pair, Signal.none()).score:
                found[pair] = sig
    for (i, j), sig in found.items():
        edges[i].append((j, sig))
        edges[j].append((i, sig))

    def votes(k: int) -> int:  # a text pasted into several documents is one voice
        return len({c.voice[j] for j, _ in edges[k]})

    for i in alive:
        if not edges[i] or i in c.locked:
            continue
        mine = votes(i)
        if all(mine > votes(j) for j, _ in edges[i]):
            top = max(edges[i], key=lambda e: e[1].score)[1]
            why = f"contradicts {mine} other retrieved passage(s) — {top.evidence}"
            c.verdicts[i] = Ruling(Verdict.COUNTERFACTUAL, top.score, why)


def _side(item: CheckInput, ev: Evidence) -> Side:
    """A passage as the contradiction classifier reads it: its text, and its best strip as its claim."""
    return Side(bounded_text(item.text), ev.notes.get("coverage", ""))
