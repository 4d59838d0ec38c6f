"""Ingest: validate → parse → contextual chunks → embed (one batched call) → index.

Idempotent by ``(id, version)``: the same version with the same content is ``unchanged``; the same
version with different content is a conflict (bump the version); a lower version is ``stale``.
Every document accepted ends ``indexed`` or ``failed`` with a reason — per document, so one bad
file never sinks its batch. Parsing runs in a child process under a per-document time budget
(``parsing.timeout_s``, :mod:`services.ingest.parsing.isolated`): a document past it fails with
``deadline_exceeded``, and its failure is recorded like any other, so a restart never parses it again.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum

from pydantic import BaseModel

from services.common.errors import ErrorCode, RampartError
from services.common.tracing import stage_span
from services.common.types import Chunk, Document, DocumentState, ParsedDocument
from services.ingest.chunker import Chunker, build_chunker
from services.ingest.config import ChunkingSettings, ParsingSettings
from services.ingest.parsing import parse_bytes, parse_text
from services.ingest.parsing.isolated import IsolatedParser
from services.retrieval.doc_store import ChunkWrite, DocumentWrite
from services.retrieval.embedder import Embedder
from services.retrieval.graph.config import GraphSettings
from services.retrieval.graph.entities import EntityExtractor, NoExtractor, entity_text, open_extractor
from services.retrieval.index import SearchIndex

log = logging.getLogger(__name__)
# Index write failures a retry may cure (the index restarting, a write past its deadline).
TRANSIENT_WRITE = frozenset({ErrorCode.UNAVAILABLE, ErrorCode.DEADLINE_EXCEEDED})


class Outcome(StrEnum):
    INDEXED = "indexed"
    UNCHANGED = "unchanged"
    FAILED = "failed"
    REJECTED = "rejected"


class IngestResult(BaseModel):
    id: str
    version: int
    outcome: Outcome
    chunks: int = 0
    error: str | None = None
    code: str | None = None


@dataclass
class _Prepared:
    doc: Document
    content_hash: str
    parsed: ParsedDocument | None = None


def content_hash(doc: Document) -> str:
    """What makes two submissions of one version "the same": content, title, ACL, metadata, source."""
    h = hashlib.sha256()
    payload = doc.payload()
    h.update(payload.encode() if isinstance(payload, str) else payload)
    h.update(doc.model_dump_json(include={"title", "acl", "metadata", "source", "content_type"}).encode())
    return h.hexdigest()


class IngestService:
    def __init__(
        self,
        index: SearchIndex,
        embedder: Embedder,
        chunker: Chunker,
        *,
        max_document_bytes: int,
        claim_vectors: bool = True,
        parse_timeout_s: float = ParsingSettings().timeout_s,
        extractor: EntityExtractor | None = None,
    ) -> None:
        """``parse_timeout_s``: the parsing budget per document (``parsing.timeout_s``); 0 parses in this
        process, without a bound. ``extractor``: the knowledge graph's (each chunk's entities are stored
        with it); ``None`` stores none."""
        self.index = index
        self.embedder = embedder
        self.chunker = chunker
        self.max_document_bytes = max_document_bytes
        self.claim_vectors = claim_vectors
        self.extractor = extractor or NoExtractor()
        self._parser = IsolatedParser(parse_timeout_s) if parse_timeout_s > 0 else None
        # One batch at a time: the version check and the write must not interleave with another
        # batch's (v3 then v2 must never end with v2). Embedding saturates the cores anyway;
        # searches never take this lock.
        self._lock = threading.Lock()

    @classmethod
    def from_settings(
        cls,
        index: SearchIndex,
        embedder: Embedder,
        settings: ChunkingSettings,
        *,
        max_document_bytes: int,
        claim_vectors: bool,
        parsing: ParsingSettings | None = None,
        graph: GraphSettings | None = None,
    ) -> IngestService:
        """The one way to build the service: the chunker from ``chunking``, the parsing budget from
        ``parsing`` (default: its defaults); the document limit the gateway enforces
        (``gateway.max_document_bytes``) and whether the index keeps claim vectors
        (``index.claim_vectors``) come as values, set in those stages' settings; the entity extractor
        from ``graph`` (default: none, no graph)."""
        return cls(
            index,
            embedder,
            build_chunker(settings, embedder),
            max_document_bytes=max_document_bytes,
            claim_vectors=claim_vectors,
            parse_timeout_s=(parsing or ParsingSettings()).timeout_s,
            extractor=open_extractor(graph) if graph is not None else None,
        )

    def close(self) -> None:
        """Stop the parser process (the index is closed by whoever opened it)."""
        if self._parser is not None:
            self._parser.close()

    def ingest(
        self,
        docs: Sequence[Document],
        *,
        on_done: Callable[[IngestResult], None] | None = None,
        raise_unavailable: bool = False,
    ) -> list[IngestResult]:
        """Index a batch; returns one result per input document, in order.

        An index write that fails as UNAVAILABLE or DEADLINE_EXCEEDED marks the documents failed,
        unless ``raise_unavailable``: then it raises, for a caller that retries the batch (durable
        ingest: the journal keeps it, and re-running it is idempotent)."""
        with self._lock:
            return self._ingest(docs, on_done, raise_unavailable)

    def delete(self, tenant: str, doc_id: str) -> bool:
        """Remove a document; ordered with ingest batches so a delete is never undone by one in flight."""
        with self._lock:
            return self.index.delete(tenant, doc_id)

    def _ingest(
        self,
        docs: Sequence[Document],
        on_done: Callable[[IngestResult], None] | None,
        raise_unavailable: bool,
    ) -> list[IngestResult]:
        started = time.perf_counter()
        results: dict[int, IngestResult] = {}
        todo = self._admit_batch(docs, results)
        writes = self._chunk_all(todo, results)
        if writes:
            self._write(writes, results, raise_unavailable)
        ordered = [results[i] for i in range(len(docs))]
        if on_done is not None:
            for r in ordered:
                on_done(r)
        log.info(
            "ingest batch",
            extra={
                "documents": len(docs),
                "indexed": sum(r.outcome is Outcome.INDEXED for r in ordered),
                "failed": sum(r.outcome in (Outcome.FAILED, Outcome.REJECTED) for r in ordered),
                "ms": round((time.perf_counter() - started) * 1000, 1),
            },
        )
        return ordered

    def _admit_batch(
        self, docs: Sequence[Document], results: dict[int, IngestResult]
    ) -> list[tuple[int, _Prepared]]:
        """The batch's documents to index, by position; a repeated id, a rejection or an unchanged
        document gets its result in ``results`` instead.

        Admission marks each document ``pending``, which on a shared index (OpenSearch) holds it until
        the write: so the marks go in one global order, by (tenant, id), and two workers whose batches
        share documents can never each hold one the other waits for (a lock-order deadlock)."""
        todo: list[tuple[int, _Prepared]] = []
        seen: set[tuple[str, str]] = set()
        for i in sorted(range(len(docs)), key=lambda i: (docs[i].tenant, docs[i].id)):  # stable: first wins
            doc = docs[i]
            key = (doc.tenant, doc.id)
            if key in seen:
                results[i] = self._rejected(
                    doc, ErrorCode.INVALID_ARGUMENT, "document id repeated in one batch"
                )
                continue
            seen.add(key)
            prepared, rejection = self._admit(doc)
            if rejection is not None:
                results[i] = rejection
            elif prepared is not None:
                todo.append((i, prepared))
        return sorted(todo, key=lambda t: t[0])

    def _chunk_all(
        self, todo: list[tuple[int, _Prepared]], results: dict[int, IngestResult]
    ) -> list[tuple[int, Document, list[Chunk], str]]:
        """Parse and chunk each document; a failure is that document's result, never the batch's."""
        writes: list[tuple[int, Document, list[Chunk], str]] = []
        for i, p in todo:
            try:
                p.parsed = self._parse(p.doc)
                chunks = self.chunker.chunk(
                    p.doc.id,
                    p.doc.tenant,
                    p.parsed,
                    title=p.doc.title or p.parsed.title,
                    source=p.doc.source,
                    version=p.doc.version,
                )
                if not chunks:
                    raise RampartError(ErrorCode.INVALID_ARGUMENT, "no text to index after parsing")
                writes.append((i, p.doc, chunks, p.content_hash))
            except RampartError as exc:
                results[i] = self._fail(p.doc, exc.code, exc.message)
            except Exception as exc:  # a parser/chunker bug must not lose the rest of the batch
                log.exception("ingest failed", extra={"doc_id": p.doc.id, "tenant": p.doc.tenant})
                results[i] = self._fail(p.doc, ErrorCode.INTERNAL, f"{type(exc).__name__}: {exc}")
        return writes

    def _write(
        self,
        writes: list[tuple[int, Document, list[Chunk], str]],
        results: dict[int, IngestResult],
        raise_unavailable: bool,
    ) -> None:
        """Embed and write the chunked documents in one index write: all indexed, or all failed (a
        transient failure re-raised when ``raise_unavailable``)."""
        try:
            self._embed_and_write(writes)
            for i, doc, chunks, _ in writes:
                results[i] = IngestResult(
                    id=doc.id, version=doc.version, outcome=Outcome.INDEXED, chunks=len(chunks)
                )
        except Exception as exc:
            if raise_unavailable and isinstance(exc, RampartError) and exc.code in TRANSIENT_WRITE:
                raise
            log.exception("index write failed", extra={"documents": len(writes)})
            reason = exc.message if isinstance(exc, RampartError) else f"{type(exc).__name__}: {exc}"
            # an index that names the documents it refused (OpenSearch) indexed the others
            details = exc.details if isinstance(exc, RampartError) else {}
            named = set(details.get("failed") or [])
            conflicts = set(details.get("conflicts") or [])
            for i, doc, chunks, _ in writes:
                name = f"{doc.tenant}/{doc.id}"
                if named and name not in named:
                    results[i] = IngestResult(
                        id=doc.id, version=doc.version, outcome=Outcome.INDEXED, chunks=len(chunks)
                    )
                    continue
                code = ErrorCode.CONFLICT if name in conflicts else ErrorCode.UNAVAILABLE
                results[i] = self._fail(doc, code, f"index write failed: {reason}")

    def _admit(self, doc: Document) -> tuple[_Prepared | None, IngestResult | None]:
        try:
            payload = doc.payload()
        except ValueError as exc:
            return None, self._rejected(doc, ErrorCode.INVALID_ARGUMENT, str(exc))
        size = len(payload.encode()) if isinstance(payload, str) else len(payload)
        if size > self.max_document_bytes:
            return None, self._rejected(
                doc,
                ErrorCode.PAYLOAD_TOO_LARGE,
                f"document is {size} bytes, the limit is {self.max_document_bytes} "
                "(RAMPART_GATEWAY__MAX_DOCUMENT_BYTES); split it or raise the limit",
            )
        digest = content_hash(doc)
        current = self.index.current(doc.tenant, doc.id)
        if current is not None and current[2] is not DocumentState.DELETED:
            version, stored_hash, state = current
            if doc.version < version:
                return None, self._rejected(
                    doc,
                    ErrorCode.CONFLICT,
                    f"version {doc.version} is older than the stored version {version}; send a version "
                    f">= {version}",
                )
            if doc.version == version and state is DocumentState.INDEXED:
                if stored_hash == digest:
                    return None, IngestResult(id=doc.id, version=doc.version, outcome=Outcome.UNCHANGED)
                return None, self._rejected(
                    doc,
                    ErrorCode.CONFLICT,
                    f"version {version} is already indexed with different content; send version "
                    f"{version + 1} to replace it",
                )
        try:
            self.index.mark(doc.tenant, doc.id, doc.version, DocumentState.PENDING)
        except RampartError as exc:
            if exc.code is not ErrorCode.CONFLICT:  # the index is unreachable: the batch's caller retries
                raise
            # another process stored a newer version since the check above (a shared index)
            return None, self._rejected(doc, ErrorCode.CONFLICT, exc.message)
        return _Prepared(doc, digest), None

    def _parse(self, doc: Document) -> ParsedDocument:
        payload = doc.payload()
        with stage_span("rampart.ingest.parse", isolated=self._parser is not None):
            if self._parser is not None:
                if isinstance(payload, str):
                    return self._parser.parse_text(payload, doc.content_type or "text/plain")
                return self._parser.parse_bytes(
                    payload, filename=doc.source or None, content_type=doc.content_type
                )
            if isinstance(payload, str):
                return parse_text(payload, doc.content_type or "text/plain")
            return parse_bytes(payload, filename=doc.source or None, content_type=doc.content_type)

    def _embed_and_write(self, writes: list[tuple[int, Document, list[Chunk], str]]) -> None:
        flat = [c for _, _, chunks, _ in writes for c in chunks]
        texts = [c.indexed_text for c in flat]
        # claim vectors: the text alone, for near-copy detection (ChunkWrite); one batched call for both
        claims = [c.text for c in flat] if self.claim_vectors else []
        with stage_span("rampart.ingest.embed", chunks=len(texts), claim_vectors=bool(claims)):
            both = self.embedder.embed(texts + claims)
        vectors, claim_vectors = both[: len(texts)], both[len(texts) :]
        with stage_span("rampart.ingest.entities", chunks=len(texts)):
            entities = self.extractor.extract([entity_text(c) for c in flat])
        lengths = self.index.token_lengths(texts)  # one call for the batch: one RPC for a remote index
        row = 0
        batch: list[DocumentWrite] = []
        for _, doc, chunks, digest in writes:
            filled = []
            trust = str(doc.metadata.get("trust", ""))[:64]  # the fact-check's source-trust signal
            for c in chunks:
                c = c.model_copy(update={"trust": trust}) if trust else c
                claim = claim_vectors[row] if claims else None
                filled.append(ChunkWrite(c, lengths[row], vectors[row], claim, tuple(entities[row])))
                row += 1
            batch.append(
                DocumentWrite(
                    tenant=doc.tenant,
                    doc_id=doc.id,
                    version=doc.version,
                    content_hash=digest,
                    title=chunks[0].title if chunks else doc.title,
                    source=doc.source,
                    acl=doc.acl,
                    metadata=dict(doc.metadata),
                    chunks=filled,
                )
            )
        with stage_span("rampart.ingest.write", documents=len(batch)):
            self.index.write(batch)

    def _fail(self, doc: Document, code: ErrorCode, message: str) -> IngestResult:
        """The document's failed result; recording the state may fail too (the index went away),
        which must not turn the batch's per-document results into one exception."""
        try:
            self.index.mark(doc.tenant, doc.id, doc.version, DocumentState.FAILED, error=message)
        except RampartError as exc:
            log.warning("could not record a failed document", extra={"doc_id": doc.id, "reason": exc.message})
            message += f" (its failed state could not be recorded either: {exc.message})"
        return IngestResult(
            id=doc.id, version=doc.version, outcome=Outcome.FAILED, error=message, code=code.value
        )

    @staticmethod
    def _rejected(doc: Document, code: ErrorCode, message: str) -> IngestResult:
        """Refused before any state change: the stored document (if any) is untouched."""
        return IngestResult(
            id=doc.id, version=doc.version, outcome=Outcome.REJECTED, error=message, code=code.value
        )
