"""Help text on every command, and the search output's notes (fallback, degraded, withheld)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.main import get_command
from typer.testing import CliRunner

from services.cli import ui
from services.cli.main import app, print_search
from services.common.errors import ErrorCode, RampartError
from services.common.settings import RampartSettings
from services.ingest.files import discover
from tests.conftest import flat

# what rich reads as a markup tag (and drops from --help): "[build]" vanished from "needs the [build] extra"
RICH_TAG = re.compile(r"(?<!\\)\[[a-z#/@][^\[\]]*\]")


def commands() -> Iterator[tuple[list[str], Any]]:
    """Every command and group of ``rampart``, with its path."""
    todo: list[tuple[list[str], Any]] = [([], get_command(app))]
    while todo:
        path, cmd = todo.pop()
        yield path, cmd
        if hasattr(cmd, "list_commands"):
            ctx = cmd.context_class(cmd)
            todo += [([*path, name], cmd.get_command(ctx, name)) for name in cmd.list_commands(ctx)]


def test_every_command_option_and_argument_has_help() -> None:
    seen = list(commands())
    assert len(seen) > 30  # the walk reached the subcommands
    for path, cmd in seen:
        name = " ".join(["rampart", *path])
        assert (cmd.help or "").strip(), f"{name} has no help text"
        texts = [cmd.help or ""]
        for p in cmd.params:
            if p.name == "help":
                continue
            help_text = getattr(p, "help", None) or ""
            assert help_text.strip(), f"{name}: {p.opts or p.name} has no help text"
            texts.append(help_text)
        for text in texts:
            assert not RICH_TAG.search(text), f"{name}: rich would drop {RICH_TAG.search(text)} from --help"


@pytest.mark.parametrize(
    "args", [[], ["models", "build"], ["keys"], ["keys", "list"], ["keys", "revoke"], ["ingest"], ["search"]]
)
def test_help_renders(args: list[str]) -> None:
    result = CliRunner().invoke(app, [*args, "--help"])
    assert result.exit_code == 0, result.output
    assert "Usage:" in result.output
    if args == ["models", "build"]:
        assert 'needs the "build" extra' in flat(result.output)


def response(**extra: Any) -> dict[str, Any]:
    hit = {
        "rank": 1,
        "doc_id": "handbook.md",
        "section_path": ["Welcome"],
        "scores": {"bm25": 3.0, "dense": 0.1},
        "fused": 0.8,
        "text": "Acme Robotics builds [robot] arms.",
        "verdict": {"verdict": "irrelevant", "score": 0.75, "reason": "off topic"},
    }
    unjudged = {**hit, "rank": 2, "doc_id": "other.md", "verdict": None}
    return {"query": "zebras", "results": [hit, unjudged], "degraded": [], "filtered": [], **extra}


def printed(body: dict[str, Any]) -> str:
    width = ui.out.width
    ui.out.width = 200  # one line per row: the assertions read whole phrases
    try:
        with ui.out.capture() as captured:
            print_search(body)
    finally:
        ui.out.width = width
    return flat(captured.get())


def test_search_table_shows_verdicts_and_text_verbatim() -> None:
    text = printed(response())
    assert "verdict" in text and "irrelevant 0.75" in text and "not judged" in text
    assert "[robot]" in text  # passage text is not read as markup
    assert "fallback" not in text and "degraded" not in text and "withheld" not in text


def test_search_table_title_is_the_query_verbatim() -> None:
    text = printed(response(query="release [/] freeze [bold]x"))  # used to raise MarkupError
    assert "release [/] freeze [bold]x" in text


def test_search_notes_fallback_degraded_and_withheld() -> None:
    filtered = [
        {"chunk_id": "a#0", "doc_id": "a", "verdict": "adversarial", "score": 0.9, "reason": "x"},
        {"chunk_id": "b#0", "doc_id": "b", "verdict": "irrelevant", "score": 0.9, "reason": "y"},
        {"chunk_id": "c#0", "doc_id": "c", "verdict": "irrelevant", "score": 0.9, "reason": "z"},
    ]
    text = printed(response(factcheck_fallback=True, degraded=["rerank", "factcheck"], filtered=filtered))
    assert "fact-check fallback" in text
    assert "degraded: skipped rerank, factcheck (results are unverified)" in text
    assert "3 passage(s) withheld by the fact-check (1 adversarial, 2 irrelevant)" in text


def test_server_hint_extends_only_the_index_in_use_error(tmp_path: Path) -> None:
    settings = RampartSettings(data_dir=tmp_path)
    locked = RampartError(
        ErrorCode.FAILED_PRECONDITION,
        "the index at /x is in use by another rampart process; stop it, or point RAMPART_DATA_DIR at another folder",
        path="/x",
    )
    hinted = ui.server_hint(locked, settings)
    assert hinted.message.startswith(locked.message) and hinted.details == {"path": "/x"}
    assert "--url http://127.0.0.1:8080" in hinted.message and "RAMPART_URL" in hinted.message
    other = RampartError(ErrorCode.FAILED_PRECONDITION, "something else")
    assert ui.server_hint(other, settings) is other


def test_discover_reports_what_it_skips(tmp_path: Path) -> None:
    (tmp_path / "a.md").write_text("x")
    (tmp_path / "a.md.meta.json").write_text("{}")
    (tmp_path / "b.bin").write_bytes(b"\x00")
    (tmp_path / "README").write_text("x")
    skipped: list[tuple[Path, str]] = []
    found = list(discover([tmp_path], on_skip=lambda f, why: skipped.append((f, why))))
    assert [f.name for _, f in found] == ["a.md"]
    assert sorted((f.name, why) for f, why in skipped) == [
        ("README", "unsupported file type (no extension)"),
        ("b.bin", "unsupported file type ('.bin')"),
    ]
