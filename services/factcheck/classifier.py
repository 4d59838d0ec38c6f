"""Turn per-document evidence plus set-level signals into the four verdicts.

Order of the rules (first match wins), each with the reason a human reads:

1. **ADVERSARIAL** — text addressed to a model, the query pasted in, keyword stuffing, or one of a
   near-duplicate cluster of documents (TrustRAG; the results ranked just below the judged ones count as
   peers of the cluster, see ``context``; with ``title_links`` two passages each about its own titled
   subject never count for each other: a template family of pages is not one claim). Untrusted
   sources face lower thresholds (``untrusted_factor``): the same text is more suspicious where anyone
   can write. Once the check has flagged members, a passage close to them that repeats what they all
   say beyond the query (their planted answer) joins them (``claim_join_threshold``,
   :mod:`~services.factcheck.detectors.planted_claim`).
   A passage that frames its own claim as contrary to fact ("In an alternate universe, ...",
   "Contrary to popular belief, ..."; ``framing``, :mod:`~services.factcheck.detectors.framing`) is
   COUNTERFACTUAL at this point: by its own words it is not evidence for a factual answer.
2. **IRRELEVANT** — the calibrated reranker probability is below ``relevance_threshold`` *and* no
   sentence strip covers the query's terms (``coverage_threshold``). Both must agree: the reranker
   misses paraphrase-free matches less than strips do, strips catch reranker blind spots.
   An IRRELEVANT passage whose title a still-relevant passage spells out is a *bridge* and stays
   (``title_links``): a two-hop question needs the page its answer page names ("the label of the band
   that released *Bleach*": the *Bleach* page names *Sub Pop*), which alone addresses little of it;
   so does one naming a still-relevant passage's title while holding a query term that passage lacks.
   An IRRELEVANT passage whose title the *query* spells out stays too (``title_links``): the user
   asked about that page ("Who was born first, Connie Willis or Margaret Landon?": the *Margaret
   Landon* page covers a third of the terms and a pairwise cross-encoder gives it P = 0.002).
3. **COUNTERFACTUAL** — among the remaining passages, one whose claims conflict with more of its peers
   than any passage it conflicts with (the consensus outvotes it). A conflict between two passages
   and nobody else is *disputed*: both stay RELEVANT and the reason says so. Two passages each about
   its own titled subject (each names its title, neither the other's) are not compared
   (``title_links``): "decided 5-4 in 1982" and "decided in 2010" are two court cases, not one
   disputed fact.
4. **RELEVANT** — everything else.

With an LLM judge (:mod:`services.factcheck.llm_judge`), rule 1 still comes first: a model reading
hostile text is what the detectors protect. For any other passage the judge's parsed verdict replaces
rules 2-4 (reason ``"LLM judge: ..."``); a passage it said RELEVANT still counts as a peer in the
consensus of rule 3 for the passages the judge gave no answer on, which the heuristics decide as before.
The judge gives no probability: RELEVANT and IRRELEVANT keep the heuristic score (coverage / reranker),
ADVERSARIAL and COUNTERFACTUAL get :data:`LLM_SCORE`.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Sequence
from functools import lru_cache
from typing import TYPE_CHECKING

import numpy as np

from services.common.subjects import subject_context
from services.common.titles import MIN_TITLE_CHARS, clean_title, common_name, names, spelled
from services.common.verdicts import Judgement, Verdict
from services.factcheck.config import FactCheckSettings
from services.factcheck.detectors import Signal
from services.factcheck.detectors.claims import Claim, claim_conflict, extract_claims
from services.factcheck.detectors.near_duplicates import cosine_matrix, duplicate_clusters, peer_similarity
from services.factcheck.detectors.planted_claim import planted_claim
from services.factcheck.detectors.planted_copies import planted_copies
from services.factcheck.evidence import CheckInput, Evidence, bounded_text
from services.factcheck.model_conflicts import Side
from services.factcheck.text import terms, words

if TYPE_CHECKING:
    from services.factcheck.model_conflicts import ModelConflicts

# (a, b) -> conflict score in [0, 1] for two passages; the trained contradiction model plugs in here.
ConflictFn = Callable[[str, str], Signal]
# Score of an LLM's ADVERSARIAL / COUNTERFACTUAL verdict: uncalibrated, so neither sure nor unsure.
LLM_SCORE = 0.5


def relevance_probability(logit: float | None, calibration: tuple[float, float]) -> float | None:
    if logit is None:
        return None
    a, b = calibration
    z = a * logit + b
    return 1.0 / (1.0 + math.exp(-z)) if z > -60 else 0.0


@lru_cache(maxsize=4096)
def _spelled(text: str) -> str:
    """:func:`spelled`, cached: a set of M passages is compared in M(M-1)/2 pairs."""
    return spelled(text)


@lru_cache(maxsize=4096)
def _terms(text: str) -> frozenset[str]:
    return frozenset(terms(text))


@lru_cache(maxsize=4096)
def _length(text: str) -> int:
    return len(words(text))


@lru_cache(maxsize=4096)
def _claims(text: str) -> tuple[Claim, ...]:
    return tuple(extract_claims(text))


def heuristic_conflict(a: str, b: str) -> Signal:
    """Claim alignment between two passages (claims cached per text: a set of M passages has M(M-1)/2 pairs)."""
    return claim_conflict(list(_claims(a)), list(_claims(b)))


def decide(
    query: str,
    items: Sequence[CheckInput],
    evidence: Sequence[Evidence],
    settings: FactCheckSettings,
    conflict: ConflictFn = heuristic_conflict,
    *,
    context: Sequence[tuple[CheckInput, Evidence]] = (),
    model_conflicts: ModelConflicts | None = None,
) -> list[Judgement]:
    """Verdicts for ``items``; ``context`` (the results ranked just below them) joins only the
    near-duplicate clustering, as peers that may vouch for a group but get no verdict here.
    ``model_conflicts``: the trained contradiction classifier, scoring the most similar pairs of
    still-relevant passages beside the claim alignment (rule 3)."""
    n = len(items)
    if n == 0:
        return []
    vectors = [e.vector for e in evidence] + [e.vector for _, e in context]
    doc_ids = [i.doc_id for i in items] + [i.doc_id for i, _ in context]
    sim = cosine_matrix(np.asarray(vectors, dtype=np.float32)) if all(vectors) else None
    # pairs each about its own titled subject: no near-duplicate cluster (rule 1), no conflict (rule 3)
    subjects = _subject_pairs([*items, *(i for i, _ in context)]) if settings.title_links else None
    clusters = (
        duplicate_clusters(
            doc_ids,
            sim,
            threshold=settings.duplicate_threshold,
            min_docs=settings.duplicate_min_docs,
            apart=subjects,
        )[:n]
        if sim is not None
        else [Signal.none()] * n
    )
    peers = peer_similarity(doc_ids, sim)[:n] if sim is not None else [0.0] * n
    verdicts: list[tuple[Verdict, float, str] | None] = [None] * n
    planted: list[int] = []  # flagged as a near-duplicate cluster or planted copies: rule 1's group
    llm_relevant: set[int] = set()  # judged RELEVANT by the LLM: a consensus peer, never outvoted
    for k, (item, ev) in enumerate(zip(items, evidence, strict=True)):
        s = ev.signals
        factor = settings.untrusted_factor if s.get("untrusted", 0.0) >= 1.0 else 1.0
        trust_note = f" (untrusted source: {ev.notes['untrusted']})" if factor < 1.0 else ""
        if s["injection"] > 0 and s["injection"] >= settings.injection_threshold * factor:
            verdicts[k] = (
                Verdict.ADVERSARIAL,
                s["injection"],
                f"text addressed to a model — {ev.notes['injection']}{trust_note}",
            )
        elif clusters[k].score > 0:
            verdicts[k] = (Verdict.ADVERSARIAL, clusters[k].score, clusters[k].evidence + trust_note)
            planted.append(k)
        elif (
            copies := planted_copies(
                item.copy_cosines,
                threshold=settings.copy_threshold,
                min_copies=settings.copy_min_docs,
                neighbors=item.copy_neighbors,
                border=settings.copy_border_threshold,
                slack=settings.copy_border_slack,
                leads=item.copy_leads,
                words=subject_context(item.text, query)
                if settings.copy_subjects and item.copy_leads
                else None,
            )
        ).score > 0:
            verdicts[k] = (
                Verdict.ADVERSARIAL,
                copies.score,
                f"planted copies — {copies.evidence}{trust_note}",
            )
            planted.append(k)
        elif s["query_copy"] > 0 and s["query_copy"] >= settings.query_copy_threshold * factor:
            verdicts[k] = (
                Verdict.ADVERSARIAL,
                s["query_copy"],
                f"query pasted into the passage — {ev.notes['query_copy']}{trust_note}",
            )
        elif s["stuffing"] > 0 and s["stuffing"] >= settings.stuffing_threshold * factor:
            verdicts[k] = (
                Verdict.ADVERSARIAL,
                s["stuffing"],
                f"keyword stuffing — {ev.notes['stuffing']}{trust_note}",
            )
        elif settings.framing and s.get("framing", 0.0) > 0:  # evidence from older workers lacks it
            verdicts[k] = (
                Verdict.COUNTERFACTUAL,
                s["framing"],
                f"frames its claim as contrary to fact — {ev.notes.get('framing', '')}",
            )
        elif ev.llm_verdict is not None:
            if ev.llm_verdict is Verdict.RELEVANT:
                llm_relevant.add(k)
            else:
                p = relevance_probability(item.rerank_logit, settings.calibration)
                score = (
                    1.0 - max(s["coverage"], p or 0.0) if ev.llm_verdict is Verdict.IRRELEVANT else LLM_SCORE
                )
                verdicts[k] = (ev.llm_verdict, score, f"LLM judge: {ev.llm_reason}")
        else:
            p = relevance_probability(item.rerank_logit, settings.calibration)
            cov = s["coverage"]
            low_model = p is None or p < settings.relevance_threshold
            if low_model and cov < settings.coverage_threshold:
                why = f"no sentence covers the query (best covers {cov:.0%} of its terms)"
                if p is not None:
                    why += f" and the reranker gives P(relevant) = {p:.3f}"
                verdicts[k] = (Verdict.IRRELEVANT, 1.0 - max(cov, p or 0.0), why)
    if planted and sim is not None and settings.claim_join_threshold > 0:
        llm_relevant -= _join_planted_claims(
            query, [*items, *(i for i, _ in context)], evidence, verdicts, planted, sim, subjects, settings
        )
    bridges = _bridges(query, items, verdicts) if settings.title_links else {}
    asked = _named_by_query(query, items, verdicts) if settings.title_links else set()
    for k in (*bridges, *asked):
        verdicts[k] = None
    _consensus(items, evidence, verdicts, settings, conflict, llm_relevant, sim, subjects, model_conflicts)
    out: list[Judgement] = []
    for k, (item, ev, v) in enumerate(zip(items, evidence, verdicts, strict=True)):
        if v is None:
            p = relevance_probability(item.rerank_logit, settings.calibration)
            score = max(ev.signals["coverage"], p or 0.0)
            v = (
                Verdict.RELEVANT,
                score,
                f"LLM judge: {ev.llm_reason}"
                if k in llm_relevant
                else f"a bridge: the relevant passage {bridges[k]!r} names it"
                if k in bridges
                else f"the query names it ({clean_title(item.title)!r})"
                if k in asked
                else "addresses the query"
                + (f": {ev.notes['coverage'][:120]!r}" if ev.notes.get("coverage") else ""),
            )
        verdict, score, reason = v
        out.append(
            Judgement(
                chunk_id=item.chunk_id,
                doc_id=item.doc_id,
                verdict=verdict,
                score=round(min(1.0, max(0.0, score)), 4),
                reason=reason,
                signals={**ev.signals, "cluster": clusters[len(out)].score, "peer_cosine": peers[len(out)]},
            )
        )
    return out


def decide_head(
    query: str,
    everything: Sequence[CheckInput],
    evidence: Sequence[Evidence],
    judged: int,
    settings: FactCheckSettings,
    model_conflicts: ModelConflicts | None = None,
) -> list[Judgement]:
    """:func:`decide` for a check's passages as the checkers hold them: the first ``judged`` get
    verdicts, the rest are their context peers."""
    return decide(
        query,
        everything[:judged],
        evidence[:judged],
        settings,
        context=list(zip(everything[judged:], evidence[judged:], strict=True)),
        model_conflicts=model_conflicts,
    )


def _join_planted_claims(
    query: str,
    passages: Sequence[CheckInput],
    evidence: Sequence[Evidence],
    verdicts: list[tuple[Verdict, float, str] | None],
    planted: Sequence[int],
    sim: np.ndarray,
    subjects: np.ndarray | None,
    settings: FactCheckSettings,
) -> set[int]:
    """Rule 1's group grows by claim: a passage not yet judged that lies within
    ``claim_join_threshold`` of ``claim_min_group`` flagged members and uses the words they share
    beyond the query's joins them (:mod:`~services.factcheck.detectors.planted_claim`): all of them, or
    ``claim_share`` of them weighted by rarity in the rest of the results when they are at most
    ``claim_max_words``. Only members that address this query count (strip coverage >=
    ``claim_group_coverage``): planted text is written to be retrieved for it, while a template family
    the copies rule flagged on its own (season pages) shares template words, not a claim. One pass over
    the members flagged by the detectors: a joined passage recruits nobody. ``passages``: the judged
    ones, then their context peers (parallel to ``sim``). Returns the joined."""
    asked = _terms(query)
    joined: set[int] = set()
    members = [
        g for g in planted if evidence[g].signals.get("coverage", 0.0) >= settings.claim_group_coverage
    ]
    seen: Counter[str] = Counter()
    if members:
        # the rest of the results: passages too far from the group to join it; what they say too is
        # context the planted text wraps its claim in, not the claim
        near = (sim[:, members] >= settings.claim_join_threshold).sum(axis=1) >= settings.claim_min_group
        flagged = set(planted)
        for x, passage in enumerate(passages):
            if x not in flagged and not near[x]:
                seen.update(_terms(passage.text))
    for k, v in enumerate(verdicts):
        if v is not None:
            continue
        group = [
            (float(sim[k, g]), _terms(passages[g].text), _length(passages[g].text))
            for g in members
            if sim[k, g] >= settings.claim_join_threshold
            and passages[g].doc_id != passages[k].doc_id
            and not (subjects is not None and subjects[k, g])
        ]
        claim = planted_claim(
            asked,
            passages[k].text,
            _terms(passages[k].text),
            group,
            min_group=settings.claim_min_group,
            length_ratio=settings.claim_length_ratio,
            min_share=settings.claim_share,
            seen=seen,
            max_words=settings.claim_max_words,
        )
        if claim.score > 0:
            verdicts[k] = (Verdict.ADVERSARIAL, claim.score, f"planted claim — {claim.evidence}")
            joined.add(k)
    return joined


def _bridges(
    query: str, items: Sequence[CheckInput], verdicts: Sequence[tuple[Verdict, float, str] | None]
) -> dict[int, str]:
    """IRRELEVANT passages linked by title to a still-relevant passage of another document, with that
    passage's title. Either way round: the relevant passage names this one's title (the page its answer
    page names), or this one names the relevant passage's title *and* holds a query term that passage
    lacks (the answer page of "what forum did Gorbachev initiate" names *Mikhail Gorbachev* and says
    "forum"; a page that only mentions him adds nothing the question asks of the two). Rule 1 already
    ran: a detector's ADVERSARIAL verdict is never undone."""
    asked = _terms(query)
    relevant = [
        (items[k].doc_id, items[k].title, _spelled(items[k].text), _terms(items[k].text))
        for k, v in enumerate(verdicts)
        if v is None
    ]
    out: dict[int, str] = {}
    for k, v in enumerate(verdicts):
        if v is None or v[0] is not Verdict.IRRELEVANT:
            continue
        doc, title = items[k].doc_id, items[k].title
        # named loosely counts too: every title term the query does not use, in any order and case
        # ("A41" for "A41 road" asked as "what road", "the cranberry" for "Cranberry")
        loose = _terms(clean_title(title)) - asked if title else frozenset()
        namer = next(
            (
                t
                for d, t, text, said in relevant
                if d != doc and title and (names(text, title) or (loose and loose <= said))
            ),
            None,
        )
        adds = asked & _terms(items[k].text)
        if namer is None and adds:
            own = _spelled(items[k].text)
            namer = next(
                (t for d, t, _, said in relevant if d != doc and t and adds - said and names(own, t)), None
            )
        if namer is not None:
            out[k] = clean_title(namer) or namer
    return out


