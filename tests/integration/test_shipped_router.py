"""The committed query router: small, installed by ``rampart models build``, and right on obvious
cases (a multi-hop question, a one-fact question, a pronoun follow-up)."""

from __future__ import annotations

from pathlib import Path

import pytest

from services.models.build import SHIPPED_ROUTER
from services.orchestrator.plan import Complexity, QueryType
from services.orchestrator.routing.router import QueryRouter
from services.retrieval.embedder import Embedder


@pytest.fixture(scope="module")
def shipped(embedder: Embedder) -> QueryRouter:
    return QueryRouter.from_dir(SHIPPED_ROUTER, embedder)


def test_artifact_is_small_with_card_and_figures() -> None:
    assert sum(f.stat().st_size for f in SHIPPED_ROUTER.iterdir()) <= 100 * 1024
    assert "rampart train router" in (SHIPPED_ROUTER / "MODEL_CARD.md").read_text()


def test_models_build_installs_it(models_dir: Path) -> None:
    installed = models_dir / "router"
    assert (installed / "weights.npz").is_file() and (installed / "manifest.json").is_file()


def test_routes_obvious_cases(shipped: QueryRouter) -> None:
    assert shipped.manifest["heldout_metrics"]["type"]["accuracy"] > 0.9
    multi = shipped.classify(
        "Which university did the author of the novel that inspired the film Blade Runner attend?", []
    )
    assert multi.type == QueryType.COMPLEX and multi.complexity == Complexity.HIGH
    simple = shipped.classify("what is the capital of France", [])
    assert simple.type == QueryType.SIMPLE and simple.complexity == Complexity.LOW
    follow = shipped.classify("when was she born?", ["Who wrote Frankenstein?"])
    assert follow.type == QueryType.CONVERSATIONAL


def test_bad_input_is_bounded(shipped: QueryRouter) -> None:
    route = shipped.classify("x" * 10_000, ["an earlier turn"] * 200)
    assert route.type in set(QueryType)
    assert shipped.classify("", []).type in set(QueryType)
