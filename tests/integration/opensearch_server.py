"""The real OpenSearch node of the integration tests: one per test session, on a free port in a tmp
folder, started by the product's launcher (:mod:`services.retrieval.opensearch_node`, the one behind
``rampart opensearch up``) and stopped at the end.

Java and Maven are requirements of the test suite, like redis-server: when they are missing the
tests fail saying what to install, never skip. The first run assembles the node from Maven Central
(``mvn package``, cached in ``~/.m2``); the times are printed in pytest's summary.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from services.common.errors import RampartError
from services.common.net import free_port
from services.retrieval import opensearch_node
from services.retrieval.opensearch_node import OpenSearchNode

TIMES = pytest.StashKey[dict[str, float]]()


def start_node(home: Path) -> tuple[OpenSearchNode, dict[str, float]]:
    begin = time.monotonic()
    try:
        opensearch_node.build()
    except RampartError as exc:
        pytest.fail(exc.message)
    built = time.monotonic() - begin
    node = OpenSearchNode(home, free_port(), heap_mb=512)
    try:
        node.start()
    except RampartError as exc:
        pytest.fail(exc.message)
    return node, {"assemble_s": built, "green_s": node.startup_s}


@pytest.fixture(scope="session")
def opensearch(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[OpenSearchNode]:
    """A green single node (security off, loopback) for the whole session; tests use their own index
    prefix on it, so they never see each other's data."""
    node, times = start_node(tmp_path_factory.mktemp("opensearch"))
    request.config.stash[TIMES] = times
    yield node
    node.stop()


def summary(config: pytest.Config) -> str | None:
    times = config.stash.get(TIMES, None)
    if times is None:
        return None
    return (
        f"OpenSearch test node: assembled/checked in {times['assemble_s']:.1f} s, "
        f"green {times['green_s']:.1f} s after start"
    )


def rampart_cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """``rampart <args>`` in a child process with ``env`` over this one's (the CLI as a user runs it)."""
    return subprocess.run(
        [sys.executable, "-m", "services.cli.main", *args],
        env={**os.environ, **env},
        cwd=Path(__file__).resolve().parents[2],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
