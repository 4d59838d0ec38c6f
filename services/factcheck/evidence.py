"""Per-document evidence: everything about one passage that does not depend on the other passages.

This is computed per passage (a Celery worker computes a batch of them per task, one embedding call)
and cached per passage by (model version, query hash, passage hash): the detectors' scores, the best strip's query coverage
and the passage embedding the cluster detector compares. Set-level judgement (clusters, consensus)
happens afterwards in :mod:`services.factcheck.classifier`, on the caller's side, in microseconds.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import numpy as np
from pydantic import BaseModel, Field

from services.common.types import CopyEdit
from services.common.verdicts import Verdict
from services.common.words import terms
from services.factcheck.config import FactCheckSettings
from services.factcheck.detectors import Signal
from services.factcheck.detectors.framing import detect_framing
from services.factcheck.detectors.injection import detect_injection
from services.factcheck.detectors.query_copy import detect_query_copy
from services.factcheck.detectors.source_trust import detect_untrusted
from services.factcheck.detectors.stuffing import detect_stuffing
from services.factcheck.text import sentences
from services.retrieval.embedder import Embedder

if TYPE_CHECKING:
    from services.factcheck.llm_judge import LlmJudge

# Passages longer than this are judged on their first MAX_CHARS characters (chunks are ~220 words;
# a longer text is a malformed or hostile input, and the detectors must stay fast).
MAX_CHARS = 20_000
# Version of the evidence recipe: part of every cache key, bump when a detector changes.
EVIDENCE_VERSION = "evidence-3"  # 2: the framing detector; 3: the output-directive injection family


class CheckInput(BaseModel):
    """One ranked passage to judge (JSON-serialisable: it travels to Celery workers)."""

    chunk_id: str
    doc_id: str
    text: str
    title: str = ""
    source: str = ""
    metadata: dict[str, str | int | float | bool] = Field(default_factory=dict)
    rerank_logit: float | None = None
    fused: float = 0.0
    vector: list[float] | None = Field(
        default=None,
        description="The passage's stored embedding (from the index); when every passage of a check has "
        "one, the near-duplicate clustering uses them and nothing is embedded again",
    )
    copy_cosines: list[float] | None = Field(
        default=None,
        description="Claim-vector cosines to the closest chunk of each other document, from the index "
        "(ScoredChunk.copy_cosines); the planted-copies detector reads them. None = not known",
    )
    copy_neighbors: list[list[float]] | None = Field(
        default=None,
        description="The own copy cosines of the closest other documents' chunks at or above the "
        "search's copy_expand (ScoredChunk.copy_neighbors): they make this passage a border member of "
        "a planted group. None = not known",
    )
    copy_leads: list[str] | None = Field(
        default=None,
        description="The opening name of each closest other document's chunk at or above the search's "
        "copy_leads cosine (ScoredChunk.copy_leads, parallel to the head of copy_cosines): a copy that "
        "opens with another subject's name does not count as planted. None = not known",
    )
    arrival: int | None = Field(
        default=None,
        description="The passage's place in its index's write order, larger = written later "
        "(ScoredChunk.arrival): the planted-copies rule withholds a passage only when it arrived after "
        "most of the unflagged passages around it. None = not known",
    )
    copy_arrivals: list[int] | None = Field(
        default=None,
        description="Parallel to copy_cosines: each closest other document's chunk's write order "
        "(ScoredChunk.copy_arrivals), which marks the passage's own group among the others. None = not "
        "known",
    )
    copy_overlaps: list[float] | None = Field(
        default=None,
        description="For the head of copy_cosines at or above the search's copy_overlap cosine: the word "
        "overlap of each closest other document's chunk with this passage (ScoredChunk.copy_overlaps): "
        "an edited copy of an older passage shares most of its words. None = not known",
    )
    copy_edits: list[CopyEdit] | None = Field(
        default=None,
        description="The older near-copies that share most of the passage's words, and the spans of each it "
        "replaced (ScoredChunk.copy_edits): the altered-copies rule reads them. None = not known",
    )
    embed: bool = Field(
        default=True,
        description="Embed the passage when it carries no vector. A caller holding the stored embedding "
        "sends False and attaches the vector to the evidence itself: the detectors never read it, so it "
        "need not travel to a worker and back (workers that predate the field embed as before)",
    )


class Evidence(BaseModel):
    chunk_id: str
    signals: dict[str, float]
    notes: dict[str, str] = Field(default_factory=dict, description="Human-readable evidence per signal")
    vector: list[float] = Field(default_factory=list)
    # Left out of dumps when empty: without a judge, task results and cached evidence keep the exact
    # shape they had before the judge existed (mixed-version workers and callers, old cache entries).
    llm_verdict: Verdict | None = Field(
        default=None,
        exclude_if=lambda v: v is None,
        description="The LLM judge's verdict; None when no judge ran or it gave no usable answer",
    )
    llm_reason: str = Field(default="", exclude_if=lambda v: not v)


def bounded_text(text: str) -> str:
    """What the detectors read of a text: its first ``MAX_CHARS`` characters, made encodable (lone
    surrogates from bytes decoded with ``surrogateescape`` become U+FFFD; the tokenizer rejects them)."""
    return text[:MAX_CHARS].encode("utf-8", "replace").decode("utf-8")


def passage_key(query: str, item: CheckInput, model_id: str) -> str:
    """Cache key: (evidence recipe + embedder, query, passage with what the detectors read of it)."""
    h = hashlib.sha256()
    for part in (
        EVIDENCE_VERSION,
        model_id,
        query,
        item.title,
        item.text,
        item.source,
        repr(sorted(item.metadata.items())),
    ):
        h.update(part.encode("utf-8", "replace"))
        h.update(b"\x00")
    if item.vector is not None:  # a stored embedding is part of the evidence it yields
        h.update(np.asarray(item.vector, dtype=np.float32).tobytes())
    elif not item.embed:  # evidence without a vector must not answer a request that needs one
        h.update(b"no-embedding\x00")
    return h.hexdigest()


def strip_coverage(query: str, title: str, text: str) -> tuple[float, str]:
    """Best sentence strip's share of the query's distinct content terms (title terms count for every
    strip: a paragraph often names its subject only in its title)."""
    q = set(terms(query))
    if not q:
        return 1.0, ""
    title_terms = set(terms(title))
    best, best_strip = len(q & title_terms) / len(q), ""
    strips = sentences(text)
    for i, s in enumerate(strips):
        window = set(terms(s)) | title_terms
        if i + 1 < len(strips):  # a pair of sentences: the answer often follows its subject
            window |= set(terms(strips[i + 1]))
        cov = len(q & window) / len(q)
        if cov > best:
            best, best_strip = cov, s
    return best, best_strip


# The detectors in the order they run, each giving (score, note) for (query, item, bounded text, settings);
# "coverage" is the best strip's query coverage (its note: the strip).
_Detector = Callable[[str, "CheckInput", str, FactCheckSettings], tuple[float, str]]


def _signal(signal: Signal) -> tuple[float, str]:
    return signal.score, signal.evidence


def _coverage(query: str, item: CheckInput, text: str, _: FactCheckSettings) -> tuple[float, str]:
    cov, strip = strip_coverage(query, item.title, text)
    return round(cov, 4), strip[:200]


DETECTORS: dict[str, _Detector] = {
    "injection": lambda _q, _i, text, _s: _signal(detect_injection(text)),
    "query_copy": lambda query, _i, text, _s: _signal(detect_query_copy(query, text)),
    "stuffing": lambda query, _i, text, _s: _signal(detect_stuffing(query, text)),
    "framing": lambda _q, _i, text, _s: _signal(detect_framing(text)),
    "untrusted": lambda _q, item, _t, s: _signal(
        detect_untrusted(item.source, item.metadata, s.untrusted_sources)
    ),
    "coverage": _coverage,
}
OVERRUN = "overrun"  # the signal of a passage whose detectors ran past detector_budget_ms


def detect(
    query: str, item: CheckInput, text: str, settings: FactCheckSettings
) -> tuple[dict[str, float], dict[str, str]]:
    """Every detector's signal and note for one passage (``text``: its :func:`bounded_text`), within
    ``settings.detector_budget_ms`` of this thread's CPU time (not wall time: a loaded machine slows
    every passage alike and must not make ordinary ones look hostile): the clock is read after each
    detector, and past the budget the rest do not run (their signals are 0) and ``signals["overrun"]``
    is 1 with the reason, which rule 1 makes ADVERSARIAL. Each detector is linear in the text
    (tests/unit/test_bounded_time.py) and the text is at most :data:`MAX_CHARS`, so one detector's run
    is short (under 25 ms at 20,000 characters) and the budget bounds the passage's time
    (docs/security.md, "Bounded time")."""
    budget_s = settings.detector_budget_ms / 1000
    started = time.thread_time()
    signals: dict[str, float] = dict.fromkeys(DETECTORS, 0.0)
    notes: dict[str, str] = {}
    for name, run in DETECTORS.items():
        score, note = run(query, item, text, settings)
        signals[name] = score
        if note:
            notes[name] = note
        elapsed = time.thread_time() - started
        if budget_s and elapsed > budget_s and name != next(reversed(DETECTORS)):
            signals[OVERRUN] = 1.0
            notes[OVERRUN] = (
                f"the detectors ran {elapsed * 1000:.0f} ms of CPU, past their budget of "
                f"{settings.detector_budget_ms:g} ms (RAMPART_FACTCHECK__DETECTOR_BUDGET_MS), and stopped "
                f"after {name!r}: a passage shaped to stall them"
            )
            break
    return signals, notes


def gather_evidence(
    query: str,
    items: Sequence[CheckInput],
    embedder: Embedder | None,
    settings: FactCheckSettings,
    judge: LlmJudge | None = None,
) -> list[Evidence]:
    """Evidence for each item, embedding all passages in one batched call (none when every item carries
    its stored embedding, or none asks for one: the caller makes each all-or-none); with a ``judge``, also its
    verdict per passage (a few requests at a time; the passage is per-document, so it caches with the
    rest — the caller puts the judge's id into the cache key)."""
    texts = [bounded_text(i.text) for i in items]
    if items and all(i.vector for i in items):  # stored embeddings: nothing to compute
        vectors = np.asarray([i.vector for i in items], dtype=np.float32)
    elif embedder is not None and texts and any(i.embed for i in items):
        vectors = embedder.embed(texts)
    else:
        vectors = np.zeros((len(items), 0), dtype=np.float32)
    llm = (
        judge.judge_many(
            query, [f"{i.title}\n\n{t}" if i.title else t for i, t in zip(items, texts, strict=True)]
        )
        if judge is not None
        else [None] * len(items)
    )
    out = []
    for item, text, vec, said in zip(items, texts, vectors, llm, strict=True):
        signals, notes = detect(query, item, text, settings)
        out.append(
            Evidence(
                chunk_id=item.chunk_id,
                signals=signals,
                notes=notes,
                vector=[float(x) for x in vec],
                llm_verdict=said.verdict if said is not None else None,
                llm_reason=said.reason if said is not None else "",
            )
        )
    return out
