"""Ingest results <-> ``rampart.ingest.v1`` messages (documents and statuses: services/common/wire.py)."""

from __future__ import annotations

from rampart.ingest.v1 import ingest_pb2

from services.common.errors import invalid
from services.ingest.service import IngestResult, Outcome

_OUTCOMES = {
    Outcome.INDEXED: ingest_pb2.OUTCOME_INDEXED,
    Outcome.UNCHANGED: ingest_pb2.OUTCOME_UNCHANGED,
    Outcome.FAILED: ingest_pb2.OUTCOME_FAILED,
    Outcome.REJECTED: ingest_pb2.OUTCOME_REJECTED,
}
_BY_NUMBER = {number: outcome for outcome, number in _OUTCOMES.items()}


def result_to_pb(r: IngestResult) -> ingest_pb2.IngestResult:
    m = ingest_pb2.IngestResult(id=r.id, version=r.version, outcome=_OUTCOMES[r.outcome], chunks=r.chunks)
    if r.error is not None:
        m.error = r.error
    if r.code is not None:
        m.code = r.code
    return m


def result_from_pb(m: ingest_pb2.IngestResult) -> IngestResult:
    outcome = _BY_NUMBER.get(m.outcome)
    if outcome is None:
        raise invalid(f"ingest result outcome = {m.outcome} is not set or unknown", field="outcome")
    return IngestResult(
        id=m.id,
        version=m.version,
        outcome=outcome,
        chunks=m.chunks,
        error=m.error if m.HasField("error") else None,
        code=m.code if m.HasField("code") else None,
    )
