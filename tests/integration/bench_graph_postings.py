"""Graph reads on each backend, one synthetic corpus: ``entity_postings`` for a walk's frontier and
a whole walk, embedded vs OpenSearch (a throw-away node started here, like the tests'). Figures in
docs/benchmarks.md ("The knowledge graph on each backend"). Not a test (not collected):

    PYTHONPATH=$PWD:$PWD/proto/gen .venv/bin/python -m tests.integration.bench_graph_postings
"""

from __future__ import annotations

import random
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from services.common.net import free_port
from services.common.types import Principal
from services.retrieval import opensearch_index
from services.retrieval.config import OpenSearchSettings
from services.retrieval.doc_store import DocumentWrite
from services.retrieval.embedded_index import EmbeddedIndex
from services.retrieval.graph.config import GraphSettings
from services.retrieval.graph.reads import GraphReads
from services.retrieval.graph.walk import walk
from services.retrieval.opensearch_index import OpenSearchIndex
from services.retrieval.opensearch_node import OpenSearchNode, build
from tests.contracts.search_index import DIM, doc

CHUNKS, KEYS, PER_CHUNK, FRONTIER, RUNS = 5_000, 2_000, 5, 256, 20
WHO = Principal(tenant="t1", user="u", groups=["g1"])


def corpus(rng: random.Random) -> list[DocumentWrite]:
    """Documents of one chunk, each mentioning PER_CHUNK keys drawn Zipf-like (a few hubs, a long
    tail), readable by one of three groups."""
    weights = [1.0 / (i + 1) for i in range(KEYS)]
    return [
        doc(
            f"d{i}",
            [f"tokd{i}"],
            groups=[rng.choice(["g1", "g2", "g3"])],
            entities=[tuple(dict.fromkeys(f"k{j}" for j in rng.choices(range(KEYS), weights, k=PER_CHUNK)))],
        )
        for i in range(CHUNKS)
    ]


def median_ms(run: Callable[[], object]) -> float:
    run()  # warm
    times = []
    for _ in range(RUNS):
        begin = time.perf_counter()
        run()
        times.append((time.perf_counter() - begin) * 1000)
    return statistics.median(times)


def measure(name: str, g: GraphReads, rng: random.Random) -> None:
    frontiers = [[f"k{rng.randrange(KEYS)}" for _ in range(FRONTIER)] for _ in range(RUNS + 1)]
    it = iter(frontiers)
    postings = median_ms(lambda: g.entity_postings(next(it), WHO, 201))
    settings = GraphSettings()

    def one_walk() -> object:
        seeds = g.entity_postings([f"k{rng.randrange(50, 500)}"], WHO, 201)
        return walk(seeds, lambda k: g.entity_postings(k, WHO, 201), g.chunk_entities, 2, settings)

    print(f"{name}: postings of {FRONTIER} keys {postings:.1f} ms, 2-hop walk {median_ms(one_walk):.1f} ms")


def main() -> None:
    docs = corpus(random.Random(7))
    with tempfile.TemporaryDirectory() as tmp:
        embedded = EmbeddedIndex.open(Path(tmp) / "embedded", dim=DIM)
        embedded.write(docs)
        measure("embedded", embedded, random.Random(1))
        embedded.close()
        build()
        node = OpenSearchNode(Path(tmp) / "node", free_port(), heap_mb=512)
        node.start()
        try:
            ix = OpenSearchIndex.open(OpenSearchSettings(url=node.url, index_prefix="bench"), dim=DIM)
            ix.write(docs)
            measure("opensearch (aggregation)", ix, random.Random(1))
            opensearch_index.POSTINGS_TOP_HITS = 0  # the alternative: one query per key, one multi-search
            measure("opensearch (multi-search)", ix, random.Random(1))
            ix.close()
        finally:
            node.stop()


if __name__ == "__main__":
    main()
