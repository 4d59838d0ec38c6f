"""Run the atheris fuzz targets of ``tests/fuzz/targets.py``.

    python -m tests.fuzz.run injection -max_total_time=60     # one target; libFuzzer flags follow
    python -m tests.fuzz.run --all -max_total_time=60         # each target in turn (``make fuzz``)
    python -m tests.fuzz.run --list

Each target runs in its own process (atheris ends the process when fuzzing stops), with our code
instrumented for coverage, a corpus directory (default ``out/fuzz/corpus/<target>``, kept between runs;
new ones start from ``targets.SEEDS``), a per-input timeout
(``-timeout``, default 10 s: a pumped 20,000-character input takes milliseconds when the code is linear)
and crash reproducers written under ``-artifact_prefix`` (default ``out/fuzz/``). Exit status 0: no
failure found.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

DEFAULTS = {"-timeout": "10", "-max_len": "4096", "-artifact_prefix": "out/fuzz/", "-rss_limit_mb": "4096"}


def _flags(args: list[str]) -> list[str]:
    given = {a.split("=", 1)[0] for a in args}
    return [*args, *(f"{k}={v}" for k, v in DEFAULTS.items() if k not in given)]


def fuzz_one(name: str, args: list[str]) -> None:
    """Fuzz ``name`` in this process (does not return: atheris exits)."""
    import atheris

    with atheris.instrument_imports(include=["services"]):
        from tests.fuzz.targets import SEEDS, TARGETS

    if name not in TARGETS:
        raise SystemExit(f"unknown fuzz target {name!r}; one of: {', '.join(sorted(TARGETS))}")
    flags = _flags(args)
    prefix = next(a.split("=", 1)[1] for a in flags if a.startswith("-artifact_prefix="))
    Path(prefix).mkdir(parents=True, exist_ok=True)
    corpus = [a for a in args if not a.startswith("-")]
    if not corpus:  # libFuzzer adds what it finds to the first corpus directory
        corpus = [str(Path(prefix) / "corpus" / name)]
        flags.append(corpus[0])
    first = Path(corpus[0])
    first.mkdir(parents=True, exist_ok=True)
    if not any(first.iterdir()):
        for i, seed in enumerate(SEEDS):
            (first / f"seed-{i}").write_bytes(seed)
    atheris.Setup([sys.argv[0], *flags], TARGETS[name])
    atheris.Fuzz()


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0
    if argv[0] == "--list":
        from tests.fuzz.targets import TARGETS

        print("\n".join(sorted(TARGETS)))
        return 0
    if argv[0] == "--all":
        from tests.fuzz.targets import TARGETS

        failed = []
        for name in sorted(TARGETS):
            print(f"== fuzzing {name}", flush=True)
            code = subprocess.call([sys.executable, "-m", "tests.fuzz.run", name, *argv[1:]])
            if code != 0:
                failed.append(f"{name} (exit {code})")
        if failed:
            print(f"fuzz failures: {', '.join(failed)}; reproducers under out/fuzz/", file=sys.stderr)
            return 1
        return 0
    fuzz_one(argv[0], argv[1:])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
