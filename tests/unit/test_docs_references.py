"""Every repository path the documentation names must exist.

README.md and docs/**/*.md point readers at files (`services/rerank/stage.py`, `docs/chain.md`,
`[journal](journal/README.md)`). When code moves or a document is renamed, such a pointer goes stale
silently; this test names each one that no longer leads anywhere, with the file and line that holds it.

What counts as a pointer: a token inside an inline code span that starts with one of the repository's
top-level folders below (read from the repository root) or is a bare lower-case ``name.md`` (a document
in docs/); and the target of every relative markdown link (read from the linking document's folder).
Globs (``services/*/README.md``) must match something and every alternative of a brace list
(``out-{a,b}.json``) must exist. Fenced code blocks are skipped: they hold shell sessions and layouts.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
ROOTS = ("services/", "docs/", "tests/", "proto/", "deploy/", "docker/", "terraform/", "samples/")

_FENCE = re.compile(r"^\s*(```|~~~)")
_CODE_SPAN = re.compile(r"(`+)(.+?)\1")
_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
_BARE_DOC = re.compile(r"^[a-z][a-z0-9-]*\.md$")
_BRACES = re.compile(r"\{([^{}]*)\}")
# a token ends at whitespace; these around it are prose or shell, not part of the path
_STRIP = "\"'()[],;!?"


def _documents() -> list[Path]:
    return [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]


def _prose_lines(path: Path) -> Iterator[tuple[int, str]]:
    """(line number, text) of every line outside fenced code blocks."""
    fenced = False
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if _FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            yield number, line


def _clean(token: str) -> str:
    """The path inside a token: no surrounding punctuation, no ``:line``, ``:name`` or ``::member``."""
    token = token.strip(_STRIP).rstrip(".:")
    token = token.split("::", 1)[0]
    token = re.sub(r"(\.\w+):(\d+(-\d+)?|[A-Za-z_]\w*)$", r"\1", token)
    return token.split("#", 1)[0]


def _is_repo_path(token: str) -> bool:
    if any(mark in token for mark in ("<", ">", "…", "...", "=")):
        return False  # a placeholder (`services/<stage>/config.py`) or an assignment, not a path
    return token.startswith(ROOTS) or bool(_BARE_DOC.match(token))


def _expand(pattern: str) -> list[str]:
    """Brace lists expanded: ``a-{x,y}.json`` → ``a-x.json``, ``a-y.json``."""
    match = _BRACES.search(pattern)
    if match is None:
        return [pattern]
    head, tail = pattern[: match.start()], pattern[match.end() :]
    return [p for option in match.group(1).split(",") for p in _expand(head + option + tail)]


def _exists(relative: str, base: Path) -> bool:
    """Whether a path (or every brace alternative of it, each possibly a glob) names something."""
    for option in _expand(relative):
        target = base / option
        if any(ch in option for ch in "*?["):
            if not any(base.glob(option)):
                return False
        elif not target.exists():
            return False
    return True


def _pointers(path: Path) -> Iterator[tuple[int, str, Path]]:
    """(line, path as written, the folder it is relative to) for every pointer in a document."""
    for number, line in _prose_lines(path):
        for span in _CODE_SPAN.finditer(line):
            for token in span.group(2).split():
                cleaned = _clean(token)
                if _is_repo_path(cleaned):
                    base = REPO / "docs" if _BARE_DOC.match(cleaned) else REPO
                    yield number, cleaned, base
        outside = _CODE_SPAN.sub("", line)
        for link in _LINK.finditer(outside):
            target = link.group(1)
            if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
                continue  # a URL or an anchor in the same page
            cleaned = _clean(target)
            if cleaned:
                yield number, cleaned, path.parent


def test_documents_exist() -> None:
    assert (REPO / "docs").is_dir() and len(_documents()) > 1


def test_every_path_the_docs_name_exists() -> None:
    missing = [
        f"{path.relative_to(REPO)}:{number}: {written}"
        for path in _documents()
        for number, written, base in _pointers(path)
        if not _exists(written, base)
    ]
    assert not missing, "the docs name paths that do not exist (fix the doc or the path):\n" + "\n".join(
        missing
    )


@pytest.mark.parametrize(
    ("written", "base", "expected"),
    [
        ("docs/architecture.md", REPO, True),
        ("services/*/README.md", REPO, True),
        ("docs/{architecture,retrieval}.md", REPO, True),
        ("docs/{architecture,no-such-page}.md", REPO, False),
        ("services/no_such_module.py", REPO, False),
    ],
)
def test_existence_check(written: str, base: Path, expected: bool) -> None:
    """The checker itself: globs must match something, every brace alternative must exist."""
    assert _exists(written, base) is expected


@pytest.mark.parametrize(
    ("line", "found"),
    [
        (
            "see `services/rerank/stage.py:12` and `docs/chain.md`.",
            ["services/rerank/stage.py", "docs/chain.md"],
        ),
        ("`RAMPART_DATA_DIR=/tmp/x rampart eval ../shared/data/scifact --json out/a.json`", []),
        ("`services/<stage>/config.py` will hold it", []),
        ("the `papers.md` list and [the index](journal/README.md#top)", ["papers.md", "journal/README.md"]),
        ("`tests/unit/test_fusion.py::test_minmax`", ["tests/unit/test_fusion.py"]),
        ("`services/common/grpc_client.py:error_from_rpc`", ["services/common/grpc_client.py"]),
    ],
)
def test_pointer_extraction(tmp_path: Path, line: str, found: list[str]) -> None:
    doc = tmp_path / "page.md"
    doc.write_text(f"# page\n\n{line}\n\n```\n`services/in_a_fence.py`\n```\n", encoding="utf-8")
    assert [written for _, written, _ in _pointers(doc)] == found
