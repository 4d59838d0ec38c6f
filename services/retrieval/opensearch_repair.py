"""Crash repair of the OpenSearch index's writes (docs/opensearch.md, "Writes, crashes and repair").

A write takes several requests, and a process can die between any two. Each step leaves in the
document's entry what a repair needs to make the document its old version or its new one, never both:

1. ``pending``, with ``pending_cids`` (the ids the new chunks get), ``writer`` and ``lease_until``;
2. the new chunks;
3. documents with old chunks: the entry of the new version, still ``pending``, with ``stale_cids``
   (the old chunks) and no ``pending_cids``; then the old chunks deleted; then ``indexed``. Documents
   without old chunks go straight to ``indexed``; refused ones lose their new chunks, then turn
   ``failed``.

So an entry with ``stale_cids`` has every new chunk (roll forward: delete the stale ones, ``indexed``);
one with ``pending_cids`` may have some (roll back: delete them; the old chunks, untouched, stay
searchable; ``failed`` saying so); a ``pending`` one with neither was marked by ingest and never
written (``failed``). Deletes go first and the entry last, so a repair that dies is repeated whole.

Only a writer that is gone is repaired: a live one may be between its steps. Gone means no writer
recorded, its lease expired, or, in this host's process namespace, its process dead or (this process)
its index closed, or one of this index's own writes that ended without finishing (an error between
the steps). The lease covers a write's worst case under the configured timeouts and retries; writers
on other hosts are repaired only once it runs out.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import socket
import threading
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from services.common.processes import pid_alive
from services.common.types import DocumentState

# what a repair reads of an entry
ENTRY_FIELDS = (
    "tenant",
    "doc_id",
    "version",
    "state",
    "cids",
    "pending_cids",
    "stale_cids",
    "writer",
    "lease_until",
)
CLEARED: dict[str, Any] = {"pending_cids": [], "stale_cids": [], "writer": None, "lease_until": None}

_LIVE: set[str] = set()  # writers (open indexes) of this process
_LIVE_LOCK = threading.Lock()


def _namespace() -> str:
    """This host's process namespace: pids are comparable only inside one (same host, same boot,
    same pid namespace: two containers with one hostname still differ)."""
    parts = [socket.gethostname()]
    with contextlib.suppress(OSError):
        parts.append(Path("/proc/sys/kernel/random/boot_id").read_text().strip())
    with contextlib.suppress(OSError):
        parts.append(str(Path("/proc/self/ns/pid").readlink()))
    return hashlib.sha256("|".join(parts).encode()).hexdigest()[:12]


NAMESPACE = _namespace()


def new_writer() -> str:
    """A writer id for an opening index, registered as live in this process until :func:`retire`."""
    writer = f"{NAMESPACE}:{os.getpid()}:{uuid.uuid4().hex[:12]}"
    with _LIVE_LOCK:
        _LIVE.add(writer)
    return writer


def retire(writer: str) -> None:
    with _LIVE_LOCK:
        _LIVE.discard(writer)


def writer_gone(entry: Mapping[str, Any], *, me: str, inflight: set[str], key: str, now: float) -> bool:
    """Whether the writer that left ``entry`` unfinished can no longer finish it (module doc)."""
    writer = entry.get("writer")
    if not writer:
        return True
    lease = entry.get("lease_until")
    if lease is not None and float(lease) < now:
        return True
    if writer == me:
        return key not in inflight
    namespace, _, rest = str(writer).partition(":")
    pid_text, _, _ = rest.partition(":")
    if namespace != NAMESPACE or not pid_text.isdigit():
        return False  # another host: only its lease tells
    pid = int(pid_text)
    if pid == os.getpid():
        with _LIVE_LOCK:
            return writer not in _LIVE
    return not pid_alive(pid)


def unfinished(entry: Mapping[str, Any]) -> bool:
    """An entry a repair has something to do for."""
    return bool(
        entry.get("pending_cids")
        or entry.get("stale_cids")
        or entry.get("state") == DocumentState.PENDING.value
    )


@dataclass
class Plan:
    """What repairing some entries takes: chunks to delete, then entry updates (by ``_id``)."""

    deletes: list[int] = field(default_factory=list)
    updates: dict[str, dict[str, Any]] = field(default_factory=dict)
    forward: int = 0
    back: int = 0


def plan(entries: Mapping[str, Mapping[str, Any]], old_versions: Mapping[int, int], now: float) -> Plan:
    """The repair of ``entries`` (``_id`` → source); ``old_versions`` gives the version of a chunk in
    an entry's ``cids`` (for the message saying which version stays searchable)."""
    out = Plan()
    for key, e in entries.items():
        if e.get("stale_cids"):
            out.deletes += [int(c) for c in e["stale_cids"]]
            out.updates[key] = {
                **CLEARED,
                "state": DocumentState.INDEXED.value,
                "error": None,
                "updated_at": now,
            }
            out.forward += 1
            continue
        out.deletes += [int(c) for c in e.get("pending_cids") or []]
        out.updates[key] = {
            **CLEARED,
            "state": DocumentState.FAILED.value,
            "error": interrupted(int(e.get("version") or 0), e.get("cids") or [], old_versions),
            "updated_at": now,
        }
        out.back += 1
    return out


def interrupted(version: int, cids: Sequence[int], old_versions: Mapping[int, int]) -> str:
    old = next((old_versions[int(c)] for c in cids if int(c) in old_versions), None)
    if old is None:
        return f"ingest of version {version} was interrupted before it was indexed; send it again"
    return (
        f"ingest of version {version} was interrupted; version {old} is still searchable; "
        "send the new version again"
    )
