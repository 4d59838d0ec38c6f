"""No function in services/ runs past 80 lines unless it says why.

Ruff counts branches and statements (C901, PLR0912, PLR0915 in pyproject.toml) but not lines, and a
long linear function hides its steps as well as a branchy one. The length is counted from the ``def``
line to the last line of the body (decorators not included). A function may stay long when splitting
it would only scatter a linear script: it then carries ``# long: <reason>`` on its ``def`` line or the
line above it.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SERVICES = REPO / "services"
MAX_LINES = 80
LONG_MARK = re.compile(r"#\s*long:\s*\S")


@dataclass(frozen=True)
class Function:
    path: str  # relative to the repository, with forward slashes
    line: int  # of the ``def``
    name: str  # qualified: Class.method, outer.inner
    length: int
    marked: bool  # carries ``# long: <reason>``


def _functions(path: Path, root: Path = REPO) -> Iterator[Function]:
    source = path.read_text(encoding="utf-8")
    lines = source.splitlines()
    rel = path.relative_to(root).as_posix()

    def visit(node: ast.AST, prefix: str) -> Iterator[Function]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                assert child.end_lineno is not None
                top = min([child.lineno, *(d.lineno for d in child.decorator_list)])
                # the def line, the decorators, and the line just above the first of them
                around = lines[max(top - 2, 0) : child.lineno]
                yield Function(
                    path=rel,
                    line=child.lineno,
                    name=prefix + child.name,
                    length=child.end_lineno - child.lineno + 1,
                    marked=any(LONG_MARK.search(text) for text in around),
                )
                yield from visit(child, f"{prefix}{child.name}.")
            elif isinstance(child, ast.ClassDef):
                yield from visit(child, f"{prefix}{child.name}.")
            else:
                yield from visit(child, prefix)

    yield from visit(ast.parse(source, filename=str(path)), "")


def _all_functions() -> list[Function]:
    return [f for path in sorted(SERVICES.rglob("*.py")) for f in _functions(path)]


def test_no_function_is_longer_than_the_limit_without_a_reason() -> None:
    too_long = [f for f in _all_functions() if f.length > MAX_LINES and not f.marked]
    assert not too_long, "\n".join(
        f"{f.path}:{f.line} {f.name} is {f.length} lines (limit {MAX_LINES}): split it into helpers named "
        "for their steps, or, if splitting would only scatter a linear script, put "
        "`# long: <reason>` on its def line or the line above"
        for f in too_long
    )


def test_a_long_mark_sits_on_a_long_function() -> None:
    """``# long:`` on a function within the limit is a stale excuse: it would hide the function growing."""
    stale = [f for f in _all_functions() if f.marked and f.length <= MAX_LINES]
    assert not stale, "\n".join(
        f"{f.path}:{f.line} {f.name} is {f.length} lines, within the limit: remove its `# long:` comment"
        for f in stale
    )


def test_the_walk_finds_functions_and_measures_them(tmp_path: Path) -> None:
    """The checker itself: nested and decorated functions, and where the mark may stand."""
    sample = tmp_path / "sample.py"
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_LINES))
    sample.write_text(
        "class A:\n"
        "    @staticmethod  # long: a generated table\n"
        f"    def table() -> None:\n{body.replace('    ', '        ')}\n"
        "\n"
        f"def plain() -> None:\n{body}\n"
        "\n"
        "# long: marked on the line above\n"
        f"def above() -> None:\n{body}\n",
        encoding="utf-8",
    )
    found = {f.name: f for f in _functions(sample, tmp_path)}
    assert found["A.table"].length == MAX_LINES + 1 and found["A.table"].marked
    assert found["plain"].length == MAX_LINES + 1 and not found["plain"].marked
    assert found["above"].marked
