"""CRAG corrective retrieval against a real index and real secondary sources: another tenant's shared
corpus and a federated HTTP endpoint on loopback (answering, erroring, hanging, malformed)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from pydantic import SecretStr

from services.common.settings import RampartSettings
from services.common.types import Acl, Document, Principal
from services.factcheck.config import FactCheckSettings
from services.orchestrator.corrective.config import GradingSettings, SecondarySourceSettings
from services.orchestrator.corrective.grading import RetrievalGrader
from services.orchestrator.corrective.refine import KnowledgeRefiner
from services.orchestrator.corrective.retrieval import CorrectiveRetrieval
from services.orchestrator.corrective.rewrite_query import QueryRewriter
from services.orchestrator.corrective.secondary import HttpSource, SecondarySource, TenantSource
from services.orchestrator.plan import Grade
from services.orchestrator.runtime import Runtime
from services.rerank.reranker import Reranker
from services.retrieval.embedder import Embedder
from tests.integration.federated_endpoint import Endpoint

ALICE = Principal(tenant="acme", user="alice", groups=["eng"])
SHARED = {"kb-etna"}  # the only kb documents shared with everyone in that tenant

DOCS = [
    Document(
        id="acme-vpn",
        tenant="acme",
        acl=Acl(groups=["eng"]),
        title="VPN setup",
        text="Acme staff connect to the VPN gateway with WireGuard. The gateway rotates its keys monthly.",
    ),
    Document(
        id="acme-etna-trip",
        tenant="acme",
        acl=Acl(users=["dave"]),
        title="Executive trip",
        text="The Acme executive retreat climbs Mount Etna in May. Budget details are confidential.",
    ),
    Document(
        id="kb-etna",
        tenant="kb",
        acl=Acl(groups=["*"]),
        title="Mount Etna",
        text="Mount Etna is an active stratovolcano on the east coast of Sicily.\n"
        "Its summit stands about 3,357 metres above sea level.  It erupts often, mostly harmlessly.",
    ),
    Document(
        id="kb-etna-survey",
        tenant="kb",
        acl=Acl(groups=["geology"]),
        title="Mount Etna survey (restricted)",
        text="Restricted survey of Mount Etna: summit height 3,357 metres, magma chamber pressure rising.",
    ),
    Document(
        id="kb-etna-carol",
        tenant="kb",
        acl=Acl(users=["alice", "carol"]),  # a kb user named alice is not acme's alice
        title="Carol's Etna notes",
        text="Private notes on Mount Etna's summit height of 3,357 metres and the eng group's hiking plan.",
    ),
    Document(
        id="kb-etna-service",
        tenant="kb",
        acl=Acl(users=["rampart-secondary"]),  # naming the service user grants nothing: only "*" counts
        title="Etna service memo",
        text="Service memo: Mount Etna summit height monitoring, 3,357 metres, internal only.",
    ),
]

_exporter = InMemorySpanExporter()


@pytest.fixture(scope="module")
def rt(
    tmp_path_factory: pytest.TempPathFactory, models_dir: Path, embedder: Embedder, reranker: Reranker
) -> Iterator[Runtime]:
    settings = RampartSettings(
        data_dir=tmp_path_factory.mktemp("crag") / "data",
        models_dir=models_dir,
        log_level="WARNING",
        factcheck=FactCheckSettings(enabled=False),
    )
    runtime = Runtime.open(settings, embedder=embedder, reranker=reranker)
    results = runtime.ingest.ingest(DOCS)
    assert all(r.outcome.value == "indexed" for r in results), results
    yield runtime
    runtime.close()


@pytest.fixture(scope="module", autouse=True)
def spans() -> InMemorySpanExporter:
    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):
        provider = TracerProvider()
        trace.set_tracer_provider(provider)
    provider.add_span_processor(SimpleSpanProcessor(_exporter))
    return _exporter


def corrective(
    rt: Runtime, grading: GradingSettings, source: SecondarySource | None, embedder: Embedder
) -> CorrectiveRetrieval:
    return CorrectiveRetrieval(
        RetrievalGrader(grading, rt.settings.factcheck),
        KnowledgeRefiner(embedder, grading),
        QueryRewriter(None),
        grading,
        source,
    )


def primary(rt: Runtime, query: str) -> Any:
    return rt.search.search(query, ALICE, rt.search.params(top_k=5))


# always Incorrect / always Correct / always Ambiguous, whatever the score
INCORRECT = GradingSettings(correct_threshold=1.0, incorrect_threshold=1.0)
CORRECT = GradingSettings(correct_threshold=0.0, incorrect_threshold=0.0)
AMBIGUOUS = GradingSettings(correct_threshold=1.0, incorrect_threshold=0.0)


def test_tenant_source_reads_only_documents_shared_with_everyone(rt: Runtime) -> None:
    source = TenantSource(rt.search, "kb")
    seen: set[str] = set()
    for q in [
        "Mount Etna summit height",
        "restricted magma survey",
        "Carol private notes eng hiking",
        "service memo monitoring",
        "alice",
    ]:
        seen |= {h.chunk.doc_id for h in source.search(q, ALICE, 10)}
    assert seen == SHARED  # found, and nothing restricted to a group or a user of kb
    # the caller's own tenant is never searched through this path (its private docs stay private)
    assert TenantSource(rt.search, "acme").search("Mount Etna", ALICE, 10) == []


def test_incorrect_searches_the_other_tenant_and_refines_with_citations(
    rt: Runtime, embedder: Embedder
) -> None:
    crag = corrective(rt, INCORRECT, TenantSource(rt.search, "kb"), embedder)
    query = "How high is the summit of Mount Etna?"
    _exporter.clear()
    result = crag.run(query, ALICE, primary(rt, query), lambda q: primary(rt, q))
    assert result.grade is Grade.INCORRECT and result.action == "secondary"
    assert {h.chunk.doc_id for h in result.hits} == SHARED and set(result.origins) == {"tenant:kb"}
    assert result.rewritten_query and "Etna" in result.rewritten_query and result.degraded == []
    assert any("3,357 metres" in s.text for s in result.refined.strips)
    chunk = {h.chunk.chunk_id: h.chunk for h in result.hits}
    for s in result.refined.strips:  # each citation points at the cited text
        assert " ".join(chunk[s.chunk_id].text[s.start : s.end].split()) == s.text
    span = next(s for s in _exporter.get_finished_spans() if s.name == "rampart.crag")
    assert span.attributes is not None
    assert span.attributes["grade"] == "incorrect" and span.attributes["action"] == "secondary"


def test_correct_refines_the_primary_set_without_another_call(rt: Runtime, embedder: Embedder) -> None:
    crag = corrective(rt, CORRECT, TenantSource(rt.search, "kb"), embedder)
    query = "How do staff connect to the VPN gateway?"
    outcome = primary(rt, query)
    result = crag.run(query, ALICE, outcome, lambda q: pytest.fail("Correct makes no retrieval call"))
    assert result.action == "refine" and result.calls == 0 and result.secondary is None
    assert [h.chunk.chunk_id for h in result.hits] == [h.chunk.chunk_id for h in outcome.hits]
    assert result.refined.strips and result.refined.strips[0].doc_id == "acme-vpn"
    assert "WireGuard" in result.refined.text


def test_refinement_keeps_the_answering_sentence_under_the_budget(rt: Runtime, embedder: Embedder) -> None:
    hits = TenantSource(rt.search, "kb").search("Mount Etna height", ALICE, 5)
    query = "How tall is Mount Etna in metres?"
    full = KnowledgeRefiner(embedder, GradingSettings()).refine(query, hits)
    # document order: the opening sentence, the best one, then the filler above the score floor
    assert [s.text[:16] for s in full.strips] == ["Mount Etna is an", "Its summit stand", "It erupts often,"]
    tight = KnowledgeRefiner(embedder, GradingSettings(strip_chars=100)).refine(query, hits)
    assert sum(len(s.text) for s in tight.strips) <= 100 and "3,357 metres" in tight.strips[0].text
    assert tight.strips[0].score == max(s.score for s in full.strips)
    assert not any(s.text.startswith("Mount Etna is") for s in tight.strips)  # 67 more did not fit


@pytest.fixture()
def endpoint() -> Iterator[Endpoint]:
    e = Endpoint()
    yield e
    e.stop()


def http_source(endpoint: Endpoint, timeout_ms: int = 1500) -> HttpSource:
    return HttpSource(
        SecondarySourceSettings(
            kind="http", url=endpoint.url, api_key=SecretStr("sekret-token"), timeout_ms=timeout_ms, retries=1
        )
    )


def test_http_source_answers_and_is_marked(rt: Runtime, embedder: Embedder, endpoint: Endpoint) -> None:
    crag = corrective(rt, INCORRECT, http_source(endpoint), embedder)
    query = "What is the height of Mount Etna?"
    result = crag.run(query, ALICE, primary(rt, query), lambda q: primary(rt, q))
    assert result.action == "secondary" and result.degraded == []
    assert [h.chunk.doc_id for h in result.hits] == ["wiki-etna"]
    name = result.origins[0]
    assert name.startswith("http:127.0.0.1:") and result.hits[0].chunk.trust == "untrusted"
    assert result.refined.strips[0].origin == name and "3,357 m" in result.refined.text
    sent = endpoint.requests[0]
    assert sent["auth"] == "Bearer sekret-token"
    assert sent["body"]["principal"] == {"tenant": "acme", "user": "alice", "groups": ["eng"]}
    assert sent["body"]["query"] == result.rewritten_query


def test_http_500_degrades_to_primary_after_one_retry(
    rt: Runtime, embedder: Embedder, endpoint: Endpoint
) -> None:
    endpoint.mode = "500"
    crag = corrective(rt, AMBIGUOUS, http_source(endpoint), embedder)
    query = "How do staff connect to the VPN gateway?"
    outcome = primary(rt, query)
    result = crag.run(query, ALICE, outcome, lambda q: primary(rt, q))
    assert result.action == "both" and result.degraded == ["secondary"]
    assert set(result.origins) == {"primary"} and len(result.hits) == len(outcome.hits)
    assert len(endpoint.requests) == 2  # retries=1: 5xx is retried once, then given up


def test_http_timeout_degrades_without_hanging(rt: Runtime, embedder: Embedder, endpoint: Endpoint) -> None:
    endpoint.mode = "slow"
    crag = corrective(rt, INCORRECT, http_source(endpoint, timeout_ms=300), embedder)
    query = "How high is Mount Etna?"
    outcome = primary(rt, query)
    t0 = time.perf_counter()
    result = crag.run(query, ALICE, outcome, lambda q: primary(rt, q))
    assert time.perf_counter() - t0 < 2.0
    assert result.degraded == ["secondary"] and set(result.origins) == {"primary"}
    assert len(endpoint.requests) == 1  # a timeout is not retried


def test_malformed_reply_degrades(rt: Runtime, embedder: Embedder, endpoint: Endpoint) -> None:
    endpoint.mode = "junk"
    crag = corrective(rt, INCORRECT, http_source(endpoint), embedder)
    query = "How high is Mount Etna?"
    result = crag.run(query, ALICE, primary(rt, query), lambda q: primary(rt, q))
    assert result.degraded == ["secondary"] and set(result.origins) == {"primary"}


def test_unreachable_endpoint_degrades(rt: Runtime, embedder: Embedder, endpoint: Endpoint) -> None:
    source = http_source(endpoint)
    endpoint.stop()  # nothing listens on the port any more: connection refused, retried, given up
    crag = corrective(rt, INCORRECT, source, embedder)
    query = "How high is Mount Etna?"
    result = crag.run(query, ALICE, primary(rt, query), lambda q: primary(rt, q))
    assert result.degraded == ["secondary"]


def test_incorrect_without_a_source_searches_the_primary_again_when_asked(
    rt: Runtime, embedder: Embedder
) -> None:
    off = corrective(rt, INCORRECT, None, embedder)
    query = "Could you please tell me how staff connect to the VPN gateway?"
    called: list[str] = []

    def counting(q: str) -> Any:
        called.append(q)
        return primary(rt, q)

    skipped = off.run(query, ALICE, primary(rt, query), counting)
    assert called == [] and skipped.calls == 0 and skipped.action == "refine"  # the default: no re-search
    crag = corrective(rt, INCORRECT.model_copy(update={"research_primary": True}), None, embedder)
    query = "Could you please tell me how staff connect to the VPN gateway?"
    calls: list[str] = []

    def searcher(q: str) -> Any:
        calls.append(q)
        return primary(rt, q)

    result = crag.run(query, ALICE, primary(rt, query), searcher)
    assert result.action == "refine" and result.secondary is None and result.degraded == []
    assert calls == [result.rewritten_query] and result.calls == 1
    assert "please" not in calls[0] and "VPN" in calls[0]
    assert {h.chunk.tenant for h in result.hits} == {"acme"}


def test_http_results_are_fact_checked(rt: Runtime, embedder: Embedder, endpoint: Endpoint) -> None:
    endpoint.mode = "poison"
    grading = INCORRECT
    crag = CorrectiveRetrieval(
        RetrievalGrader(grading, rt.settings.factcheck),
        KnowledgeRefiner(embedder, grading),
        QueryRewriter(None),
        grading,
        http_source(endpoint),
        factcheck=rt.search.factcheck,
    )
    query = "How high is Mount Etna?"
    result = crag.run(query, ALICE, primary(rt, query), lambda q: primary(rt, q))
    assert [h.chunk.doc_id for h in result.hits] == ["wiki-etna"]
    assert [(j.doc_id, j.verdict.value) for j in result.filtered] == [("seo-etna", "adversarial")]
    assert "9,000" not in result.refined.text
