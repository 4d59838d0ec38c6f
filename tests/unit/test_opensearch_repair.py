"""Who may repair an unfinished OpenSearch write, and what the repair does to an entry
(services/retrieval/opensearch_repair.py; the crashes themselves run on a real node:
tests/integration/test_opensearch_repair.py)."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

from services.retrieval import opensearch_repair as repair


def entry(writer: str | None, lease: float = 2e9, **extra: Any) -> dict[str, Any]:
    return {"writer": writer, "lease_until": lease, **extra}


def gone(e: dict[str, Any], inflight: frozenset[str] = frozenset()) -> bool:
    return repair.writer_gone(e, me="me", inflight=set(inflight), key="k", now=1e9)


def test_a_writer_is_gone_when_its_process_its_index_or_its_lease_is() -> None:
    child = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    assert gone(entry(f"{repair.NAMESPACE}:{int(child.stdout)}:x"))  # a finished process on this host
    assert gone(entry(None))  # nobody recorded
    live = repair.new_writer()
    assert not gone(entry(live))  # an open index of this process
    repair.retire(live)
    assert gone(entry(live))  # ... closed
    assert not gone(entry("elsewhere:1:x"))  # another host: only its lease tells
    assert gone(entry("elsewhere:1:x", lease=1.0))
    assert not gone(entry("me"), inflight=frozenset({"k"}))  # this index, mid-write
    assert gone(entry("me"))  # this index, a write that ended unfinished


def test_plan_rolls_forward_with_stale_chunks_and_back_with_pending_ones() -> None:
    entries = {
        "fwd": {"state": "pending", "version": 2, "cids": [7, 8], "stale_cids": [1, 2], "pending_cids": []},
        "back": {"state": "pending", "version": 3, "cids": [4], "pending_cids": [9, 10]},
        "new": {"state": "pending", "version": 1, "cids": [], "pending_cids": [11]},
        "marked": {"state": "pending", "version": 5, "cids": [12]},
    }
    todo = repair.plan(entries, {4: 2, 12: 4}, now=1.0)
    assert sorted(todo.deletes) == [1, 2, 9, 10, 11]
    assert (todo.forward, todo.back) == (1, 3)
    assert todo.updates["fwd"]["state"] == "indexed" and todo.updates["fwd"]["stale_cids"] == []
    assert todo.updates["back"]["state"] == "failed"
    assert "version 3 was interrupted; version 2 is still searchable" in todo.updates["back"]["error"]
    assert "before it was indexed" in todo.updates["new"]["error"]
    assert "version 4 is still searchable" in todo.updates["marked"]["error"]
    assert all(u["writer"] is None and u["pending_cids"] == [] for u in todo.updates.values())
