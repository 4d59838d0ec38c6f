"""The retrieval service's per-method authorisation table and its settings (docs/security.md): every
RPC is classified once, the role lists stay inside the service's gate, and the policy refuses the
wrong side naming the setting that would admit it."""

from __future__ import annotations

import pytest
from pydantic import ValidationError
from rampart.links.v1 import links_pb2
from rampart.retrieval.v1 import index_pb2, retrieval_pb2

from services.common.config import RetrievalServiceSettings
from services.common.errors import ErrorCode
from services.common.service_auth import CallerPolicy
from services.retrieval.caller_roles import READS, SHARED, WRITES, method_callers


def served_methods() -> set[str]:
    services = [
        index_pb2.DESCRIPTOR.services_by_name["IndexService"],
        retrieval_pb2.DESCRIPTOR.services_by_name["RetrievalService"],
        links_pb2.DESCRIPTOR.services_by_name["LinkService"],
    ]
    return {f"/{s.full_name}/{m.name}" for s in services for m in s.methods}


def test_every_rpc_is_on_exactly_one_side() -> None:
    """A new RPC must be classified: left out, it would be open to every allowed caller."""
    assert served_methods() == READS | WRITES | SHARED
    assert not (READS & WRITES) and not (READS & SHARED) and not (WRITES & SHARED)


def policy(settings: RetrievalServiceSettings) -> CallerPolicy:
    return CallerPolicy(
        "retrieval",
        tuple(settings.allowed_callers),
        "RAMPART_RETRIEVAL_SERVICE__ALLOWED_CALLERS",
        method_callers(settings),
    )


WRITE = "/rampart.retrieval.v1.IndexService/Write"
CHUNKS = "/rampart.retrieval.v1.IndexService/Chunks"
STATS = "/rampart.retrieval.v1.IndexService/Stats"


def test_the_default_lists_give_each_caller_its_side() -> None:
    rules = policy(RetrievalServiceSettings())
    assert rules.refusal("orchestrator", CHUNKS) is None and rules.refusal("ingest", WRITE) is None
    assert rules.refusal("orchestrator", STATS) is None and rules.refusal("ingest", STATS) is None
    to_write = rules.refusal("orchestrator", WRITE)
    to_read = rules.refusal("ingest", CHUNKS)
    assert to_write is not None and to_write.code is ErrorCode.PERMISSION_DENIED
    assert to_write.details["setting"] == "RAMPART_RETRIEVAL_SERVICE__WRITE_CALLERS"
    assert to_read is not None and to_read.details["setting"] == "RAMPART_RETRIEVAL_SERVICE__READ_CALLERS"
    # a stranger is refused by the service's gate first, which names the gate's setting
    stranger = rules.refusal("gateway", STATS)
    assert stranger is not None
    assert stranger.details["setting"] == "RAMPART_RETRIEVAL_SERVICE__ALLOWED_CALLERS"
    assert rules.refusal(None, STATS) is not None


def test_a_star_role_admits_every_allowed_caller_and_a_star_gate_checks_nothing() -> None:
    shared_reads = policy(RetrievalServiceSettings(read_callers=["*"]))
    assert shared_reads.refusal("ingest", CHUNKS) is None
    assert shared_reads.refusal("orchestrator", WRITE) is not None
    open_gate = policy(RetrievalServiceSettings(allowed_callers=["*"]))
    assert open_gate.refusal("anyone", WRITE) is None and open_gate.refusal(None, CHUNKS) is None


def test_release_prefixed_names_must_be_set_in_every_list() -> None:
    """The chart's CNs are <release>-<component>: renaming the gate alone leaves the defaults outside."""
    with pytest.raises(ValidationError, match="RAMPART_RETRIEVAL_SERVICE__READ_CALLERS"):
        RetrievalServiceSettings(allowed_callers=["rampart-orchestrator", "rampart-ingest"])
    ok = RetrievalServiceSettings(
        allowed_callers=["rampart-orchestrator", "rampart-ingest"],
        read_callers=["rampart-orchestrator"],
        write_callers=["rampart-ingest"],
    )
    assert policy(ok).refusal("rampart-ingest", CHUNKS) is not None


@pytest.mark.parametrize("bad", [[" "], ["*", "ingest"]])
def test_a_bad_role_list_is_refused_with_the_fix(bad: list[str]) -> None:
    with pytest.raises(ValidationError, match="write_callers"):
        RetrievalServiceSettings(write_callers=bad)
