"""The samples row of ``rampart eval general``: samples/ parsed into a BEIR folder with its judgements."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from services.common.errors import RampartError
from services.evaluation.beir import load_beir
from services.evaluation.general import CLEAN_ROWS, SAMPLES
from services.evaluation.samples_row import JUDGED, SAMPLES_DIR, samples_as_beir


def test_samples_become_a_judged_beir_folder_parsed_like_ingest(tmp_path: Path) -> None:
    folder = samples_as_beir(SAMPLES_DIR, tmp_path)
    data = load_beir(folder, "test")
    judged = json.loads((SAMPLES_DIR / JUDGED).read_text())["queries"]
    assert len(data.queries) == len(judged) >= 30
    assert {d for q in data.qrels.values() for d in q} <= set(data.corpus)
    # every format goes through the ingest's parsers: PDF and DOCX text, HTML without its hidden parts
    assert "Payload" in data.corpus["acme/r7-technical-specification.pdf"].text
    assert "Lumen Vision" in data.corpus["acme/project-falcon-memo.docx"].text
    assert not any("LEAK" in d.text for d in data.corpus.values())
    assert {d.split("/")[0] for d in data.corpus} == {"acme", "globex"}
    assert samples_as_beir(SAMPLES_DIR, tmp_path) == folder  # built once per content
    assert [r.source for r in CLEAN_ROWS if r.name == "samples"] == [SAMPLES]


def test_a_judgement_of_a_missing_document_is_refused(tmp_path: Path) -> None:
    samples = tmp_path / "samples"
    shutil.copytree(SAMPLES_DIR / "globex", samples / "globex")
    bad = {"queries": [{"id": "q", "text": "fuel surcharge", "relevant": {"globex/nope.md": 2}}]}
    (samples / JUDGED).write_text(json.dumps(bad))
    with pytest.raises(RampartError, match=r"globex/nope\.md"):
        samples_as_beir(samples, tmp_path / "out")
    (samples / JUDGED).unlink()
    with pytest.raises(RampartError, match=r"judged-queries\.json not found"):
        samples_as_beir(samples, tmp_path / "out")
