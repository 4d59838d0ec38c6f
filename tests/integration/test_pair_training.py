"""`rampart train pairs` end to end on a tiny two-hop set: the routed pipeline as served (real index,
MiniLM, cross-encoder, fact-check), examples from its verified heads, a fitted model and its card."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from services.cli.main import app
from services.orchestrator.chain.pair_order import PAIR_FEATURES, PairModel

# (film, actor, office, town): each question needs the film's page (it names the actor) and the actor's
FILMS = [
    ("Harbor Lights (1952 film)", "Marion Keller", "mayor", "Dunmore"),
    ("The Quiet Orchard", "Walter Brandt", "state senator", "Ohio"),
    ("Silver Creek Crossing", "Ada Lindqvist", "ambassador", "Norway"),
    ("Night Train to Lisbon (1961 film)", "Hugo Ferreira", "governor", "Madeira"),
    ("A Season in Verona", "Clara Bianchi", "minister of culture", "Italy"),
    ("The Lantern Keeper", "Samuel Okafor", "member of parliament", "Lagos"),
]


def write_set(root: Path) -> Path:
    corpus, queries, qrels = [], [], ["query-id\tcorpus-id\tscore"]
    for i, (film, actor, office, place) in enumerate(FILMS):
        name = film.split(" (")[0]
        corpus.append({"_id": f"f{i}", "title": film, "text": f"{name} is a drama film starring {actor}."})
        corpus.append(
            {
                "_id": f"a{i}",
                "title": actor,
                "text": f"{actor} was an actor who later served as {office} of {place} for many years.",
            }
        )
        corpus.append(
            {"_id": f"r{i}", "title": f"{name} (novel)", "text": f"{name} is a novel adapted for the screen."}
        )
        queries.append(
            {"_id": f"q{i}", "text": f"What office did the actor who starred in {name} hold later?"}
        )
        qrels += [f"q{i}\tf{i}\t1", f"q{i}\ta{i}\t1"]
    root.mkdir(parents=True)
    (root / "corpus.jsonl").write_text("\n".join(json.dumps(d) for d in corpus) + "\n")
    (root / "queries.jsonl").write_text("\n".join(json.dumps(q) for q in queries) + "\n")
    (root / "qrels").mkdir()
    (root / "qrels" / "test.tsv").write_text("\n".join(qrels) + "\n")
    return root


def test_train_pairs_fits_a_model_from_the_routed_pipeline(tmp_path: Path, models_dir: Path) -> None:
    data = write_set(tmp_path / "films")
    env = {
        "RAMPART_DATA_DIR": str(tmp_path / "rd"),
        "RAMPART_MODELS_DIR": str(models_dir),
        "RAMPART_LOG_LEVEL": "WARNING",
    }
    out = tmp_path / "pairs"
    args = ["train", "pairs", "--data", str(data), "--query-split", "all", "--out", str(out)]
    result = CliRunner().invoke(app, [*args, "--folds", "2", "--cv-lams", "1"], env=env)
    assert result.exit_code == 0, result.output
    model = PairModel.load(out)
    assert model.manifest["dataset"] == "films" and model.manifest["examples"] == len(FILMS)
    assert model.manifest["with_pair"] >= 2  # both pages among each question's verified head
    assert list(model.manifest["features"]) == list(PAIR_FEATURES)
    card = (out / "MODEL_CARD.md").read_text()
    assert "rampart train pairs --data" in card and "| pair model, lam 1 (shipped) |" not in card
    assert "Cross-validation (2-fold" in card

    wide = {**env, "COLUMNS": "200"}  # the error box must not wrap the message
    refused = CliRunner().invoke(app, [*args[:4], "--query-split", "heldout", "--out", str(out)], env=wide)
    assert refused.exit_code == 2 and "never fit on heldout" in refused.output
