"""The ``Ingestor`` contract (services/ingest/ingestor.py): what the gateway may rely on from ingest,
in-process or over gRPC, result for result. Subclass :class:`IngestorContract` in the implementation's
own test file and provide ``ingestor`` (tests/README.md)."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest

from services.common.errors import ErrorCode
from services.common.settings import RampartSettings
from services.common.types import Acl, Document, DocumentState
from services.gateway.config import GatewaySettings
from services.ingest.ingestor import Ingestor
from services.ingest.service import Outcome

MAX_DOCUMENT_BYTES = 20_000
LEAVE = "Parental leave at Acme is sixteen weeks, paid in full, for every new parent."
BADGES = "Visitor badges are issued at the front desk and must be returned by six in the evening."


def contract_settings(data_dir: Path, models_dir: Path) -> RampartSettings:
    return RampartSettings(
        data_dir=data_dir,
        models_dir=models_dir,
        log_level="WARNING",
        gateway=GatewaySettings(max_document_bytes=MAX_DOCUMENT_BYTES),
    )


def doc(doc_id: str, text: str, *, version: int = 1, tenant: str = "acme", **kw: object) -> Document:
    return Document(id=doc_id, tenant=tenant, acl=Acl(groups=["*"]), text=text, version=version, **kw)


class IngestorContract:
    """Every ``Ingestor`` keeps these promises: one result per document in order, idempotent by
    ``(id, version)``, per-document failures with their reason and code (too large: named after
    ``RAMPART_GATEWAY__MAX_DOCUMENT_BYTES``), tenant-scoped delete and status.

    Provide ``ingestor`` (class-scoped: the tests share one store and use ids of their own), set up
    with ``contract_settings`` or the same ``MAX_DOCUMENT_BYTES``.
    """

    @pytest.fixture(scope="class")
    @classmethod
    def ingestor(cls) -> Ingestor:
        raise NotImplementedError(
            f"{cls.__name__} must provide the ingestor fixture: the implementation under test, "
            f"with gateway.max_document_bytes = {MAX_DOCUMENT_BYTES} (tests/README.md)"
        )

    def test_ready(self, ingestor: Ingestor) -> None:
        ingestor.check_ready()

    def test_ingest_is_idempotent_by_id_and_version(self, ingestor: Ingestor) -> None:
        tag = type(self).__name__.lower()  # ids of this implementation's store
        a, b = f"leave-{tag}", f"badges-{tag}"
        first = ingestor.ingest([doc(a, LEAVE), doc(b, BADGES, metadata={"team": "ops", "trust": "low"})])
        assert [(r.id, r.outcome) for r in first] == [(a, Outcome.INDEXED), (b, Outcome.INDEXED)]
        assert all(r.chunks >= 1 and r.error is None for r in first)
        status = ingestor.status("acme", a)
        assert status is not None
        assert (status.state, status.version, status.chunks) == (DocumentState.INDEXED, 1, first[0].chunks)
        assert status.readers == ["g:*"]  # the stored ACL, which the gateway's write ACL reads

        again = ingestor.ingest([doc(a, LEAVE)])
        assert again[0].outcome is Outcome.UNCHANGED

        conflict = ingestor.ingest([doc(a, LEAVE + " Changed.")])
        assert conflict[0].outcome is Outcome.REJECTED
        assert conflict[0].code == ErrorCode.CONFLICT.value and "version 2" in (conflict[0].error or "")

        newer = ingestor.ingest([doc(a, LEAVE + " Changed.", version=2)])
        assert newer[0].outcome is Outcome.INDEXED
        stale = ingestor.ingest([doc(a, LEAVE, version=1)])
        assert stale[0].outcome is Outcome.REJECTED and stale[0].code == ErrorCode.CONFLICT.value
        assert ingestor.status("acme", a).version == 2  # type: ignore[union-attr]

    def test_per_document_failures_keep_their_reason(self, ingestor: Ingestor) -> None:
        tag = type(self).__name__.lower()  # ids of this implementation's store
        good = doc(f"ok-{tag}", BADGES)
        broken = Document(
            id=f"pdf-{tag}",
            tenant="acme",
            acl=Acl(users=["ann"]),
            content_base64=base64.b64encode(b"%PDF-1.4 this is not really a pdf").decode(),
            content_type="application/pdf",
        )
        huge = doc(f"huge-{tag}", "word " * (MAX_DOCUMENT_BYTES // 4))
        repeated = doc(f"ok-{tag}", LEAVE)
        not_base64 = Document(id=f"b64-{tag}", tenant="acme", acl=Acl(users=["ann"]), content_base64="%%%")
        results = ingestor.ingest([good, broken, huge, repeated, not_base64])
        assert [r.outcome for r in results] == [
            Outcome.INDEXED,
            Outcome.FAILED,
            Outcome.REJECTED,
            Outcome.REJECTED,
            Outcome.REJECTED,
        ]
        assert results[4].code == ErrorCode.INVALID_ARGUMENT.value and "base64" in (results[4].error or "")
        assert results[1].error and results[1].code
        assert results[2].code == ErrorCode.PAYLOAD_TOO_LARGE.value
        assert "MAX_DOCUMENT_BYTES" in (results[2].error or "")
        assert results[3].code == ErrorCode.INVALID_ARGUMENT.value
        failed = ingestor.status("acme", f"pdf-{tag}")
        assert failed is not None and failed.state is DocumentState.FAILED and failed.error
        assert ingestor.status("acme", f"huge-{tag}") is None  # rejected: nothing stored

    def test_binary_documents_round_trip(self, ingestor: Ingestor) -> None:
        tag = type(self).__name__.lower()  # ids of this implementation's store
        html = b"<html><head><title>Lockers</title></head><body><p>Lockers are emptied every Friday.</p></body></html>"
        d = Document(
            id=f"html-{tag}",
            tenant="acme",
            acl=Acl(groups=["*"]),
            content_base64=base64.b64encode(html).decode(),
            content_type="text/html",
            source="wiki/lockers.html",
        )
        assert ingestor.ingest([d])[0].outcome is Outcome.INDEXED
        assert ingestor.ingest([d])[0].outcome is Outcome.UNCHANGED  # same bytes, same hash, both sides

    def test_delete_and_status_are_tenant_scoped(self, ingestor: Ingestor) -> None:
        tag = type(self).__name__.lower()  # ids of this implementation's store
        ingestor.ingest([doc(f"gone-{tag}", BADGES), doc(f"gone-{tag}", BADGES, tenant="globex")])
        assert ingestor.delete("acme", f"gone-{tag}") is True
        assert ingestor.status("acme", f"gone-{tag}").state is DocumentState.DELETED  # type: ignore[union-attr]
        assert ingestor.status("globex", f"gone-{tag}").state is DocumentState.INDEXED  # type: ignore[union-attr]
        assert ingestor.delete("acme", f"gone-{tag}") is False
        assert ingestor.delete("acme", f"never-{tag}") is False
        assert ingestor.status("acme", f"never-{tag}") is None

    def test_empty_batch_is_a_no_op(self, ingestor: Ingestor) -> None:
        assert ingestor.ingest([]) == []
