"""What the rules share: one check's passages and evidence, the set-level signals computed once for
all rules, and the verdicts so far.

A rule reads a :class:`Check` and either rules on one passage (a per-passage rule returns a
:class:`Ruling`, :data:`STANDS` or ``None``) or rewrites the verdicts of the set (a set rule). A
passage whose verdict is ``None`` is *standing*: no rule has withheld it yet, and the set rules (planted
claim, bridges, consensus) treat it as a relevant peer.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import TYPE_CHECKING

import numpy as np

from services.common.titles import MIN_TITLE_CHARS, clean_title, spelled
from services.common.verdicts import Verdict
from services.common.words import terms, words
from services.factcheck.config import FactCheckSettings
from services.factcheck.detectors import Signal
from services.factcheck.detectors.claims import Claim, extract_claims
from services.factcheck.detectors.near_duplicates import cosine_matrix, duplicate_clusters, peer_similarity
from services.factcheck.evidence import CheckInput, Evidence

if TYPE_CHECKING:
    from services.factcheck.model_conflicts import ModelConflicts

# (a, b) -> conflict score in [0, 1] for two passages; the trained contradiction model plugs in beside it.
ConflictFn = Callable[[str, str], Signal]


@dataclass(frozen=True)
class Ruling:
    """A rule's verdict on one passage, with the score and the reason a human reads. ``planted``: the
    passage is one of rule 1's group (a near-duplicate cluster or planted copies), which the planted-claim
    rule grows."""

    verdict: Verdict
    score: float
    reason: str
    planted: bool = False


class Stands:
    """A per-passage rule's answer "decided, and it stays standing": the LLM judge called the passage
    RELEVANT, so no later per-passage rule looks at it and the consensus never outvotes it."""


STANDS = Stands()


# Texts are read by several rules and compared in pairs (M passages: M(M-1)/2 pairs): cached per text.
@lru_cache(maxsize=4096)
def spelled_text(text: str) -> str:
    """:func:`~services.common.titles.spelled`, cached."""
    return spelled(text)


@lru_cache(maxsize=4096)
def term_set(text: str) -> frozenset[str]:
    """The text's content terms (:func:`~services.common.words.terms`), cached."""
    return frozenset(terms(text))


@lru_cache(maxsize=4096)
def word_count(text: str) -> int:
    """The text's number of words (:func:`~services.common.words.words`), cached."""
    return len(words(text))


@lru_cache(maxsize=4096)
def claims_of(text: str) -> tuple[Claim, ...]:
    """The text's claims (:func:`~services.factcheck.detectors.claims.extract_claims`), cached."""
    return tuple(extract_claims(text))


