"""Planted-claim detector: a passage that asserts what a group of flagged planted copies asserts.

PoisonedRAG writes several paraphrases of one false claim. :mod:`planted_copies` catches the ones with
``copy_min_docs`` close copies in the corpus; a looser paraphrase (claim cosine 0.65-0.8 to its
siblings) escapes it although it says the same thing. What unites a planted group is its claim: the
words every flagged member uses that the query does not ask about -- the planted answer ("Mrs.
Tiggy-Winkle", "Springfield", "City Mayor"). A passage close to at least ``min_group`` flagged members
that uses every one of those words asserts their claim. A genuine paragraph on the subject lies about
as close to the group (that is why DBSCAN-style border members swept up genuine answers,
docs/journal/2026-11-23-factcheck-border-members.md), but it gives its own answer, not the planted one.

Members also share filler by chance ("popular", "prestigious", "astronaut"), which a sibling need not
repeat. So a passage may join using only ``min_share`` of the shared words, each weighted by its rarity
in the rest of the results (``1 / (1 + passages using it)``, from ``seen``): the planted answer is
rare there, the context it is wrapped in ("China", "year") is not, so a genuine page that shares only
the context does not reach the share. This looser test holds only for a short claim (``max_words``):
members that share many words are a template family or one subject's pages, not a planted claim.
Either way the passage must repeat at least one shared word that no passage outside the group uses:
a genuine page that says only what the planted texts wrap their lie in ("Istanbul", which the other
results say too) repeats context, not the claim.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from services.common.words import WORD, stem, words
from services.factcheck.detectors import Signal


def planted_claim(
    query_terms: frozenset[str],
    passage: str,
    passage_terms: frozenset[str],
    group: Sequence[tuple[float, frozenset[str], int]],
    *,
    min_group: int,
    length_ratio: float = 0.0,
    min_share: float = 1.0,
    seen: Mapping[str, int] | None = None,
    max_words: int = 0,
) -> Signal:
    """``group``: (cosine to this passage, content terms, words) of each flagged member close to it.
    Score = the cosine to the closest member when at least ``min_group`` are given, the terms all of
    them share beyond the query's (the claim) are non-empty and in ``passage_terms`` (all of them, or
    ``min_share`` of their rarity weight when the claim has at most ``max_words`` terms; 0 = any), and
    (``length_ratio`` > 0) the passage is at most that many times as long as the longest member.
    ``seen``: how many passages outside the group use each term; at least one term the passage repeats
    must be used by none of them."""
    if min_group < 1 or len(group) < min_group:
        return Signal.none()
    if length_ratio > 0 and len(words(passage)) > length_ratio * max(n for *_, n in group):
        return Signal.none()
    claim = frozenset.intersection(*(t for _, t, _ in group)) - query_terms
    used = claim & passage_terms
    seen = seen or {}
    if not any(seen.get(w, 0) == 0 for w in used):
        return Signal.none()  # all it repeats, the rest of the results say too: context, not the claim
    weight = {w: 1.0 / (1 + seen.get(w, 0)) for w in claim}
    # fsum: exact whatever the set's iteration order (it varies between processes with hash
    # randomisation), so a share at the threshold gets the same verdict in every worker
    share = math.fsum(weight[w] for w in used) / math.fsum(weight.values()) if used else 0.0
    if share < min_share - 1e-9 or (share < 1.0 and 0 < max_words < len(claim)):
        return Signal.none()
    shown = sorted({w for w in WORD.findall(passage) if stem(w.lower()) in used})[:6]
    closest = max(c for c, *_ in group)
    return Signal(
        round(min(1.0, max(0.0, closest)), 4),
        f"asserts what {len(group)} passages flagged as planted assert "
        f"({', '.join(repr(w) for w in shown)}: {len(used)} of the {len(claim)} words they share beyond "
        f"the query, {share:.0%} by weight; closest cosine {closest:.2f})",
    )
