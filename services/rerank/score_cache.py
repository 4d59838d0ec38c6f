"""LRU cache of reranker scores keyed by (model id, query, passage).

Cross-encoder calls dominate search latency on CPU, and the same (query, chunk) pairs recur: repeated
and paginated queries, the evaluation of several pipelines, fact-check re-scoring. Keys are hashes, so
the cache holds no document text; the model id is part of the key, so a hot-swapped model never
reads another model's scores.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Sequence

from cachetools import LRUCache


def _digest(text: str) -> bytes:
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest()


class ScoreCache:
    def __init__(self, maxsize: int) -> None:
        self._cache: LRUCache[tuple[str, bytes, bytes], float] = LRUCache(maxsize=max(1, maxsize))
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def get_many(self, model_id: str, query: str, passages: Sequence[str]) -> list[float | None]:
        q = _digest(query)
        keys = [(model_id, q, _digest(p)) for p in passages]
        with self._lock:
            out = [self._cache.get(k) for k in keys]
        found = sum(v is not None for v in out)
        self.hits += found
        self.misses += len(out) - found
        return out

    def put_many(self, model_id: str, query: str, passages: Sequence[str], scores: Sequence[float]) -> None:
        q = _digest(query)
        with self._lock:
            for p, s in zip(passages, scores, strict=True):
                self._cache[(model_id, q, _digest(p))] = float(s)

    def __len__(self) -> int:
        return len(self._cache)