@dataclass
class Check:
    """One check in progress. ``items``/``evidence``: the judged passages; ``passages``: those, then
    their context peers (the results ranked just below), parallel to ``sim`` and ``subjects``.
    ``verdicts``: per judged passage, ``None`` while it stands. ``locked``: standing passages the LLM
    judge called RELEVANT. ``kept``: standing passages a rule gave back, with the reason it did.
    ``flagged_alone``: per judged passage, whether an attack detector of rule 1 flags it on its own (set
    by the planted-copies rule's arrival test on first need)."""

    query: str
    items: Sequence[CheckInput]
    evidence: Sequence[Evidence]
    settings: FactCheckSettings
    conflict: ConflictFn
    model_conflicts: ModelConflicts | None
    passages: list[CheckInput]
    sim: np.ndarray | None
    subjects: np.ndarray | None
    clusters: list[Signal]
    peers: list[float]
    verdicts: list[Ruling | None]
    voice: list[str] = field(default_factory=list)
    locked: set[int] = field(default_factory=set)
    kept: dict[int, str] = field(default_factory=dict)
    flagged_alone: list[bool] | None = None

    @classmethod
    def open(
        cls,
        query: str,
        items: Sequence[CheckInput],
        evidence: Sequence[Evidence],
        settings: FactCheckSettings,
        conflict: ConflictFn,
        context: Sequence[tuple[CheckInput, Evidence]],
        model_conflicts: ModelConflicts | None,
    ) -> Check:
        """The check of ``items`` with the set-level signals every rule reads: the passages' cosines
        (from their stored or fresh embeddings, when all of them, context included, have one), which
        pairs are each about its own titled subject (``title_links``), the near-duplicate clusters
        (rule 1) and each passage's highest cosine to another document's passage."""
        n = len(items)
        passages = [*items, *(i for i, _ in context)]
        vectors = [e.vector for e in evidence] + [e.vector for _, e in context]
        doc_ids = voices(passages)
        sim = cosine_matrix(np.asarray(vectors, dtype=np.float32)) if all(vectors) else None
        subjects = subject_pairs(passages) if settings.title_links else None
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
        return cls(
            query,
            items,
            evidence,
            settings,
            conflict,
            model_conflicts,
            passages,
            sim,
            subjects,
            clusters,
            peers,
            [None] * n,
            doc_ids,
        )

    def factor(self, k: int) -> float:
        """The multiplier of passage ``k``'s content thresholds: ``untrusted_factor`` for an untrusted
        source (the same text is more suspicious where anyone can write), else 1."""
        return (
            self.settings.untrusted_factor if self.evidence[k].signals.get("untrusted", 0.0) >= 1.0 else 1.0
        )

    def trust_note(self, k: int) -> str:
        """What a reason adds when passage ``k`` faced the lowered thresholds of an untrusted source."""
        return f" (untrusted source: {self.evidence[k].notes['untrusted']})" if self.factor(k) < 1.0 else ""

    def standing(self) -> list[int]:
        """The judged passages no rule has withheld so far."""
        return [k for k, v in enumerate(self.verdicts) if v is None]


def voices(passages: Sequence[CheckInput]) -> list[str]:
    """One key per passage, shared by passages that are one voice: chunks of one document, and the
    same text held by several documents (a policy pasted into three handbooks, whitespace and case
    aside). Several documents saying nearly the same is the campaign signal (clusters, rule 1) and
    several agreeing passages the consensus (rule 3); a pasted copy is neither a paraphrase nor an
    independent source, so it counts once (issue 34, "a legitimate copy is not a campaign")."""
    key_of_doc: dict[str, str] = {}
    key_of_text: dict[str, str] = {}
    parent: dict[str, str] = {}

    def root(k: str) -> str:
        while parent.get(k, k) != k:
            k = parent[k]
        return k

    for p in passages:
        text = " ".join(p.text.lower().split())
        a = key_of_doc.setdefault(p.doc_id, p.doc_id)
        b = key_of_text.setdefault(text, a)
        ra, rb = root(a), root(b)
        if ra != rb:
            parent[max(ra, rb)] = min(ra, rb)
    return [root(key_of_doc[p.doc_id]) for p in passages]


def subject_pairs(passages: Sequence[CheckInput]) -> np.ndarray:
    """Which pairs of passages are each about its own titled subject: titled differently, each spelling
    out its own title and neither the other's. Their numbers and dates describe two things, and a family
    of pages written from one template ("2010–11 Vermont Catamounts men's basketball team", "2011–12 …")
    looks near-identical to an embedding yet is no near-duplicate cluster (rule 1) and no dispute
    (rule 3). One matrix per check, titles spelled once per passage: a check reads up to
    ``context_depth`` passages."""
    texts = [spelled_text(p.text) for p in passages]
    keys = [_own_key(p.title, t) for p, t in zip(passages, texts, strict=True)]
    own = [k is not None for k in keys]
    n = len(passages)
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
    """The title as :func:`~services.common.titles.names` matches it (spelled, no trailing
    parenthetical), or ``None`` when it is too short to be matched."""
    key = spelled(clean_title(title))
    return key if len(key.strip()) >= MIN_TITLE_CHARS else None