def _named_by_query(
    query: str, items: Sequence[CheckInput], verdicts: Sequence[tuple[Verdict, float, str] | None]
) -> set[int]:
    """IRRELEVANT passages whose title the query spells out (not a common word: "Hotel" beside "the
    hotel"). Comparison and bridge questions name each page they need, and the page of the second
    name usually says nothing of the first: term coverage and a pairwise cross-encoder both call it
    off-topic. Only rule 2 is undone; a detector's ADVERSARIAL verdict stands."""
    said = _spelled(query)
    out: set[int] = set()
    for k, v in enumerate(verdicts):
        if v is None or v[0] is not Verdict.IRRELEVANT:
            continue
        title = items[k].title
        if title and names(said, title) and not common_name(title, said + _spelled(items[k].text)):
            out.add(k)
    return out


def _subject_pairs(items: Sequence[CheckInput]) -> np.ndarray:
    """Which pairs of passages are each about its own titled subject: titled differently, each spelling
    out its own title and neither the other's. Their numbers and dates describe two things, and a family
    of pages written from one template ("2010–11 Vermont Catamounts men's basketball team", "2011–12 …")
    looks near-identical to an embedding yet is no near-duplicate cluster. One matrix per check, titles
    spelled once per passage: a check reads up to ``context_depth`` passages."""
    texts = [_spelled(i.text) for i in items]
    keys = [_own_key(i.title, t) for i, t in zip(items, texts, strict=True)]
    own = [k is not None for k in keys]
    n = len(items)
    out = np.zeros((n, n), dtype=bool)
    for i in range(n):
        if not own[i]:
            continue
        for j in range(i + 1, n):
            ki, kj = keys[i], keys[j]
            if own[j] and ki != kj and str(kj) not in texts[i] and str(ki) not in texts[j]:
                out[i, j] = out[j, i] = True
    return out


