"""Deterministic query splits for datasets that ship one judged split (HotpotQA-500's ``test``).

Models may train on the ``train`` half and are reported on ``heldout``; the assignment is a salted
hash of the query id, so it never depends on file order and every tool agrees on it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from typing import Literal

QuerySplit = Literal["all", "train", "heldout"]
_SALT = "rampart-query-split-v1"
HELDOUT_PERCENT = 50


def query_split_of(query_id: str) -> Literal["train", "heldout"]:
    """``heldout`` for ~HELDOUT_PERCENT% of ids, ``train`` for the rest."""
    bucket = int(hashlib.sha256(f"{_SALT}:{query_id}".encode()).hexdigest()[:8], 16) % 100
    return "heldout" if bucket < HELDOUT_PERCENT else "train"


def select_queries(query_ids: Iterable[str], split: QuerySplit) -> list[str]:
    """The ids of ``split`` in their given order (``all`` keeps every id)."""
    ids = list(query_ids)
    if split == "all":
        return ids
    return [q for q in ids if query_split_of(q) == split]
