"""Rule 1 of docs/factcheck.md ("The rules", 1): passages that are not evidence but an attack.

ADVERSARIAL: text addressed to a model, an altered copy of an older document, one of a near-duplicate
cluster, one with planted copies elsewhere in the corpus, the query pasted in, keyword stuffing; then,
once the check has flagged members, a passage repeating their planted claim. COUNTERFACTUAL: a passage framing its own claim as
contrary to fact. These come first, before relevance, and with an LLM judge too: a model reading
hostile text is what the detectors protect. Untrusted sources face every content threshold times
``untrusted_factor`` (:meth:`Check.factor`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from services.common.subjects import subject_context
from services.common.verdicts import Verdict
from services.common.words import content_word, words
from services.factcheck.detectors import Signal
from services.factcheck.detectors.altered_copy import altered_copy as altered_copy_signal
from services.factcheck.detectors.planted_claim import planted_claim as planted_claim_signal
from services.factcheck.detectors.planted_copies import planted_copies as planted_copies_signal
from services.factcheck.rules.check import Check, Ruling, term_set, word_count


def overrun(c: Check, k: int) -> Ruling | None:
    """The detectors ran past ``detector_budget_ms`` on this passage and stopped (``evidence.detect``):
    its other signals are incomplete, and a text that stalls linear-time detectors was written to.
    docs/security.md ("Bounded time")."""
    ev = c.evidence[k]
    if ev.signals.get("overrun", 0.0) > 0:
        return Ruling(Verdict.ADVERSARIAL, 1.0, f"detectors over budget — {ev.notes.get('overrun', '')}")
    return None


def injection(c: Check, k: int) -> Ruling | None:
    """Text addressed to a model (override phrases, notes for AI assistants, chat markup, answer
    steering; ``detectors/injection.py``): a retrieved passage that gives orders is an attack whatever
    else it says. docs/factcheck.md, rule 1."""
    s = c.evidence[k].signals
    if s["injection"] > 0 and s["injection"] >= c.settings.injection_threshold * c.factor(k):
        why = f"text addressed to a model — {c.evidence[k].notes['injection']}{c.trust_note(k)}"
        return Ruling(Verdict.ADVERSARIAL, s["injection"], why)
    return None


def near_duplicate_cluster(c: Check, k: int) -> Ruling | None:
    """One of a dense group of passages from ``duplicate_min_docs`` or more different documents
    (TrustRAG's signal, ``detectors/near_duplicates.py``; the context peers count as members, and with
    ``title_links`` two passages each about its own titled subject never count for each other):
    independent documents rarely paraphrase one another that closely, planted ones do. With
    ``arrival_order``, only when the passage arrived after most of the unflagged passages around it
    (:func:`came_with_context`): a corpus's own redundancy (several sources on one fact, loaded with the
    rest) stands, its cluster named in its reason. docs/factcheck.md, rule 1 ("near-duplicate cluster",
    "arrival order")."""
    cluster = c.clusters[k]
    if cluster.score <= 0:
        return None
    if c.settings.arrival_order and (came := came_with_context(c, k)) is not None:
        c.kept[k] = f"{cluster.evidence}, but not planted late: {came}"
        return None
    if (before := before_late_burst(c, k, _cluster_arrivals(c, k))) is not None:
        c.kept[k] = f"{cluster.evidence}, but {before}"
        return None
    return Ruling(Verdict.ADVERSARIAL, cluster.score, cluster.evidence + c.trust_note(k), planted=True)


def _cluster_arrivals(c: Check, k: int) -> list[int | None]:
    """The write orders of the other documents' passages within ``duplicate_threshold`` of passage
    ``k`` (its near-duplicate cluster as seen from it; context peers included)."""
    if c.sim is None:
        return []
    return [
        p.arrival
        for j, p in enumerate(c.passages)
        if j != k and c.voice[j] != c.voice[k] and c.sim[k, j] >= c.settings.duplicate_threshold
    ]


def planted_copies(c: Check, k: int) -> Ruling | None:
    """``copy_min_docs`` other readable documents hold a chunk whose claim vector lies within
    ``copy_threshold`` of this one's (the index's ``copy_cosines``), not counting copies that open with
    another subject's name (``copy_subjects``) and, optionally, as a border member of such a group
    (``copy_border_threshold``): PoisonedRAG's paraphrases vouch for each other even when only one
    reaches the results. With ``arrival_order``, only when the passage arrived after most of the
    unflagged passages around it (:func:`came_with_context`); otherwise it stands, its copies named in
    its reason. docs/factcheck.md, rule 1 ("planted copies", "arrival order")."""
    copies = _copies(c, k)
    if copies.score <= 0:
        return None
    if c.settings.arrival_order and (came := came_with_context(c, k)) is not None:
        c.kept[k] = f"near-copies elsewhere ({copies.evidence}), but not planted late: {came}"
        return None
    if c.settings.arrival_order and c.settings.copy_planting and (unplanted := how_planted(c, k)) is not None:
        c.kept[k] = f"near-copies elsewhere ({copies.evidence}), but not planted: {unplanted}"
        return None
    item = c.items[k]
    close = [
        a
        for a, cos in zip(item.copy_arrivals or (), item.copy_cosines or (), strict=False)
        if cos >= c.settings.copy_threshold
    ]
    if (before := before_late_burst(c, k, close)) is not None:
        c.kept[k] = f"near-copies elsewhere ({copies.evidence}), but {before}"
        return None
    why = f"planted copies — {copies.evidence}{c.trust_note(k)}"
    return Ruling(Verdict.ADVERSARIAL, copies.score, why, planted=True)


def came_with_context(c: Check, k: int, flagged: Sequence[bool] = ()) -> str | None:
    """Why passage ``k`` did not arrive after the documents around it, or ``None`` when it did or that
    is not known.

    A campaign is planted into a corpus that already answers the question, so its passages are written
    after most of the honest passages that rank beside them; abstracts of one field loaded together, or
    a handbook's pages, come in no such order. "Around it": the check's other judged passages that no
    attack detector flags on its own, its own document and its near-copies (the group, by write order)
    aside, and any ``flagged`` by the caller's own detector (other altered copies, planted after the
    corpus like this one). The passage is late when written after at least half of them; with none to compare, or
    without a write order (an index that does not report one), it counts as late: the rule then
    withholds as it did before this test existed. Write order is the index's chunk sequence: a new
    version of a document is a new arrival."""
    item, s = c.items[k], c.settings
    if item.arrival is None:
        return None
    group = {
        a
        for a, cos in zip(item.copy_arrivals or (), item.copy_cosines or (), strict=False)
        if cos >= s.copy_threshold
    }
    alone = _flagged_alone(c)
    around = [
        a
        for j, other in enumerate(c.items)
        if j != k
        and not alone[j]
        and not (j < len(flagged) and flagged[j])
        and other.doc_id != item.doc_id
        and (a := other.arrival) is not None
        and a not in group
    ]
    before = sum(a < item.arrival for a in around)
    if not around or 2 * before >= len(around):
        return None
    return f"{len(around) - before} of the {len(around)} unflagged passages around it were written after it"


BURST_LEVEL = 0.05  # a conventional significance level, not a fitted value
EDIT_OVERLAP = 0.5  # an edit shares most of its words with what it edits: more than half of them


def how_planted(c: Check, k: int) -> str | None:
    """Why passage ``k``'s late group of near-copies does not look planted, or ``None`` when it does or
    that is not known. Two ways a group is planted, each a fact about the group, not a threshold fitted
    to one corpus:

    - **in one burst**: a campaign's paraphrases are written in one go, so their write-order places
      lie together. ``n`` places drawn at random from a range ``R`` span at most ``s`` with probability
      ``n·x^(n−1) − (n−1)·x^n`` (``x = s / R``); below :data:`BURST_LEVEL` they arrived together. ``R``
      is the span of every arrival the check knows (its passages and their copies);
    - **as an edit of an older passage**: a counterfactual edit (a date or a name swapped) shares more
      than half its words (:data:`EDIT_OVERLAP`, the word-set overlap the search reports) with its
      original, which arrived before it.

    Documents of one field that say the same thing (abstracts on one flow problem) arrive apart and
    share few words: they are neither. Without write orders or overlaps the group counts as planted,
    as before this test. docs/factcheck.md, rule 1 ("how the copies were planted")."""
    item, s = c.items[k], c.settings
    if item.arrival is None or not item.copy_arrivals or item.copy_overlaps is None:
        return None
    close = [
        (a, cos)
        for a, cos in zip(item.copy_arrivals, item.copy_cosines or (), strict=False)
        if cos >= s.copy_threshold
    ]
    if not close:
        return None
    for (a, _), overlap in zip(close, item.copy_overlaps, strict=False):
        if a < item.arrival and overlap > EDIT_OVERLAP:
            return None  # an edit of an older passage
    group = [item.arrival] + [a for a, _ in close]
    whole = known_span(c)
    span = max(group) - min(group) + 1
    p = burst_probability(len(group), span, whole)
    if p is None or p < BURST_LEVEL:
        return None  # arrived in one burst
    return (
        f"it and its {len(group) - 1} close copies arrived apart ({span} of the {whole} write-order places "
        f"around them, p = {p:.2f}) and none is an older passage it edits (word overlap ≤ {EDIT_OVERLAP})"
    )


def known_span(c: Check) -> int:
    """How many write-order places the check's arrivals cover (its passages and their copies); 0 when
    none is known."""
    known = [x for other in c.items for x in (other.arrival, *(other.copy_arrivals or ())) if x is not None]
    return max(known) - min(known) + 1 if known else 0


def before_late_burst(c: Check, k: int, group: Sequence[int | None]) -> str | None:
    """Why passage ``k`` is not part of its group's late burst, or ``None`` when it is, the group shows
    none, the test is off (``late_bursts``) or write orders are unknown.

    A group of near-copies can hold both sides of a question: the corpus's own rewordings of the
    truth (loaded with the corpus) and a campaign of rewordings of the lie (planted after it, in one
    go). The group's write orders, sorted and cut at their widest gap, then show the campaign as the
    part after the gap, together (:func:`burst_probability` below :data:`BURST_LEVEL` over the
    check's write-order range); a passage written before that gap came with the corpus and stands, its
    group named in its reason. A group written in one go, or spread out with no burst at its end, is
    judged as before."""
    mine = c.items[k].arrival
    if not c.settings.late_bursts or mine is None:
        return None
    known = sorted({a for a in (*group, mine) if a is not None})
    if len(known) < 3:
        return None
    _, at = max((known[i + 1] - known[i], i) for i in range(len(known) - 1))
    late = known[at + 1 :]
    if len(late) < 2 or mine >= late[0]:
        return None
    p = burst_probability(len(late), late[-1] - late[0] + 1, known_span(c))
    if p is None or p >= BURST_LEVEL:
        return None
    return (
        f"written before its group's late burst ({len(late)} passages written together "
        f"{late[0] - mine} write-order places after it, p = {p:.3f})"
    )


def burst_probability(n: int, span: int, whole: int) -> float | None:
    """The chance that ``n`` write-order places drawn at random from ``whole`` span at most ``span``:
    ``n·x^(n−1) − (n−1)·x^n`` with ``x = span / whole``. Below :data:`BURST_LEVEL` they arrived
    together. ``None`` when the group covers the whole range (nothing to compare it with)."""
    if whole <= span:
        return None
    x = span / whole
    return float(n * x ** (n - 1) - (n - 1) * x**n)


def _flagged_alone(c: Check) -> list[bool]:
    """Per judged passage: does an attack detector of rule 1 flag it by itself (detectors over budget,
    text addressed to a model, a near-duplicate cluster, near-copies, the query pasted in, stuffing)?
    Computed once per check; the arrival test compares a passage only with passages none of these
    flag."""
    if c.flagged_alone is None:
        c.flagged_alone = [
            _copies(c, j).score > 0
            or c.clusters[j].score > 0
            or any(rule(c, j) is not None for rule in (overrun, injection, query_copy, stuffing))
            for j in range(len(c.items))
        ]
    return c.flagged_alone


def _copies(c: Check, k: int) -> Signal:
    """The planted-copies detector on passage ``k`` (``detectors/planted_copies.py``), with the check's
    settings, not counting the copies that altered it (:func:`_alterers`): a tampered copy of a genuine
    passage is an attack on it, not a fellow member of a campaign it belongs to."""
    item, s = c.items[k], c.settings
    cosines, neighbors, leads = item.copy_cosines, item.copy_neighbors, item.copy_leads
    alterers = _alterers(c, k)
    if alterers and cosines is not None and item.copy_arrivals:
        keep = [i for i, a in enumerate(item.copy_arrivals) if a not in alterers and i < len(cosines)]
        cosines = [cosines[i] for i in keep]
        neighbors = [neighbors[i] for i in keep if i < len(neighbors)] if neighbors is not None else None
        leads = [leads[i] for i in keep if i < len(leads)] if leads is not None else None
    return planted_copies_signal(
        cosines,
        threshold=s.copy_threshold,
        min_copies=s.copy_min_docs,
        neighbors=neighbors,
        border=s.copy_border_threshold,
        slack=s.copy_border_slack,
        leads=leads,
        words=subject_context(item.text, c.query) if s.copy_subjects and leads else None,
        island=s.copy_island_gap,
    )


def _alterers(c: Check, k: int) -> set[int]:
    """The write orders of the check's passages that are altered copies of passage ``k``'s document
    (the altered-copies detector on their edit of it)."""
    if not c.settings.altered_copies:
        return set()
    doc, asked = c.items[k].doc_id, _asked(c)
    return {
        other.arrival
        for j, other in enumerate(c.items)
        if j != k
        and other.arrival is not None
        and altered_copy_signal([e for e in other.copy_edits or () if e.doc_id == doc], asked).score > 0
    }


def _asked(c: Check) -> list[str]:
    """The query's content words: what the altered-copies detector reads as naming a subject."""
    return [w for w in words(c.query) if content_word(w)]


def query_copy(c: Check, k: int) -> Ruling | None:
    """The query pasted verbatim into the passage (PoisonedRAG's black-box trick, ``query_copy.py``):
    text written to be retrieved for one question, not to inform. docs/factcheck.md, rule 1."""
    s = c.evidence[k].signals
    if s["query_copy"] > 0 and s["query_copy"] >= c.settings.query_copy_threshold * c.factor(k):
        why = f"query pasted into the passage — {c.evidence[k].notes['query_copy']}{c.trust_note(k)}"
        return Ruling(Verdict.ADVERSARIAL, s["query_copy"], why)
    return None


def stuffing(c: Check, k: int) -> Ruling | None:
    """Keyword stuffing (``stuffing.py``): query terms repeated to climb the ranking.
    docs/factcheck.md, rule 1."""
    s = c.evidence[k].signals
    if s["stuffing"] > 0 and s["stuffing"] >= c.settings.stuffing_threshold * c.factor(k):
        why = f"keyword stuffing — {c.evidence[k].notes['stuffing']}{c.trust_note(k)}"
        return Ruling(Verdict.ADVERSARIAL, s["stuffing"], why)
    return None


def framing(c: Check, k: int) -> Ruling | None:
    """A passage framing its own claim as contrary to fact ("In an alternate universe, ...", "Contrary
    to popular belief, ..."; ``framing``, ``detectors/framing.py``) is, by its own words, no evidence for
    a factual answer: COUNTERFACTUAL, so the ``min_keep`` fallback may still return it, flagged.
    Evidence from workers older than the detector lacks the signal. docs/factcheck.md, rule 1
    ("Counterfactual framing")."""
    ev = c.evidence[k]
    if c.settings.framing and ev.signals.get("framing", 0.0) > 0:
        why = f"frames its claim as contrary to fact — {ev.notes.get('framing', '')}"
        return Ruling(Verdict.COUNTERFACTUAL, ev.signals["framing"], why)
    return None


def altered_copy(c: Check, k: int) -> Ruling | None:
    """An older document says the same word for word but for one claim, which this passage replaced
    (``detectors/altered_copy.py``): a genuine passage with its answer swapped, planted beside the
    original. ADVERSARIAL, not COUNTERFACTUAL (which the ``min_keep`` fallback may still return): the
    copy is no independent source for the claim it changed, but a tampered copy of the document it
    copied, which was written first and says otherwise. A new version of the same document replaces the
    old one in the index and is never compared with it; a copy pasted whole replaces nothing. With
    ``arrival_order``, only when the passage arrived after most of the unflagged passages around it
    (:func:`came_with_context`): a report's next edition, loaded with the collection it belongs to,
    stands, its edit named in its reason. docs/factcheck.md, rule 1 ("altered copies")."""
    signal = _altered(c, k)
    if signal.score <= 0:
        return None
    others = [j != k and _altered(c, j).score > 0 for j in range(len(c.items))]
    if c.settings.arrival_order and (came := came_with_context(c, k, others)) is not None:
        c.kept[k] = f"altered copy ({signal.evidence}), but not planted late: {came}"
        return None
    why = f"altered copy — {signal.evidence}{c.trust_note(k)}"
    return Ruling(Verdict.ADVERSARIAL, signal.score, why)


def _altered(c: Check, k: int) -> Signal:
    """The altered-copy detector on passage ``k`` (``detectors/altered_copy.py``), with the query's
    content words; none when the rule is off."""
    if not c.settings.altered_copies:
        return Signal.none()
    return altered_copy_signal(c.items[k].copy_edits, _asked(c))


def planted_claim(c: Check) -> None:
    """Rule 1's group grows by claim: a standing passage that lies within ``claim_join_threshold`` of
    ``claim_min_group`` flagged members and uses the words they share beyond the query's joins them
    (``detectors/planted_claim.py``): all of them, or ``claim_share`` of them weighted by rarity in the
    rest of the results when they are at most ``claim_max_words``. Embedding similarity cannot tell a
    loose paraphrase from a genuine paragraph on the same subject; the planted answer they repeat can.

    Only members that address this query count (strip coverage >= ``claim_group_coverage``): planted
    text is written to be retrieved for it, while a template family the copies rule flagged on its own
    (season pages) shares template words, not a claim. One pass over the members the per-passage rules
    flagged: a joined passage recruits nobody, and one the LLM judge called RELEVANT is no longer
    locked. Off without stored vectors or with ``claim_join_threshold`` 0. docs/factcheck.md, rule 1
    ("planted claim")."""
    s, sim = c.settings, c.sim
    planted = [k for k, v in enumerate(c.verdicts) if v is not None and v.planted]
    if not (planted and sim is not None and s.claim_join_threshold > 0):
        return
    asked = term_set(c.query)
    members = [g for g in planted if c.evidence[g].signals.get("coverage", 0.0) >= s.claim_group_coverage]
    seen: Counter[str] = Counter()
    if members:
        # the rest of the results: passages too far from the group to join it; what they say too is
        # context the planted text wraps its claim in, not the claim
        near = (sim[:, members] >= s.claim_join_threshold).sum(axis=1) >= s.claim_min_group
        flagged = set(planted)
        for x, passage in enumerate(c.passages):
            if x not in flagged and not near[x]:
                seen.update(term_set(passage.text))
    for k in c.standing():
        group = [
            (float(sim[k, g]), term_set(c.passages[g].text), word_count(c.passages[g].text))
            for g in members
            if sim[k, g] >= s.claim_join_threshold
            and c.passages[g].doc_id != c.passages[k].doc_id
            and not (c.subjects is not None and c.subjects[k, g])
        ]
        if (
            group
            and (before := before_late_burst(c, k, [c.passages[g].arrival for g in members])) is not None
        ):
            c.kept[k] = f"shares the planted claim's words, but {before}"
            continue
        claim = planted_claim_signal(
            asked,
            c.passages[k].text,
            term_set(c.passages[k].text),
            group,
            min_group=s.claim_min_group,
            length_ratio=s.claim_length_ratio,
            min_share=s.claim_share,
            seen=seen,
            max_words=s.claim_max_words,
        )
        if claim.score > 0:
            c.verdicts[k] = Ruling(Verdict.ADVERSARIAL, claim.score, f"planted claim — {claim.evidence}")
            c.locked.discard(k)
