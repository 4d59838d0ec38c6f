"""A short run of every atheris fuzz target (tests/fuzz/targets.py) in CI: a few hundred inputs each.

``make fuzz`` runs them for minutes; this run catches a target that no longer starts, and whatever a
few hundred mutations of the seeds find: an unexpected exception, or an input past the per-input
timeout (a super-linear path on a pumped input).
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fuzz.targets import TARGETS

REPO = Path(__file__).resolve().parents[2]
RUNS = 200


def test_atheris_is_installed() -> None:
    try:
        import atheris  # noqa: F401
    except ImportError:
        pytest.fail("atheris is not installed: it is a dev dependency (pip install -e '.[dev]')")


@pytest.mark.parametrize("target", sorted(TARGETS))
def test_fuzz_target_runs_clean(target: str, tmp_path: Path) -> None:
    corpus, artifacts = tmp_path / "corpus", tmp_path / "artifacts"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "tests.fuzz.run",
            target,
            f"-runs={RUNS}",
            "-seed=1",
            "-timeout=20",
            # a child starts with its parent's peak RSS (Linux keeps ru_maxrss across fork and exec),
            # so under a pytest process holding models libFuzzer's RSS limit measures pytest, not the
            # target, and reports every target out of memory; `make fuzz` keeps the limit
            "-rss_limit_mb=0",
            f"-artifact_prefix={artifacts}/",
            str(corpus),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    found = sorted(p.name for p in artifacts.glob("*")) if artifacts.exists() else []
    assert done.returncode == 0 and not found, (
        f"fuzz target {target!r} failed (exit {done.returncode}, reproducers {found}); "
        f"rerun: python -m tests.fuzz.run {target} <reproducer>\n{done.stderr[-3000:]}"
    )
    # libFuzzer counts its seed inputs too, so a finished run may report a few more than -runs
    ran = re.search(r"Done (\d+) runs", done.stderr)
    assert ran is not None and int(ran.group(1)) >= RUNS, done.stderr[-2000:]
