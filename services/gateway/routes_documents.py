"""``/v1/documents``: ingest a batch, read a document's ingest state, delete one; all within the
caller's tenant, behind the ``ingest`` scope and the write ACL.

The write ACL: an ingest key may replace, delete or read the status of a document only if it may read
that document (its user, one of its groups or ``*`` is in the stored ACL). Without it any ingest key
of a tenant could overwrite HR's salary bands with text of its choosing, or learn that they exist. A
document the caller may not read answers 404, as one that does not exist (a 403 would confirm it).
Keys with the ``admin`` scope manage every document of their tenant (its administrators; their
searches still follow the ACLs); a connector that writes restricted documents either carries the
groups it writes for or is an admin key.

Provenance: ``source`` and ``trust`` belong to the key, not the body. A key bound to a source
namespace (``rampart keys create --source``) writes only documents whose source lies under it; a
key's trust (``--trust untrusted``) is stamped on every document it writes; ``metadata.trust`` in a
request is refused, since a writer who chose its own trust could opt out of the fact-check's stricter
bar for untrusted sources.
"""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request
from fastapi.concurrency import run_in_threadpool

from services.api.schemas import (
    DeleteResponse,
    DocumentIn,
    DocumentStatusOut,
    IngestRequest,
    IngestResponse,
)
from services.common.errors import ErrorCode, RampartError
from services.common.otel import current_trace_id
from services.common.types import DocumentStatus, Principal
from services.gateway.access import Access, Caller, require
from services.gateway.audit import AuditEvent, AuditSink
from services.gateway.backends import GatewayBackends
from services.gateway.errors import ERROR_RESPONSES
from services.ingest.service import Outcome


def may_manage(who: Principal, status: DocumentStatus) -> bool:
    """The caller may replace, delete or see the state of the stored document: it may read it (no ACL
    recorded: nothing was ever indexed to protect), or it is a tenant admin."""
    if "admin" in who.scopes or not status.readers:
        return True
    return bool(set(status.readers) & set(who.acl_tokens()))


def documents_router(backends: GatewayBackends, access: Access, audit: AuditSink) -> APIRouter:
    router = APIRouter(tags=["documents"], responses=ERROR_RESPONSES)
    max_batch = backends.settings.gateway.max_batch_documents

    async def readable(request: Request, c: Caller, action: str, doc_id: str) -> DocumentStatus | None:
        """The document's status if the caller may read it; 404 (audited as denied) if it may not."""
        st = await run_in_threadpool(backends.ingestor.status, c.principal.tenant, doc_id)
        if st is not None and not may_manage(c.principal, st):
            audit.record(event(request, c, action, "denied", [doc_id]))
            raise not_found(doc_id, c.principal.tenant)
        return st

    @router.post("/v1/documents", response_model=IngestResponse)
    async def ingest(
        body: IngestRequest, request: Request, c: Caller = Depends(access.caller("ingest"))
    ) -> IngestResponse:
        """Index a batch of documents (idempotent by id + version). One result per document.

        A document that already exists may be replaced only by a caller who may read it (else 404:
        the whole batch is refused)."""
        who = c.principal
        require(who, "ingest")
        if len(body.documents) > max_batch:
            raise RampartError(
                ErrorCode.PAYLOAD_TOO_LARGE,
                f"batch of {len(body.documents)} documents exceeds the limit of {max_batch}; split it",
            )
        docs = [stamp(d, c) for d in body.documents]
        statuses = await run_in_threadpool(
            lambda: [backends.ingestor.status(who.tenant, d.id) for d in docs]  # one thread hop
        )
        hidden = [st.id for st in statuses if st is not None and not may_manage(who, st)]
        if hidden:
            audit.record(event(request, c, "ingest", "denied", hidden))
            raise not_found(hidden[0], who.tenant)
        results = await run_in_threadpool(backends.ingestor.ingest, docs)
        response = IngestResponse(
            results=results,
            indexed=sum(r.outcome is Outcome.INDEXED for r in results),
            unchanged=sum(r.outcome is Outcome.UNCHANGED for r in results),
            failed=sum(r.outcome in (Outcome.FAILED, Outcome.REJECTED) for r in results),
        )
        done = event(request, c, "ingest", "ok", [d.id for d in docs])
        done.detail = f"indexed={response.indexed} unchanged={response.unchanged} failed={response.failed}"
        done.sources = sorted({d.source for d in docs if d.source})
        audit.record(done)
        return response

    @router.get("/v1/documents/{doc_id}/status", response_model=DocumentStatusOut)
    async def status(
        doc_id: str, request: Request, c: Caller = Depends(access.caller("status"))
    ) -> DocumentStatusOut:
        """Ingest state of a document in the caller's tenant that the caller may read (needs the
        ingest scope)."""
        require(c.principal, "ingest")
        st = await readable(request, c, "status", doc_id)
        if st is None:
            raise not_found(doc_id, c.principal.tenant)
        audit.record(event(request, c, "status", "ok", [doc_id]))
        return DocumentStatusOut.of(st)

    @router.delete("/v1/documents/{doc_id}", response_model=DeleteResponse)
    async def delete(
        doc_id: str, request: Request, c: Caller = Depends(access.caller("delete"))
    ) -> DeleteResponse:
        """Remove a document the caller may read from every index of the caller's tenant."""
        require(c.principal, "ingest")
        await readable(request, c, "delete", doc_id)
        deleted = await run_in_threadpool(backends.ingestor.delete, c.principal.tenant, doc_id)
        if not deleted:
            raise not_found(doc_id, c.principal.tenant)
        audit.record(event(request, c, "delete", "ok", [doc_id]))
        return DeleteResponse(id=doc_id, deleted=True)

    return router


