"""The embedded index survives a crash at any point of a write: nothing acknowledged is lost,
derived indexes are rebuilt from SQLite, and no document stays ``pending``."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from services.common.types import DocumentState, Principal
from services.retrieval.embedded_index import EmbeddedIndex
from tests.contracts.search_index import DIM, doc, vec

ALICE = Principal(tenant="t1", user="alice", groups=[])


def test_crash_after_sqlite_commit_is_repaired_on_open(tmp_path: Path) -> None:
    ix = EmbeddedIndex.open(tmp_path / "i", dim=DIM)
    ix.write([doc("kept", ["kept words"])])
    # Simulate dying right after the SQLite transaction: derived indexes never saw "lost".
    ix.store.write_documents([doc("lost", ["recovered words"])])
    ix.close()

    ix = EmbeddedIndex.open(tmp_path / "i", dim=DIM)
    try:
        assert ix.status("t1", "lost").state is DocumentState.INDEXED  # type: ignore[union-attr]
        found = {c.doc_id for c in ix.chunks([h[0] for h in ix.bm25("recovered", ALICE, 5)], ALICE).values()}
        assert found == {"lost"}
        assert ix.dense(vec("recovered words"), ALICE, 1)
    finally:
        ix.close()


def test_pending_without_chunks_becomes_failed_with_reason(tmp_path: Path) -> None:
    ix = EmbeddedIndex.open(tmp_path / "i", dim=DIM)
    ix.mark("t1", "half", 1, DocumentState.PENDING)
    ix.close()
    ix = EmbeddedIndex.open(tmp_path / "i", dim=DIM)
    try:
        st = ix.status("t1", "half")
        assert st is not None and st.state is DocumentState.FAILED
        assert "interrupted" in (st.error or "")
    finally:
        ix.close()


def test_interrupted_update_keeps_old_version_and_says_so(tmp_path: Path) -> None:
    ix = EmbeddedIndex.open(tmp_path / "i", dim=DIM)
    ix.write([doc("a", ["version one"])])
    ix.mark("t1", "a", 2, DocumentState.PENDING)  # v2 accepted, then the process died
    ix.close()
    ix = EmbeddedIndex.open(tmp_path / "i", dim=DIM)
    try:
        st = ix.status("t1", "a")
        assert st is not None and st.state is DocumentState.FAILED and "version 1" in (st.error or "")
        assert ix.bm25("version", ALICE, 5)  # v1 still served
    finally:
        ix.close()


CHILD = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from services.retrieval.embedded_index import EmbeddedIndex
    from tests.contracts.search_index import DIM, doc
    ix = EmbeddedIndex.open(Path(sys.argv[1]), dim=DIM)
    for i in range(100000):
        ix.write([doc(f"d{i}-{j}", [f"document {i} part {j} words"]) for j in range(5)])
        print(i, flush=True)  # acknowledged
    """
)


def test_sigkill_mid_ingest_loses_nothing_acknowledged(tmp_path: Path) -> None:
    root = tmp_path / "i"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(root)], stdout=subprocess.PIPE, text=True, env=env
    )
    assert proc.stdout is not None
    acked = -1
    deadline = time.monotonic() + 120
    while acked < 15 and time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        acked = int(line)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert acked >= 15, "the child never got going"

    ix = EmbeddedIndex.open(root, dim=DIM)
    try:
        truth = set(ix.store.all_cids().tolist())
        assert ix.bm25_index.all_cids() == truth
        assert truth <= ix.vectors.ids()
        assert not ix.store.pending_documents()
        for i in range(acked + 1):
            for j in range(5):
                st = ix.status("t1", f"d{i}-{j}")
                assert st is not None and st.state is DocumentState.INDEXED, (i, j, st)
    finally:
        ix.close()
