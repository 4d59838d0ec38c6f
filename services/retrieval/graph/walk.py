"""Personalised PageRank over the passage-entity graph around a query's entities (HippoRAG, HyPA).

Why a walk and not a lookup: the passage a multi-hop question needs second often shares no word with
the question; it shares an entity with the passage it needs first ("the director of Forbidden
Ground" -> the film's page names the director -> the director's page). PageRank seeded on the
query's entities reaches it through that shared entity, and ranks passages that several seeds reach
above those one seed reaches.

The graph is built locally, hop by hop, from ACL-filtered reads (:mod:`services.retrieval.graph.reads`):
entities -> the passages mentioning them -> those passages' entities -> ..., ``depth`` passage hops.
Hubs (entities in more than ``hub_postings`` readable passages) are neither seeds nor bridges; each
hop expands at most ``frontier`` entities, rarest first, and the walk stops at ``max_passages``: time
and memory are bounded on any corpus and any query.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from services.retrieval.graph.config import GraphSettings

Postings = Callable[[Sequence[str]], dict[str, list[int]]]
EntitiesOf = Callable[[Sequence[int]], dict[int, list[str]]]


MASS_FLOOR = 1e-4
"""PageRank mass below this share of the best passage's counts as unreached. Mass falls by a factor
per hop (a passage two hops out holds a few percent of a seed passage's), so fusion gets the log of
the share, scaled to 0..1: one hop out is a step down, not a vanishing score that min-max would flatten
to nothing beside the seeds' passages."""


@dataclass(frozen=True)
class Walk:
    """A walk's passages (score 0..1, highest first: the log of their PageRank mass relative to the
    best one, :data:`MASS_FLOOR` = 0) and what it did, for the response and spans."""

    scores: list[tuple[int, float]]
    seeds: list[str]
    hops: int = 0
    entities: int = 0
    truncated: bool = False
    hubs: list[str] = field(default_factory=list)


def walk(
    seeds: dict[str, list[int]],
    postings: Postings,
    entities_of: EntitiesOf,
    depth: int,
    settings: GraphSettings,
) -> Walk:
    """PageRank over the local graph grown from ``seeds`` (key -> its readable passages, as
    ``postings`` returns them), ``depth`` passage hops out. Each seed restarts the walk in proportion
    to its specificity (1 / its passage count), so a rare name weighs more than a common one."""
    hub = settings.hub_postings
    post = {k: v for k, v in seeds.items() if 0 < len(v) <= hub}
    hubs = sorted(k for k, v in seeds.items() if len(v) > hub)
    if not post:
        return Walk([], [], hubs=hubs)
    nodes = dict(post)  # entity -> its passages (every entity in the graph)
    passages: set[int] = set()
    frontier = list(post)
    truncated = False
    hops = 0
    for hop in range(1, depth + 1):
        new = {c for k in frontier for c in nodes[k]} - passages
        room = settings.max_passages - len(passages)
        if len(new) > room:
            new, truncated = set(sorted(new)[:room]), True
        passages |= new
        hops = hop
        if hop == depth or not new or truncated:
            break
        frontier = _next_frontier(new, nodes, postings, entities_of, settings)
        if not frontier:
            break
    mentions = entities_of(sorted(passages))
    scores = _log_share(_pagerank(post, nodes, passages, mentions, settings))
    ranked = sorted(scores.items(), key=lambda kv: (-kv[1], kv[0]))[: settings.limit]
    return Walk(ranked, sorted(post), hops=hops, entities=len(nodes), truncated=truncated, hubs=hubs)


def _log_share(mass: dict[int, float]) -> dict[int, float]:
    """Each passage's ``log(mass / best) / -log(MASS_FLOOR) + 1``: 1 for the best, 0 at the floor;
    passages below the floor are dropped."""
    if not mass:
        return {}
    best = max(mass.values())
    span = -math.log(MASS_FLOOR)
    return {c: 1.0 + math.log(m / best) / span for c, m in mass.items() if m >= best * MASS_FLOOR}


def _next_frontier(
    new: set[int], nodes: dict[str, list[int]], postings: Postings, entities_of: EntitiesOf, s: GraphSettings
) -> list[str]:
    """The entities of passages ``new`` not yet in the graph, hubs dropped, rarest first, at most
    ``frontier``; their postings join ``nodes``."""
    mentioned = {k for keys in entities_of(sorted(new)).values() for k in keys} - set(nodes)
    if not mentioned:
        return []
    found = postings(sorted(mentioned))
    kept = sorted(
        (k for k, v in found.items() if 0 < len(v) <= s.hub_postings), key=lambda k: (len(found[k]), k)
    )
    kept = kept[: s.frontier]
    for k in kept:
        nodes[k] = found[k]
    return kept


def _pagerank(
    seeds: dict[str, list[int]],
    nodes: dict[str, list[int]],
    passages: set[int],
    mentions: dict[int, list[str]],
    s: GraphSettings,
) -> dict[int, float]:
    """Personalised PageRank on the bipartite entity-passage graph: ``x = d·p + (1-d)·Pᵀx`` with
    ``P`` the row-normalised adjacency and ``p`` the seeds' specificities."""
    entity_ids = {k: i for i, k in enumerate(sorted(nodes))}
    order = sorted(passages)
    base = len(entity_ids)
    passage_ids = {c: base + i for i, c in enumerate(order)}
    edges = [(entity_ids[k], passage_ids[c]) for c in order for k in mentions.get(c, ()) if k in entity_ids]
    if not edges:
        return {}
    pairs = np.asarray(edges, dtype=np.int64)
    src = np.concatenate([pairs[:, 0], pairs[:, 1]])
    dst = np.concatenate([pairs[:, 1], pairs[:, 0]])
    n = base + len(order)
    degree = np.bincount(src, minlength=n).astype(np.float64)
    restart = np.zeros(n)
    for k, cids in seeds.items():
        restart[entity_ids[k]] = 1.0 / len(cids)
    restart /= restart.sum()
    x = restart.copy()
    share = np.where(degree > 0, 1.0 / np.maximum(degree, 1.0), 0.0)
    for _ in range(s.iterations):
        spread = np.bincount(dst, weights=x[src] * share[src], minlength=n)
        x = s.damping * restart + (1.0 - s.damping) * spread
    return {c: float(x[passage_ids[c]]) for c in order if x[passage_ids[c]] > 0.0}
