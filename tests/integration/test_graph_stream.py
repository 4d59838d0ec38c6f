"""The knowledge graph end to end on a runtime of each index backend, embedded and OpenSearch (real
embedder, real spaCy model, real index; OpenSearch: the session's node,
tests/integration/opensearch_server.py): ingest stores each chunk's entities, a search walks from
the query's entities to a passage that shares no word with it, and no entity or passage reaches a
principal through the graph that the index would not return to it."""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

import pytest

from services.common.settings import RampartSettings
from services.common.types import Acl, Document, Principal
from services.rerank.reranker import Reranker
from services.retrieval.embedded_index import EmbeddedIndex
from services.retrieval.embedder import Embedder
from services.retrieval.graph.stream import GraphStatus
from services.retrieval.hybrid import HybridRetriever
from services.retrieval.opensearch_index import OpenSearchIndex
from tests.integration.test_opensearch_index import runtime_on

ALICE = Principal(tenant="acme", user="alice", groups=["eng"])
BOB = Principal(tenant="acme", user="bob", groups=["hr"])
QUESTION = "Where was the director of Forbidden Ground born?"
GRAPH = {"bm25": 0.35, "dense": 0.35, "graph": 0.3}
DOCS = [
    ("film", ["*"], "Forbidden Ground is a 2013 war film directed by Adrian Powers."),
    ("powers", ["*"], "Adrian Powers grew up in Melbourne and studied at the Victorian College of the Arts."),
    ("secret", ["hr"], "Adrian Powers received a confidential payment from Orion Capital last spring."),
    ("orion", ["*"], "Orion Capital is an investment fund with offices in Sydney."),
    *[
        (f"other{i}", ["*"], f"Harbour Story {i} is a drama film directed by Maria Lopez {i}.")
        for i in range(8)
    ],
]


@pytest.fixture(params=["embedded", "opensearch"])
def runtime(
    request: pytest.FixtureRequest, settings: RampartSettings, embedder: Embedder, reranker: Reranker
) -> Iterator[Any]:
    """The same tests on each backend: the graph's promises (and its ACL) are the index's, so each
    index that serves the graph is held to them (the OpenSearch node starts only when asked for)."""
    with runtime_on(request, settings, "g", embedder=embedder, reranker=reranker) as rt:
        yield rt


def mentions(index: Any, key: str) -> int:
    """How many chunks mention ``key`` in the whole index, whoever may read them (the store itself,
    not a principal's read)."""
    if isinstance(index, EmbeddedIndex):
        return int(
            index.store._db.execute("SELECT COUNT(*) FROM mentions WHERE entity=?", [key]).fetchone()[0]
        )
    assert isinstance(index, OpenSearchIndex)
    body = {"query": {"term": {"entities": key}}}
    return int(index.client.count(index=index.chunks_alias, body=body)["count"])


def ingest(runtime: Any, docs: list[tuple[str, list[str], str]] = DOCS, version: int = 1) -> None:
    results = runtime.ingest.ingest(
        [
            Document(id=i, tenant="acme", title="", text=t, acl=Acl(groups=g), version=version)
            for i, g, t in docs
        ]
    )
    assert all(r.outcome == "indexed" for r in results), results


def graph_docs(runtime: Any, who: Principal, depth: int, query: str = QUESTION) -> list[str]:
    params = runtime.search.params(top_k=10, weights=GRAPH, graph_depth=depth)
    outcome = runtime.search.retriever.search(query, who, params)
    assert outcome.graph is not None
    chunks = runtime.search.retriever.index.chunks([c for c, _ in outcome.graph.hits])
    return sorted({c.doc_id for c in chunks.values()})


def test_the_walk_reaches_the_directors_page(runtime: Any) -> None:
    ingest(runtime)
    params = runtime.search.params(top_k=3, weights=GRAPH, graph_depth=2)
    outcome = runtime.search.retriever.search(QUESTION, ALICE, params)
    assert outcome.graph is not None and outcome.graph.status is GraphStatus.USED
    assert outcome.graph.linked == ["forbidden ground"]
    assert {"film", "powers"} <= {h.chunk.doc_id for h in outcome.hits}
    assert outcome.hits[0].scores.get("graph") is not None
    assert graph_docs(runtime, ALICE, 1) == ["film"]


