"""Near-duplicate cluster detector (TrustRAG's signal): several documents saying the same thing.

PoisonedRAG-style attacks plant several paraphrases of one false claim so that they fill the top of
the ranking. Independent documents rarely paraphrase each other that closely. Passages of *different*
documents whose embeddings form a dense group (each near ``min_docs - 1`` others, see
:func:`duplicate_clusters`) are flagged when the group spans ``min_docs`` or more documents. Chunks
of one document never count for each other (a document may repeat itself), so a cluster always means
several sources pushing one text. The caller may pass more passages than it judges (the results just
below the judged ones): paraphrases ranked lower still vouch for the group.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from sklearn.cluster import DBSCAN

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
    apart: np.ndarray | None = None,
) -> list[Signal]:
    """One signal per passage: score = its highest cosine to another member of its flagged group.

    Density clustering (DBSCAN, cosine distance, ``eps = 1 - threshold``, ``min_samples = min_docs``):
    a passage with ``min_docs - 1`` passages of other documents within ``threshold`` is a core of a
    group, and every passage within ``threshold`` of a core belongs to it. Planted paraphrases are not
    all equally close to each other; the density view keeps the loosest of them in the group (single
    linkage at one threshold left them behind to carry the false claim alone) without chaining two
    genuine documents together through a third.
    """
    n = len(doc_ids)
    if n == 0:
        return []
    ids = np.asarray(doc_ids, dtype=object)
    dist = np.clip(1.0 - np.asarray(sim, dtype=np.float64), 0.0, 2.0)
    dist[ids[:, None] == ids[None, :]] = 2.0  # chunks of one document never vouch for each other
    if apart is not None:
        dist[np.asarray(apart, dtype=bool)] = 2.0
    np.fill_diagonal(dist, 0.0)
    labels = (
        DBSCAN(eps=max(1e-9, 1.0 - threshold), min_samples=min_docs, metric="precomputed").fit(dist).labels_
    )
    out = [Signal.none() for _ in range(n)]
    for label in set(labels.tolist()) - {-1}:
        members = [i for i in range(n) if labels[i] == label]
        docs = {doc_ids[i] for i in members}
        if len(docs) < min_docs:
            continue
        for i in members:
            best = max((float(sim[i, j]) for j in members if j != i and dist[i, j] < 2.0), default=0.0)
            out[i] = Signal(
                round(min(1.0, max(0.0, best)), 4),
                f"one of {len(docs)} documents with near-identical content (cosine up to {best:.2f})",
            )
    return out
