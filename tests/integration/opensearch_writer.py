"""One writer process of ``test_opensearch_writers.py``: ``python -m tests.integration.opensearch_writer
URL PREFIX WRITER WRITERS ROUNDS DOCS GO OUT``.

Opens the OpenSearch index under PREFIX, waits for the file GO, then writes ROUNDS batches of the same
DOCS (``d0``…) that every other writer writes too, at versions no other writer uses (``round * WRITERS
+ WRITER + 1``: later rounds are newer). Before each write it appends ``{"attempt": …}`` to OUT and after
it ``{"ok": …}`` or ``{"failed": …}`` (flushed and fsync'd, so a SIGKILL loses no line written).
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from services.common.errors import RampartError
from services.retrieval.config import OpenSearchSettings
from services.retrieval.opensearch_index import OpenSearchIndex
from tests.contracts.search_index import DIM, doc


def text(doc_id: str, writer: int, version: int, part: int) -> str:
    """Chunk text: the document's own token (``d0token``) and the writer and version that wrote it."""
    return f"{doc_id}token writer{writer} version{version} part{part}"


def main(argv: list[str]) -> int:
    url, prefix, writer, writers, rounds, docs, go, out = argv
    me, n, r, d = int(writer), int(writers), int(rounds), int(docs)
    ix = OpenSearchIndex.open(OpenSearchSettings(url=url, index_prefix=prefix, timeout_s=30.0), dim=DIM)
    log = Path(out).open("a")  # noqa: SIM115 - open for the process's life

    def record(line: dict[str, object]) -> None:
        log.write(json.dumps(line) + "\n")
        log.flush()
        os.fsync(log.fileno())

    record({"ready": me})
    while not Path(go).exists():
        time.sleep(0.02)
    try:
        for round_ in range(r):
            version = round_ * n + me + 1
            batch = [
                doc(f"d{i}", [text(f"d{i}", me, version, p) for p in range(2)], version=version)
                for i in range(d)
            ]
            record({"attempt": version})
            try:
                ix.write(batch)
                record({"ok": version, "docs": [b.doc_id for b in batch]})
            except RampartError as exc:
                failed = [str(x).split("/", 1)[1] for x in exc.details.get("failed", [])]
                conflicts = [str(x).split("/", 1)[1] for x in exc.details.get("conflicts", [])]
                record(
                    {
                        "failed": version,
                        "docs": failed,
                        "conflicts": conflicts,
                        "ok_docs": [b.doc_id for b in batch if b.doc_id not in failed],
                        "message": exc.message[:500],
                    }
                )
    finally:
        ix.close()
        log.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
