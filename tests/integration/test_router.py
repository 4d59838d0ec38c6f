"""The query router end to end with the real MiniLM embedder: train a tiny one on synthetic queries,
save, load, classify; the low-confidence fallback; a missing artifact; the CLI train/eval pair."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from services.cli.main import app
from services.common.errors import RampartError
from services.common.settings import RampartSettings
from services.models.router_data import SourceQuestion, build_labelled, split_rows
from services.models.router_train import RouterTrainConfig, featurise, fit_router
from services.orchestrator.plan import Complexity, QueryType
from services.orchestrator.routing.config import RoutingSettings
from services.orchestrator.routing.features import CHEAP_FEATURES
from services.orchestrator.routing.router import LinearHead, QueryRouter, RouterWeights, build_router
from services.retrieval.embedder import Embedder
from tests.unit.test_router_data import write_data

PEOPLE = ["Ada Lovelace", "Alan Turing", "Grace Hopper", "Marie Curie", "Niels Bohr", "Emmy Noether"]
PLACES = ["Paris", "Lima", "Oslo", "Cairo", "Hanoi", "Quito", "Dublin", "Nairobi"]


def synthetic_sources() -> list[SourceQuestion]:
    out = []
    for i, (p, c) in enumerate((p, c) for p in PEOPLE for c in PLACES):
        q = PEOPLE[(i + 1) % len(PEOPLE)]
        kinds = [
            (f"what is the population of {c}", QueryType.SIMPLE, Complexity.LOW, (c,)),
            (
                f"Which university did the mentor of the scientist who lived in {c} attend after {p} left?",
                QueryType.COMPLEX,
                Complexity.HIGH,
                (p, c),
            ),
            (f"Who was born first, {p} or {q}?", QueryType.COMPLEX, Complexity.MEDIUM, (p, q)),
        ]
        for j, (text, qtype, cx, ents) in enumerate(kinds):
            out.append(
                SourceQuestion(
                    f"{i}-{j}", text, "", ents, cx, qtype, "synthetic", "train" if i % 4 else "heldout"
                )
            )
    return out


@pytest.fixture(scope="module")
def tiny_dir(embedder: Embedder, tmp_path_factory: pytest.TempPathFactory) -> Path:
    rows = split_rows(build_labelled(synthetic_sources(), seed=3), "train")
    weights = fit_router(
        rows,
        featurise(embedder, rows),
        RouterTrainConfig(),
        {"model_id": "tiny", "embedder_id": embedder.model_id},
    )
    return weights.save(tmp_path_factory.mktemp("router"))


def test_trained_router_saves_loads_and_routes(tiny_dir: Path, embedder: Embedder) -> None:
    assert {p.name for p in tiny_dir.iterdir()} == {"weights.npz", "manifest.json"}
    router = QueryRouter.from_dir(tiny_dir, embedder)
    simple = router.classify("what is the population of Lagos", [])
    assert (simple.type, simple.complexity) == (QueryType.SIMPLE, Complexity.LOW)
    assert simple.confidence >= 0.6 and set(simple.type_scores) == {t.value for t in QueryType}
    comparison = router.classify("Who was born first, Lise Meitner or Max Planck?", [])
    assert (comparison.type, comparison.complexity) == (QueryType.COMPLEX, Complexity.MEDIUM)
    history = ["Who was born first, Ada Lovelace or Alan Turing?"]
    follow = router.classify("when did she die?", history)
    assert follow.type == QueryType.CONVERSATIONAL
    assert follow.complexity == Complexity.MEDIUM  # the followed question's complexity
    assert "last history turn" in follow.reason
    batch = router.classify_many(["what is the population of Lagos", "when did she die?"], [[], history])
    assert [r.type for r in batch] == [simple.type, follow.type]
    assert batch[1].confidence == pytest.approx(follow.confidence, abs=1e-3)
    with pytest.raises(RampartError, match="one history per query"):
        router.classify_many(["a", "b"], [[]])


def test_low_confidence_routes_conversational(embedder: Embedder) -> None:
    n = len(CHEAP_FEATURES) + embedder.dim
    flat = RouterWeights(
        mean=np.zeros(len(CHEAP_FEATURES), np.float32),
        scale=np.ones(len(CHEAP_FEATURES), np.float32),
        embedding_scale=1.0,
        type_head=LinearHead(
            ("simple", "conversational", "complex"), np.zeros((3, n), np.float32), np.zeros(3, np.float32)
        ),
        complexity_head=LinearHead(
            ("low", "medium", "high"), np.zeros((3, n), np.float32), np.array([0, 0, 1], np.float32)
        ),
    )
    route = QueryRouter(flat, embedder, min_confidence=0.6).classify("what is the capital of France", [])
    assert route.type == QueryType.CONVERSATIONAL
    assert route.confidence == pytest.approx(1 / 3, abs=1e-3)
    assert "min_confidence" in route.reason
    assert route.complexity == Complexity.HIGH
    confident = QueryRouter(flat, embedder, min_confidence=0.3).classify("what is the capital of France", [])
    assert "min_confidence" not in confident.reason


def test_missing_artifact_names_models_build(tmp_path: Path, embedder: Embedder) -> None:
    settings = RampartSettings(
        models_dir=tmp_path / "models", routing=RoutingSettings(model_dir=tmp_path / "none")
    )
    with pytest.raises(RampartError, match="rampart models build"):
        build_router(settings.routing, embedder, settings.models_dir)
    assert build_router(RoutingSettings(enabled=False), embedder, settings.models_dir) is None


def test_router_refuses_another_embedder(tiny_dir: Path, embedder: Embedder) -> None:
    manifest = json.loads((tiny_dir / "manifest.json").read_text())
    weights = RouterWeights.load(tiny_dir)
    other = RouterWeights(
        weights.mean,
        weights.scale,
        weights.embedding_scale,
        weights.type_head,
        weights.complexity_head,
        {**manifest, "embedder_id": "bge-small@123"},
    )
    with pytest.raises(RampartError, match="train router"):
        QueryRouter(other, embedder)


def test_train_and_eval_cli(tmp_path: Path, models_dir: Path) -> None:
    data = write_data(tmp_path / "data", hotpot=30, nq=40)
    env = {
        "RAMPART_DATA_DIR": str(tmp_path / "rd"),
        "RAMPART_MODELS_DIR": str(models_dir),
        "RAMPART_LOG_LEVEL": "WARNING",
    }
    out = tmp_path / "router"
    runner = CliRunner()
    result = runner.invoke(app, ["train", "router", "--data", str(data), "--out", str(out)], env=env)
    assert result.exit_code == 0, result.output
    card = (out / "MODEL_CARD.md").read_text()
    assert "rampart train router --data" in card and "Confusion (type" in card
    report = tmp_path / "eval.json"
    result = runner.invoke(
        app,
        [
            "eval",
            "router",
            "--data",
            str(data),
            "--model-dir",
            str(out),
            "--latency-samples",
            "10",
            "--json",
            str(report),
        ],
        env=env,
    )
    assert result.exit_code == 0, result.output
    figures = json.loads(report.read_text())
    assert figures["split"] == "heldout" and figures["queries"] > 0
    assert set(figures["type"]["confusion"]) == {"simple", "conversational", "complex"}
    total = sum(sum(row.values()) for row in figures["type"]["confusion"].values())
    assert total == figures["queries"]
    assert 0.0 <= figures["type"]["accuracy"] <= 1.0 and figures["latency_ms_p50"] > 0
    missing = runner.invoke(
        app, ["eval", "router", "--data", str(data), "--model-dir", str(tmp_path / "nope")], env=env
    )
    assert missing.exit_code == 2 and "rampart models build" in missing.output
