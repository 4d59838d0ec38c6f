"""``/v1/documents``: ingest a batch, read a document's ingest state, delete one; all within the
caller's tenant and behind the ``ingest`` scope."""

from __future__ import annotations

from fastapi import APIRouter, Depends
from fastapi.concurrency import run_in_threadpool

from services.api.schemas import DeleteResponse, IngestRequest, IngestResponse
from services.common.errors import ErrorCode, RampartError
from services.common.types import DocumentStatus, Principal
from services.gateway.access import Access, require
from services.gateway.backends import GatewayBackends
from services.gateway.errors import ERROR_RESPONSES
from services.ingest.service import Outcome


def documents_router(backends: GatewayBackends, access: Access) -> APIRouter:
    router = APIRouter(tags=["documents"], responses=ERROR_RESPONSES)
    max_batch = backends.settings.gateway.max_batch_documents

    @router.post("/v1/documents", response_model=IngestResponse)
    async def ingest(body: IngestRequest, who: Principal = Depends(access.principal)) -> IngestResponse:
        """Index a batch of documents (idempotent by id + version). One result per document."""
        require(who, "ingest")
        if len(body.documents) > max_batch:
            raise RampartError(
                ErrorCode.PAYLOAD_TOO_LARGE,
                f"batch of {len(body.documents)} documents exceeds the limit of {max_batch}; split it",
            )
        docs = []
        for d in body.documents:
            if d.tenant is not None and d.tenant != who.tenant:
                raise RampartError(
                    ErrorCode.PERMISSION_DENIED,
                    f"document {d.id!r} names tenant {d.tenant!r}, but this key belongs to tenant "
                    f"{who.tenant!r}; omit tenant or use a key of that tenant",
                )
            docs.append(d.model_copy(update={"tenant": who.tenant}))
        results = await run_in_threadpool(backends.ingestor.ingest, docs)
        return IngestResponse(
            results=results,
            indexed=sum(r.outcome is Outcome.INDEXED for r in results),
            unchanged=sum(r.outcome is Outcome.UNCHANGED for r in results),
            failed=sum(r.outcome in (Outcome.FAILED, Outcome.REJECTED) for r in results),
        )

    @router.get("/v1/documents/{doc_id}/status", response_model=DocumentStatus)
    async def status(doc_id: str, who: Principal = Depends(access.principal)) -> DocumentStatus:
        """Ingest state of a document in the caller's tenant (needs the ingest scope)."""
        require(who, "ingest")
        st = await run_in_threadpool(backends.ingestor.status, who.tenant, doc_id)
        if st is None:
            raise RampartError(ErrorCode.NOT_FOUND, f"no document {doc_id!r} in tenant {who.tenant!r}")
        return st

    @router.delete("/v1/documents/{doc_id}", response_model=DeleteResponse)
    async def delete(doc_id: str, who: Principal = Depends(access.principal)) -> DeleteResponse:
        """Remove a document from every index of the caller's tenant."""
        require(who, "ingest")
        deleted = await run_in_threadpool(backends.ingestor.delete, who.tenant, doc_id)
        if not deleted:
            raise RampartError(ErrorCode.NOT_FOUND, f"no document {doc_id!r} in tenant {who.tenant!r}")
        return DeleteResponse(id=doc_id, deleted=True)

    return router
