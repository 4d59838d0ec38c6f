"""The session fact graph of AdaptiveRAG (papers.md §4): entities seen in a conversation, linked.

``G_t = Update(G_{t-1}, entities(q_t), entities(results_t))``: every turn adds the query's and the top
results' entities as facts and links the query's entities to each other and to the results'. A fact's
relevance to a new query is ``alpha * sim(f, q) + (1 - alpha) * proximity(f)``, where proximity is the
inverse hop distance ``1 / (1 + hops)`` from the conversation's focus (the new query's own entities, or
the last turn's when the new query names none: "When was *he* born?"). The graph is plain data
(pydantic) so sessions serialise to Redis as JSON.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence

from pydantic import BaseModel, Field

from services.orchestrator.conversation.entities import entity_key

MAX_FACTS = 200  # per session: the oldest facts are forgotten first


class Fact(BaseModel):
    name: str
    first_turn: int
    last_turn: int
    mentions: int = 1
    in_query: bool = False  # the user named it (not only a result)


class FactGraph(BaseModel):
    turn: int = 0
    facts: dict[str, Fact] = Field(default_factory=dict)
    edges: dict[str, dict[str, int]] = Field(default_factory=dict)  # key -> neighbour key -> weight

    def update(self, query_entities: Sequence[str], result_entities: Sequence[str]) -> None:
        """Add one turn: its query's entities (linked to each other) and its results' (linked to those)."""
        self.turn += 1
        q = [self._touch(e, in_query=True) for e in query_entities]
        r = [self._touch(e, in_query=False) for e in result_entities]
        q = [k for k in q if k]
        r = [k for k in r if k]
        for i, a in enumerate(q):
            for b in q[i + 1 :]:
                self._link(a, b)
            for b in r:
                self._link(a, b)
        if not q:  # results of a query naming nothing still hang together
            for b in r[1:]:
                self._link(r[0], b)
        self._forget()

    def focus(self, query_entities: Sequence[str]) -> list[str]:
        """The keys proximity is measured from: the query's known entities, else the last turn's query
        entities, else everything the last turn added."""
        keys = [k for k in (entity_key(e) for e in query_entities) if k in self.facts]
        if keys:
            return keys
        last = [k for k, f in self.facts.items() if f.last_turn == self.turn]
        named = [k for k in last if self.facts[k].in_query]
        return named or last

    def proximity(self, anchors: Sequence[str]) -> dict[str, float]:
        """``1 / (1 + hops)`` from the nearest anchor (breadth-first); unreachable facts are absent."""
        hops: dict[str, int] = {a: 0 for a in anchors if a in self.facts}
        todo = deque(hops)
        while todo:
            k = todo.popleft()
            for n in self.edges.get(k, {}):
                if n not in hops:
                    hops[n] = hops[k] + 1
                    todo.append(n)
        return {k: 1.0 / (1 + h) for k, h in hops.items()}

    def ranked(
        self,
        query_entities: Sequence[str],
        similarity: Callable[[list[str]], list[float]],
        alpha: float,
    ) -> list[tuple[str, float]]:
        """Facts by relevance to the new query, best first: ``[(name, relevance)]``.

        ``similarity(names)`` gives each fact name's similarity to the query in [0, 1] (the embedder's
        cosine in production; one batched call)."""
        if not self.facts:
            return []
        prox = self.proximity(self.focus(query_entities))
        keys = list(self.facts)
        sims = similarity([self.facts[k].name for k in keys])
        scored = [
            (self.facts[k].name, alpha * s + (1 - alpha) * prox.get(k, 0.0))
            for k, s in zip(keys, sims, strict=True)
        ]
        return sorted(scored, key=lambda t: -t[1])

    # ---- internals -------------------------------------------------------------------------------
    def _touch(self, name: str, *, in_query: bool) -> str:
        key = entity_key(name)
        if not key:
            return ""
        fact = self.facts.get(key)
        if fact is None:
            self.facts[key] = Fact(name=name, first_turn=self.turn, last_turn=self.turn, in_query=in_query)
        else:
            fact.last_turn = self.turn
            fact.mentions += 1
            fact.in_query = fact.in_query or in_query
        return key

    def _link(self, a: str, b: str) -> None:
        if a == b:
            return
        self.edges.setdefault(a, {})[b] = self.edges.get(a, {}).get(b, 0) + 1
        self.edges.setdefault(b, {})[a] = self.edges.get(b, {}).get(a, 0) + 1

    def _forget(self) -> None:
        if len(self.facts) <= MAX_FACTS:
            return
        oldest = sorted(self.facts, key=lambda k: (self.facts[k].last_turn, self.facts[k].mentions))
        for k in oldest[: len(self.facts) - MAX_FACTS]:
            del self.facts[k]
            for n in self.edges.pop(k, {}):
                self.edges.get(n, {}).pop(k, None)
