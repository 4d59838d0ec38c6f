"""The tier guard (tests/tiers.py) on a made-up tree: folders give markers, and a test in no tier folder,
or marked for another tier by hand, stops collection naming it. Run as a real pytest in a child process,
so what is checked is what ``make test`` sees."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.tiers import tier_of

REPO = Path(__file__).resolve().parents[2]
INI = "[pytest]\naddopts = --strict-markers -p no:cacheprovider\nmarkers =\n    unit\n    integration\n    e2e\n    deploy\n"
PASSING = "def test_it() -> None:\n    pass\n"


def tree(root: Path, files: dict[str, str]) -> Path:
    (root / "pytest.ini").write_text(INI)
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def pytest_in(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """pytest with the guard plugin on ``root`` (its own rootdir); ``-P``: ``root`` stays off sys.path,
    so ``tests.tiers`` is the repository's."""
    return subprocess.run(
        [sys.executable, "-P", "-m", "pytest", "-p", "tests.tiers", "-q", "--collect-only", *args],
        cwd=root,
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


GOOD = {
    "tests/unit/test_u.py": PASSING,
    "tests/unit/test_own_mark.py": "import pytest\n\npytestmark = pytest.mark.unit\n\n\n" + PASSING,
    "tests/integration/test_i.py": PASSING,
    "tests/e2e/deep/test_e.py": PASSING,
}


def test_each_folder_gives_its_marker_as_make_test_selects(tmp_path: Path) -> None:
    tree(tmp_path, GOOD)
    run = pytest_in(tmp_path, "-m", "unit or integration")
    assert run.returncode == 0, run.stdout + run.stderr
    assert "3/4 tests collected (1 deselected)" in run.stdout  # a hand marker of its own tier is harmless
    assert "test_e.py" not in run.stdout
    run = pytest_in(tmp_path, "-m", "e2e")
    assert run.returncode == 0, run.stdout + run.stderr
    assert "tests/e2e/deep/test_e.py::test_it" in run.stdout and "1/4 tests collected" in run.stdout


def test_a_test_outside_the_tier_folders_fails_collection(tmp_path: Path) -> None:
    strays = ["tests/misc/test_stray.py", "test_top.py", "tests/test_loose.py"]
    tree(tmp_path, {**GOOD, **dict.fromkeys(strays, PASSING)})
    run = pytest_in(tmp_path, "-m", "unit")  # also when -m would deselect them: the guard runs first
    assert run.returncode == pytest.ExitCode.USAGE_ERROR, run.stdout + run.stderr
    assert "3 test(s) are not in the folder of their tier" in run.stderr
    for stray in strays:
        assert (
            f"{stray}::test_it: not under tests/unit, tests/integration, tests/e2e or tests/deploy"
            in run.stderr
        )


def test_a_hand_marker_of_another_tier_fails_collection(tmp_path: Path) -> None:
    marked = "import pytest\n\n\n@pytest.mark.integration\ndef test_it() -> None:\n    pass\n"
    run = pytest_in(tree(tmp_path, {**GOOD, "tests/unit/test_marked.py": marked}))
    assert run.returncode == pytest.ExitCode.USAGE_ERROR, run.stdout + run.stderr
    assert (
        "tests/unit/test_marked.py::test_it: marked integration by hand but sits in tests/unit" in run.stderr
    )
    assert "1 test(s) are not in the folder of their tier" in run.stderr


def test_tier_of_reads_the_folder_under_tests(tmp_path: Path) -> None:
    assert tier_of(tmp_path / "tests" / "unit" / "test_x.py", tmp_path) == "unit"
    assert tier_of(tmp_path / "tests" / "integration" / "sub" / "test_x.py", tmp_path) == "integration"
    assert tier_of(tmp_path / "tests" / "contracts" / "test_x.py", tmp_path) is None
    assert tier_of(tmp_path / "tests" / "unit", tmp_path) is None  # the folder itself holds no test
    assert tier_of(tmp_path / "unit" / "test_x.py", tmp_path) is None
    assert tier_of(Path("/elsewhere/tests/unit/test_x.py"), tmp_path) is None
