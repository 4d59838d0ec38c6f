"""``InProcessFactChecker`` (embedded default: a thread pool in this process) under the
``FactChecker`` contract."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from services.factcheck.checker import FactChecker
from services.factcheck.in_process import InProcessFactChecker
from services.retrieval.embedder import Embedder
from tests.contracts.fact_checker import FactCheckerContract, reference_checker


@pytest.fixture(scope="module")
def in_process(embedder: Embedder, models_dir: Path) -> Iterator[InProcessFactChecker]:
    checker = reference_checker(embedder, models_dir)
    yield checker
    checker.close()


class TestInProcessFactChecker(FactCheckerContract):
    @pytest.fixture()
    def checker(self, in_process: InProcessFactChecker) -> FactChecker:
        return in_process