def test_the_walk_never_crosses_a_passage_the_caller_may_not_read(runtime: Any) -> None:
    ingest(runtime)
    # Orion Capital is readable by both, but only the hr memo links it to the director
    assert "orion" not in graph_docs(runtime, ALICE, 3)
    assert "secret" not in graph_docs(runtime, ALICE, 3)
    assert {"secret", "orion"} <= set(graph_docs(runtime, BOB, 3))
    # an entity only an unreadable passage mentions is not known to the caller at all
    params = runtime.search.params(top_k=5, weights=GRAPH)
    outcome = runtime.search.retriever.search("What did Orion Capital pay for?", ALICE, params)
    assert outcome.graph is not None and outcome.graph.linked == ["orion capital"]
    assert graph_docs(runtime, ALICE, 3, "What did Orion Capital pay for?") == ["orion"]
    # a name only an unreadable passage mentions: no postings, nothing linked, the walk never starts
    ingest(runtime, [("deal", ["hr"], "Kestrel Dynamics quietly bought the payroll unit in Geneva.")])
    index, key = runtime.search.retriever.index, "kestrel dynamics"
    assert index.entity_postings([key], ALICE, 10) == {} and index.entity_postings([key], BOB, 10)
    asked = "What did Kestrel Dynamics buy?"
    outcome = runtime.search.retriever.search(asked, ALICE, runtime.search.params(top_k=5, weights=GRAPH))
    assert outcome.graph is not None and outcome.graph.status is GraphStatus.NO_ENTITY
    assert outcome.graph.linked == [] and outcome.graph.hits == []
    outcome = runtime.search.retriever.search(asked, BOB, runtime.search.params(top_k=5, weights=GRAPH))
    assert outcome.graph is not None and outcome.graph.status is GraphStatus.USED
    assert outcome.graph.linked == [key]


def test_delete_and_replace_remove_the_old_edges(runtime: Any) -> None:
    ingest(runtime)
    assert runtime.ingest.delete("acme", "powers")
    assert "powers" not in graph_docs(runtime, ALICE, 2)
    ingest(
        runtime, [("film", ["*"], "Forbidden Ground is a 2013 war film directed by Nora Vance.")], version=2
    )
    index = runtime.search.retriever.index
    assert "adrian powers" not in index.entity_postings(["adrian powers"], ALICE, 10)
    memo = index.entity_postings(["adrian powers"], BOB, 10)["adrian powers"]
    assert [c.doc_id for c in index.chunks(memo).values()] == ["secret"]  # the hr memo
    assert index.entity_postings(["nora vance"], ALICE, 10)
    assert mentions(index, "adrian powers") == 1  # the hr memo's mention only: none left behind
    assert runtime.ingest.delete("acme", "secret") and mentions(index, "adrian powers") == 0


def test_without_a_graph_the_search_says_so(runtime: Any) -> None:
    ingest(runtime)
    plain = HybridRetriever(runtime.search.retriever.index, runtime.search.retriever.embedder)
    outcome = plain.search(QUESTION, ALICE, runtime.search.params(top_k=3, weights=GRAPH))
    assert outcome.graph is not None and outcome.graph.status is GraphStatus.NO_GRAPH
    assert "graph" in outcome.degraded and outcome.hits
    named_nothing = runtime.search.retriever.search(
        "what is the leave policy", ALICE, runtime.search.params(top_k=3, weights=GRAPH)
    )
    assert named_nothing.graph is not None and named_nothing.graph.status is GraphStatus.NO_ENTITY
    assert "graph" not in named_nothing.degraded


NAMES = ["Adrian Powers", "Orion Capital", "Maria Lopez", "Nora Vance", "Falcon Works", "Delta Harbour"]
GROUPS = ["g1", "g2", "g3"]


@pytest.mark.parametrize("seed", [3, 4])
def test_randomised_acl_on_the_graph(runtime: Any, seed: int) -> None:
    """Random tenants, ACLs and mentions; every walk's passages and linked names are readable."""
    rng = random.Random(seed)
    docs = []
    for i in range(30):
        names = rng.sample(NAMES, 2)
        docs.append(
            Document(
                id=f"d{i}",
                tenant=rng.choice(["acme", "globex"]),
                acl=Acl(groups=rng.sample([*GROUPS, "*"], rng.randint(1, 2))),
                title="",
                text=f"{names[0]} signed a contract with {names[1]} in March.",
            )
        )
    assert all(r.outcome == "indexed" for r in runtime.ingest.ingest(docs))
    index = runtime.search.retriever.index
    used = 0
    for _ in range(12):
        who = Principal(tenant=rng.choice(["acme", "globex"]), user="u", groups=rng.sample(GROUPS, 1))
        readable = {d.id for d in docs if d.tenant == who.tenant and {*who.groups, "*"} & set(d.acl.groups)}
        query = f"Who worked with {rng.choice(NAMES)}?"
        params = runtime.search.params(top_k=20, weights=GRAPH, graph_depth=3)
        outcome = runtime.search.retriever.search(query, who, params)
        assert outcome.graph is not None
        reached = {c.doc_id for c in index.chunks([c for c, _ in outcome.graph.hits]).values()}
        assert reached <= readable, (who, reached - readable)
        texts = " ".join(d.text.lower() for d in docs if d.id in readable)
        assert all(name in texts for name in outcome.graph.linked)
        used += outcome.graph.status is GraphStatus.USED
    assert used  # the property was exercised, not vacuous
