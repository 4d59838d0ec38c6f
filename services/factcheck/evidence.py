"""Per-document evidence: everything about one passage that does not depend on the other passages.

This is computed per passage (a Celery worker computes a batch of them per task, one embedding call)
and cached per passage by (model version, query hash, passage hash): the detectors' scores, the best strip's query coverage
and the passage embedding the cluster detector compares. Set-level judgement (clusters, consensus)
happens afterwards in :mod:`services.factcheck.classifier`, on the caller's side, in microseconds.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
from pydantic import BaseModel, Field

from services.common.verdicts import Verdict
from services.common.words import terms
from services.factcheck.config import FactCheckSettings
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
EVIDENCE_VERSION = "evidence-2"  # 2: the framing detector


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
        inj = detect_injection(text)
        copy = detect_query_copy(query, text)
        stuff = detect_stuffing(query, text)
        frame = detect_framing(text)
        trust = detect_untrusted(item.source, item.metadata, settings.untrusted_sources)
        cov, strip = strip_coverage(query, item.title, text)
        signals = {
            "injection": inj.score,
            "query_copy": copy.score,
            "stuffing": stuff.score,
            "framing": frame.score,
            "untrusted": trust.score,
            "coverage": round(cov, 4),
        }
        notes = {
            k: v
            for k, v in {
                "injection": inj.evidence,
                "query_copy": copy.evidence,
                "stuffing": stuff.evidence,
                "framing": frame.evidence,
                "untrusted": trust.evidence,
                "coverage": strip[:200],
            }.items()
            if v
        }
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