def event(request: Request, c: Caller, action: str, outcome: str, ids: list[str]) -> AuditEvent:
    """The audit event of a document request by ``c``."""
    return AuditEvent(
        action=action,
        outcome=outcome,
        tenant=c.principal.tenant,
        user=c.principal.user,
        credential=c.credential,
        client=c.client,
        request_id=request.state.request_id,
        trace_id=current_trace_id(),
        doc_ids=ids,
    )


def not_found(doc_id: str, tenant: str) -> RampartError:
    return RampartError(
        ErrorCode.NOT_FOUND,
        f"no document {doc_id!r} that this key may read in tenant {tenant!r}; check the id, or use a key "
        "whose user or groups are in the document's ACL",
    )


def under_namespace(source: str, namespace: str) -> bool:
    """Whether ``source`` lies under ``namespace`` at a boundary: the namespace itself, or below it past a
    '/' (or right after its own ending '/', ':' or '#'). A bare prefix test would let the key of
    ``https://wiki.acme.example`` write ``https://wiki.acme.example.evil/…``."""
    if source == namespace:
        return True
    if namespace.endswith(("/", ":", "#")):
        return source.startswith(namespace)
    return source.startswith(namespace + "/")


def stamp(d: DocumentIn, c: Caller) -> DocumentIn:
    """The document as the caller's key may write it: its tenant, the key's source namespace and trust."""
    who = c.principal
    if d.tenant is not None and d.tenant != who.tenant:
        raise RampartError(
            ErrorCode.PERMISSION_DENIED,
            f"document {d.id!r} names tenant {d.tenant!r}, but this key belongs to tenant "
            f"{who.tenant!r}; omit tenant or use a key of that tenant",
        )
    if "trust" in d.metadata:
        raise RampartError(
            ErrorCode.INVALID_ARGUMENT,
            f"document {d.id!r} sets metadata.trust={d.metadata['trust']!r}; trust comes from the key, not the "
            "request: drop it, and create the writing key with `rampart keys create --trust untrusted` "
            "for an untrusted connector",
        )
    source = d.source
    if c.source is not None:
        if not source:
            source = c.source
        elif not under_namespace(source, c.source):
            raise RampartError(
                ErrorCode.PERMISSION_DENIED,
                f"document {d.id!r} has source {source!r}, outside this key's source namespace "
                f"{c.source!r}; send a source under it, or omit source",
            )
    metadata = {**d.metadata, "trust": c.trust} if c.trust else d.metadata
    return d.model_copy(update={"tenant": who.tenant, "source": source, "metadata": metadata})