def _own_key(title: str, text: str) -> str | None:
    """The key by which a passage (``text``, spelled) names its own subject: its title, or the head of
    a comma-qualified title ("Shelly Beach" of "Shelly Beach, New South Wales": a page calls itself by
    the name, not the qualifier); ``None`` when it spells out neither. Here only, not in
    ``titles.names``: a head alone ("Shelly Beach") names too many pages to count as a link."""
    key = _title_key(title)
    if key is not None and key in text:
        return key
    head = _title_key(title.split(",", 1)[0]) if "," in title else None
    return head if head is not None and head in text else None


@lru_cache(maxsize=4096)
def _title_key(title: str) -> str | None:
    """The title as :func:`names` matches it (spelled, no trailing parenthetical), or ``None`` when it
    is too short to be matched."""
    key = spelled(clean_title(title))
    return key if len(key.strip()) >= MIN_TITLE_CHARS else None


def _side(item: CheckInput, ev: Evidence) -> Side:
    return Side(bounded_text(item.text), ev.notes.get("coverage", ""))


def _consensus(
    items: Sequence[CheckInput],
    evidence: Sequence[Evidence],
    verdicts: list[tuple[Verdict, float, str] | None],
    settings: FactCheckSettings,
    conflict: ConflictFn,
    locked: set[int],
    sim: np.ndarray | None,
    subjects: np.ndarray | None,
    model: ModelConflicts | None,
) -> None:
    """Mark as COUNTERFACTUAL the passages the other still-relevant passages outvote (``locked`` ones
    vote but are never marked: the LLM judge already called them RELEVANT)."""
    alive = [k for k, v in enumerate(verdicts) if v is None]
    edges: dict[int, list[tuple[int, Signal]]] = {k: [] for k in alive}
    pairs = [
        (i, j)
        for x, i in enumerate(alive)
        for j in alive[x + 1 :]
        if items[i].doc_id != items[j].doc_id and not (subjects is not None and subjects[i, j])
    ]
    found: dict[tuple[int, int], Signal] = {}
    for i, j in pairs:
        sig = conflict(items[i].text, items[j].text)
        if sig.score >= settings.conflict_threshold:
            found[(i, j)] = sig
    if model is not None and pairs and model.max_pairs > 0:
        if (
            sim is not None
        ):  # the most similar pairs first: contradictions are between passages on one subject
            pairs = sorted(pairs, key=lambda p: -float(sim[p[0], p[1]]))
        asked = pairs[: model.max_pairs]
        sides = [(_side(items[i], evidence[i]), _side(items[j], evidence[j])) for i, j in asked]
        for pair, sig in zip(asked, model(sides), strict=True):
            if (
                sig.score >= settings.contradiction_threshold
                and sig.score > found.get(pair, Signal.none()).score
            ):
                found[pair] = sig
    for (i, j), sig in found.items():
        edges[i].append((j, sig))
        edges[j].append((i, sig))
    for i in alive:
        if not edges[i] or i in locked:
            continue
        mine = len(edges[i])
        if all(mine > len(edges[j]) for j, _ in edges[i]):
            top = max(edges[i], key=lambda e: e[1].score)[1]
            verdicts[i] = (
                Verdict.COUNTERFACTUAL,
                top.score,
                f"contradicts {mine} other retrieved passage(s) — {top.evidence}",
            )
