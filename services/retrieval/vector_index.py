"""Dense vectors in faiss, searched with an ID selector so the ACL filter is applied inside the search.

``flat`` (exact inner product; the default: exact and cheap up to a few hundred thousand chunks)
or ``hnsw``. HNSW in faiss cannot remove vectors, so deleted ids simply never appear in the selector
(the selector is always the set of live chunks the principal may read) and are dropped for real on
the next rebuild. The file is written to a temporary path and renamed, so a crash never leaves a torn
index; the store can rebuild it anyway.
"""

from __future__ import annotations

import importlib
import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

# faiss ships SWIG stubs that do not describe its Python API (numpy overloads); use it untyped.
faiss: Any = importlib.import_module("faiss")


class FaissVectorIndex:
    def __init__(
        self,
        path: Path,
        dim: int,
        *,
        kind: Literal["flat", "hnsw"] = "flat",
        hnsw_m: int = 32,
        ef_search: int = 128,
    ) -> None:
        self.path = path
        self.dim = dim
        self.kind = kind
        self._hnsw_m = hnsw_m
        self._ef_search = ef_search
        self._lock = threading.Lock()
        self._index = self._load() if path.exists() else self._empty()

    def _empty(self) -> Any:
        if self.kind == "hnsw":
            base = faiss.IndexHNSWFlat(self.dim, self._hnsw_m, faiss.METRIC_INNER_PRODUCT)
            base.hnsw.efSearch = self._ef_search
        else:
            base = faiss.IndexFlatIP(self.dim)
        return faiss.IndexIDMap2(base)

    def _load(self) -> Any:
        index = faiss.read_index(str(self.path))
        if index.d != self.dim:
            raise ValueError(
                f"vector index {self.path} has dimension {index.d}, the embedder gives {self.dim}; "
                "re-ingest into a fresh RAMPART_DATA_DIR (the embedding model changed)"
            )
        return index

    def reset(self) -> None:
        with self._lock:
            self._index = self._empty()

    @property
    def ntotal(self) -> int:
        return int(self._index.ntotal)

    def ids(self) -> set[int]:
        with self._lock:
            n = self._index.ntotal
            return set(faiss.vector_to_array(self._index.id_map)[:n].tolist()) if n else set()

    def add(self, cids: Sequence[int], vectors: npt.NDArray[np.float32]) -> None:
        if not len(cids):
            return
        with self._lock:
            self._index.add_with_ids(
                np.ascontiguousarray(vectors, dtype=np.float32), np.asarray(cids, dtype=np.int64)
            )

    def remove(self, cids: Sequence[int]) -> None:
        if not len(cids) or self.kind == "hnsw":
            return  # hnsw: excluded by the selector, compacted on rebuild
        with self._lock:
            self._index.remove_ids(np.asarray(cids, dtype=np.int64))

    def save(self) -> None:
        tmp = self.path.with_suffix(".tmp")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._lock:
            faiss.write_index(self._index, str(tmp))
        with open(tmp, "rb") as fh:
            os.fsync(fh.fileno())
        tmp.replace(self.path)

    def search(
        self, vector: npt.NDArray[np.float32], allowed: npt.NDArray[np.int64], limit: int
    ) -> list[tuple[int, float]]:
        """Top ``limit`` ``(cid, cosine)`` among ``allowed`` ids only (filter inside the search)."""
        return self.search_many(vector.reshape(1, -1), allowed, limit)[0]

    def search_many(
        self, vectors: npt.NDArray[np.float32], allowed: npt.NDArray[np.int64], limit: int
    ) -> list[list[tuple[int, float]]]:
        """:meth:`search` for each row of ``vectors`` in one faiss call (one selector, one scan)."""
        if limit <= 0 or allowed.size == 0 or self._index.ntotal == 0 or not len(vectors):
            return [[] for _ in range(len(vectors))]
        selector = faiss.IDSelectorBatch(allowed)
        if self.kind == "hnsw":
            params = faiss.SearchParametersHNSW(sel=selector, efSearch=self._ef_search)
        else:
            params = faiss.SearchParameters(sel=selector)
        k = min(limit, int(allowed.size))
        with self._lock:
            scores, ids = self._index.search(
                np.ascontiguousarray(vectors, dtype=np.float32), k, params=params
            )
        return [
            [(int(i), float(s)) for i, s in zip(row_ids, row_scores, strict=True) if i >= 0]
            for row_ids, row_scores in zip(ids, scores, strict=True)
        ]
