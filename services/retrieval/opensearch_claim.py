"""Concurrent writers of one OpenSearch index: claims on the documents' entries (docs/opensearch.md,
"Concurrent writers").

Several processes write one index — ingest workers, retrieval-service replicas — and a write of a
document takes several requests (:mod:`.opensearch_repair`). Two processes writing the same document
at once would each read its entry, write their own chunks and overwrite each other's entry: the loser's
chunks would stay searchable with no entry owning them, or an older version would end up over a newer
one. So every change of an entry is a **claim**: a conditional write of what was read
(``if_seq_no``/``if_primary_term``, or ``create`` where there was no entry). Of two processes that read
the same entry one lands; the other gets 409 and reads again. Then:

- an entry another **live** writer holds (its ``writer`` recorded, its lease running, its process alive
  on this host) is waited for, up to ``opensearch.claim_wait_s``, then refused as ``UNAVAILABLE`` naming
  that writer (durable ingest retries it);
- an entry a **gone** writer left unfinished is repaired first (the caller's repair), then read again;
- ``check`` may refuse an entry (a newer version is stored: ``CONFLICT``).

The claim returns each entry's new ``_seq_no``/``_primary_term``; the write's later steps are
conditional on them, so a write whose lease ran out while another process took the document over fails
instead of overwriting it. Chunk ids come from one counter and are never reused, so deleting a crashed
write's chunks twice (two repairs racing) is harmless.

Usage (what :class:`~services.retrieval.opensearch_index.OpenSearchIndex` does)::

    claims = Claims(transport, "rampart-documents", me=writer, wait_s=120, repair=repair_keys)
    held, refused = claims.claim({key: fields}, check=newer_version(3))
    # held[key].seq_no / .primary_term: the condition of the next write of that entry
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from services.common.errors import ErrorCode, RampartError
from services.common.types import DocumentState
from services.retrieval.opensearch_repair import ENTRY_FIELDS, unfinished, writer_gone
from services.retrieval.opensearch_transport import Transport, item_reason

READ_FIELDS = (*ENTRY_FIELDS, "content_hash")
FIRST_WAIT_S = 0.05  # first poll of an entry another writer holds; doubles up to MAX_WAIT_S
MAX_WAIT_S = 1.0

Check = Callable[[str, dict[str, Any] | None], RampartError | None]


@dataclass(frozen=True)
class Held:
    """A claimed entry: as it was just before the claim (``None``: there was none) and the sequence
    number and primary term the claim left, which the next conditional write of it names."""

    before: dict[str, Any] | None
    seq_no: int
    primary_term: int


@dataclass
class _Round:
    held: dict[str, Held] = field(default_factory=dict)
    refused: dict[str, RampartError] = field(default_factory=dict)
    waiting: dict[str, str] = field(default_factory=dict)  # key -> the live writer holding it
    progressed: bool = False


def held_by_other(entry: Mapping[str, Any], key: str, *, me: str, now: float) -> bool:
    """Whether a writer other than ``me`` holds ``entry`` and may still finish it."""
    writer = entry.get("writer")
    if not writer or writer == me or not unfinished(entry):
        return False
    return not writer_gone(entry, me=me, inflight=set(), key=key, now=now)


def needs_repair(entry: Mapping[str, Any]) -> bool:
    """An entry with chunks of an unfinished write, which a claim over it would lose track of."""
    return bool(entry.get("pending_cids") or entry.get("stale_cids"))


def newer_version(version: int) -> Check:
    """Refuse to claim over a stored version newer than ``version`` (a deleted document takes any)."""

    def check(key: str, entry: dict[str, Any] | None) -> RampartError | None:
        if entry is None or entry.get("state") == DocumentState.DELETED.value:
            return None
        stored = int(entry.get("version") or 0)
        if stored <= version:
            return None
        return RampartError(
            ErrorCode.CONFLICT,
            f"version {version} of {entry.get('tenant')}/{entry.get('doc_id')} is older than the stored "
            f"version {stored} (another writer got there first); send a version >= {stored}",
            stored=stored,
        )

    return check


def name(key: str, fields: Mapping[str, Any]) -> str:
    """tenant/document for messages (the entry's ``_id`` when the fields do not say)."""
    if "tenant" in fields and "doc_id" in fields:
        return f"{fields['tenant']}/{fields['doc_id']}"
    return key


class Claims:
    """Claims on the entries of one documents index, for one writer (module doc)."""

    def __init__(
        self,
        transport: Transport,
        alias: str,
        *,
        me: str,
        wait_s: float,
        repair: Callable[[list[str]], object],
    ) -> None:
        self.t = transport
        self.alias = alias
        self.me = me
        self.wait_s = wait_s
        self._repair = repair

    def read(self, keys: Sequence[str]) -> dict[str, tuple[dict[str, Any], int, int]]:
        return self.t.mget_versioned(self.alias, keys, READ_FIELDS)

    def claim(
        self, wanted: Mapping[str, dict[str, Any]], *, check: Check | None = None, what: str = "claim"
    ) -> tuple[dict[str, Held], dict[str, RampartError]]:
        """Write ``wanted[key]`` (fields merged into the entry, or the new entry) to every key once
        nothing stands in the way; returns the claimed entries and the refused ones with why."""
        deadline = time.monotonic() + self.wait_s
        todo = dict(wanted)
        held: dict[str, Held] = {}
        refused: dict[str, RampartError] = {}
        delay = FIRST_WAIT_S
        while todo:
            r = self._round(todo, check, what)
            held |= r.held
            refused |= r.refused
            for key in (*r.held, *r.refused):
                todo.pop(key, None)
            if not todo:
                break
            if time.monotonic() >= deadline:
                for key, fields in todo.items():
                    refused[key] = self._timed_out(key, fields, r.waiting.get(key), what)
                break
            if not r.progressed:  # only waiting for other writers: poll with back-off
                time.sleep(min(delay, max(0.0, deadline - time.monotonic())))
                delay = min(delay * 2, MAX_WAIT_S)
        return held, refused

    def _round(self, todo: Mapping[str, dict[str, Any]], check: Check | None, what: str) -> _Round:
        """One read of the entries and one conditional bulk (after repairing what gone writers left)."""
        entries = self.read(list(todo))
        now = time.time()
        out = _Round()
        to_repair: list[str] = []
        lines: list[dict[str, Any]] = []
        order: list[tuple[str, dict[str, Any] | None]] = []
        for key, fields in todo.items():
            found = entries.get(key)
            entry = found[0] if found is not None else None
            if entry is not None and held_by_other(entry, key, me=self.me, now=now):
                out.waiting[key] = str(entry.get("writer"))
            elif entry is not None and needs_repair(entry):
                to_repair.append(key)
            elif check is not None and (err := check(key, entry)) is not None:
                out.refused[key] = err
            elif found is None:
                lines += [{"create": {"_index": self.alias, "_id": key}}, fields]
                order.append((key, entry))
            else:
                condition = {"if_seq_no": found[1], "if_primary_term": found[2]}
                lines += [{"update": {"_index": self.alias, "_id": key, **condition}}, {"doc": fields}]
                order.append((key, entry))
        if to_repair:
            self._repair(to_repair)
        out.progressed = bool(lines or to_repair)
        if not lines:
            return out
        for (key, entry), item in zip(order, self.t.bulk(lines, what, refresh=False), strict=True):
            if "error" not in item:
                out.held[key] = Held(entry, int(item["_seq_no"]), int(item["_primary_term"]))
            elif item.get("status") != 409:  # 409: another process got there first: read again
                out.refused[key] = RampartError(
                    ErrorCode.UNAVAILABLE,
                    f"OpenSearch at {self.t.url} refused to {what} {name(key, todo[key])} "
                    f"({item_reason(item)}); send it again",
                    url=self.t.url,
                )
        return out

    def _timed_out(self, key: str, fields: Mapping[str, Any], writer: str | None, what: str) -> RampartError:
        who = name(key, fields)
        if writer is not None:
            return RampartError(
                ErrorCode.UNAVAILABLE,
                f"{who} is being written by another process (writer {writer}) and was still held after "
                f"{self.wait_s:.0f} s (RAMPART_OPENSEARCH__CLAIM_WAIT_S); send it again once that write "
                "finishes (durable ingest retries by itself)",
                writer=writer,
            )
        return RampartError(
            ErrorCode.UNAVAILABLE,
            f"could not {what} {who}: its entry kept changing (or could not be repaired) for "
            f"{self.wait_s:.0f} s (RAMPART_OPENSEARCH__CLAIM_WAIT_S); send it again",
        )
