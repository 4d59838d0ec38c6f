"""Types the orchestration stages share: the route of a query, the CRAG grade, one retrieval call.

Every stage (router, chain, grader, answerer) is written against these, so the embedded pipeline,
``rampart eval`` and the Ray Serve deployment run the same code, and a remote retrieval client can
stand in for the in-process one (issue 6).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum

from services.retrieval.hybrid import SearchOutcome


class QueryType(StrEnum):
    """AdaptiveRAG's three types (papers.md §4)."""

    SIMPLE = "simple"  # one fact; answered without retrieval when an LLM is configured
    CONVERSATIONAL = "conversational"  # depends on earlier turns: rewrite with the history first
    COMPLEX = "complex"  # needs several pieces of evidence: chain-of-retrieval


class Complexity(StrEnum):
    """HyPA's three complexity levels (papers.md §2): they pick the retrieval parameters."""

    LOW = "low"
    MEDIUM = "medium"
    HIGH = "high"


@dataclass(frozen=True)
class Route:
    """What the router decided, with its confidence (the max class probability)."""

    type: QueryType
    complexity: Complexity
    confidence: float
    # class -> probability, for the response and the span; empty when a rule decided
    type_scores: dict[str, float] = field(default_factory=dict)
    complexity_scores: dict[str, float] = field(default_factory=dict)
    reason: str = ""


class Grade(StrEnum):
    """CRAG's three grades of a retrieved set (papers.md §3)."""

    CORRECT = "correct"
    AMBIGUOUS = "ambiguous"
    INCORRECT = "incorrect"


Searcher = Callable[[str], SearchOutcome]
"""One retrieval call: a query in, reranked hits out, with the caller's principal, ACL filter and
per-route parameters already bound. Chains and corrective search call it once per (sub-)query, so
``calls`` counts retrieval calls the same way everywhere."""
