"""Which stored chunks a principal may read, for the reads that name chunks by id (``Chunks``,
``StoredVectors``, ``Cosine``, ``CopyCosines`` over gRPC).

Searches apply the tenant and ACL filter inside the index. Reads by id did not: they trusted the
caller to pass only ids from its own searches, which holds in the process that owns the index and
not for whoever reaches the retrieval service's port (chunk ids are small integers, allocated in
order: anyone could walk them). So the service checks each id against the document's stored ACL
(``DocumentStatus.readers``, the write ACL's source too) and drops the others, as if not stored:
an unreadable id and a missing one look the same.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from services.common.types import Chunk, Principal
from services.retrieval.index import SearchIndex


def readable(index: SearchIndex, chunks: Mapping[int, Chunk], principal: Principal) -> set[int]:
    """The ids of ``chunks`` (as stored in ``index``) that ``principal`` may read: same tenant, and one
    of its ACL tokens among the document's readers. One status read per distinct document."""
    tokens = set(principal.acl_tokens())
    verdict: dict[tuple[str, str], bool] = {}
    out: set[int] = set()
    for cid, chunk in chunks.items():
        key = (chunk.tenant, chunk.doc_id)
        if key not in verdict:
            status = index.status(*key) if chunk.tenant == principal.tenant else None
            verdict[key] = status is not None and bool(tokens & set(status.readers))
        if verdict[key]:
            out.add(cid)
    return out


def readable_chunks(index: SearchIndex, cids: Sequence[int], principal: Principal) -> dict[int, Chunk]:
    """The stored chunks of ``cids`` that ``principal`` may read."""
    chunks = index.chunks(cids)
    allowed = readable(index, chunks, principal)
    return {cid: c for cid, c in chunks.items() if cid in allowed}


def readable_ids(index: SearchIndex, cids: Sequence[int], principal: Principal) -> list[int]:
    """``cids`` without those ``principal`` may not read (or that are not stored), in order."""
    allowed = readable_chunks(index, cids, principal)
    return [cid for cid in cids if cid in allowed]
