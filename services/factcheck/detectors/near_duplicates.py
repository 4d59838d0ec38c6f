"""Near-duplicate cluster detector (TrustRAG's signal): several documents saying the same thing.

PoisonedRAG-style attacks plant several paraphrases of one false claim so that they fill the top of
the ranking. Independent documents rarely paraphrase each other that closely. We link two passages
from *different* documents when their embedding cosine is at least ``threshold`` and flag every
connected group spanning ``min_docs`` or more documents. Chunks of one document never link (a
document may repeat itself), so a cluster always means several sources pushing one text.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from services.factcheck.detectors import Signal


def cosine_matrix(vectors: np.ndarray) -> np.ndarray:
    """Pairwise cosine of the passages' embeddings, computed once per judged set."""
    v = np.asarray(vectors, dtype=np.float32)
    v = v / np.maximum(np.linalg.norm(v, axis=1, keepdims=True), 1e-12)
    sim: np.ndarray = v @ v.T
    return sim


def peer_similarity(doc_ids: Sequence[str], sim: np.ndarray) -> list[float]:
    """Each passage's highest cosine to a passage of another document (0 when alone): recorded with
    every verdict so thresholds can be audited and tuned."""
    n = len(doc_ids)
    if n < 2:
        return [0.0] * n
    other = np.array([[a != b for b in doc_ids] for a in doc_ids])
    masked = np.where(other, sim, -1.0)
    return [round(max(0.0, float(x)), 4) for x in masked.max(axis=1)]


def duplicate_clusters(
    doc_ids: Sequence[str],
    sim: np.ndarray,
    *,
    threshold: float,
    min_docs: int,
    join_threshold: float | None = None,
) -> list[Signal]:
    """One signal per passage: score = the highest cosine that tied it into a flagged cluster.

    ``join_threshold`` (below ``threshold``) adds hysteresis: once a cluster is flagged, a passage of
    another document at least that close to one of its members joins it (one step, no chaining).
    Planted paraphrases are not equally close to each other; the loosest of them would otherwise
    stay behind and carry the false claim alone.
    """
    n = len(doc_ids)
    if n == 0:
        return []
    parent = list(range(n))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for i in range(n):
        for j in range(i + 1, n):
            if doc_ids[i] != doc_ids[j] and sim[i, j] >= threshold:
                parent[find(i)] = find(j)
    groups: dict[int, list[int]] = {}
    for i in range(n):
        groups.setdefault(find(i), []).append(i)
    out = [Signal.none() for _ in range(n)]
    flagged: list[int] = []
    for members in groups.values():
        docs = {doc_ids[i] for i in members}
        if len(docs) < min_docs:
            continue
        for i in members:
            peers = [j for j in members if doc_ids[j] != doc_ids[i]]
            best = max(float(sim[i, j]) for j in peers)
            out[i] = Signal(
                round(min(1.0, max(0.0, best)), 4),
                f"one of {len(docs)} documents with near-identical content (cosine up to {best:.2f})",
            )
            flagged.append(i)
    if join_threshold is not None and flagged:
        core = set(flagged)
        for i in range(n):
            if i in core:
                continue
            links = [(float(sim[i, j]), j) for j in core if doc_ids[j] != doc_ids[i]]
            if not links:
                continue
            best, _ = max(links)
            if best >= join_threshold:
                out[i] = Signal(
                    round(min(1.0, best), 4),
                    f"close to a cluster of near-identical documents (cosine {best:.2f} to one of them)",
                )
    return out
