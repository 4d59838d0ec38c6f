"""Which side of the retrieval service each RPC belongs to, for per-method authorisation
(docs/security.md, "Who may call which service").

The retrieval service has two callers with disjoint needs: the orchestrator searches (hits, chunk
text, vectors), ingest keeps documents (write, delete, mark, and the status reads of its
bookkeeping). Each gets only its side, so one stolen certificate does not open both: the
orchestrator's cannot rewrite the index, ingest's cannot read every tenant's text. A few
descriptive RPCs both need (``Info``: the vector size; ``TokenLengths``; the two ``Stats``) stay
open to every allowed caller.

The classification is the API's, not a deployment's: which *identities* hold each side is a setting
(``retrieval_service.read_callers`` / ``write_callers``). Every method of the three services must be
listed here once; a new RPC left out fails ``tests/unit/test_caller_roles.py``, and one that slipped
through would fall back to ``allowed_callers``, the service's own gate.

Usage::

    GrpcServer(settings, name="retrieval", auth=auth, method_callers=method_callers(settings))
"""

from __future__ import annotations

from rampart.links.v1 import links_pb2
from rampart.retrieval.v1 import index_pb2, retrieval_pb2

from services.common.config import RetrievalServiceSettings
from services.common.service_auth import MethodCallers

_INDEX = index_pb2.DESCRIPTOR.services_by_name["IndexService"].full_name
_RETRIEVAL = retrieval_pb2.DESCRIPTOR.services_by_name["RetrievalService"].full_name
_LINKS = links_pb2.DESCRIPTOR.services_by_name["LinkService"].full_name


def _full(service: str, *methods: str) -> frozenset[str]:
    return frozenset(f"/{service}/{m}" for m in methods)


READS = (
    _full(_INDEX, "Bm25", "Dense", "Cosine", "StoredVectors", "CopyCosines", "Chunks")
    | _full(_RETRIEVAL, "Search")
    | _full(_LINKS, "Named")
)
"""Return hits, chunk text or vectors: the search path (the orchestrator)."""

WRITES = _full(_INDEX, "Write", "Delete", "Mark", "Status", "Current")
"""Change documents, or read the state ingest keeps them in: the document lifecycle (ingest)."""

SHARED = _full(_INDEX, "Info", "TokenLengths", "Stats") | _full(_RETRIEVAL, "Stats")
"""Describe the index without its contents: every allowed caller."""


def method_callers(settings: RetrievalServiceSettings) -> tuple[MethodCallers, ...]:
    """The narrower caller lists of the retrieval service's reads and writes, from ``settings``."""
    return (
        MethodCallers(READS, tuple(settings.read_callers), "RAMPART_RETRIEVAL_SERVICE__READ_CALLERS"),
        MethodCallers(WRITES, tuple(settings.write_callers), "RAMPART_RETRIEVAL_SERVICE__WRITE_CALLERS"),
    )
