"""How a fact-check splits its cache misses into Celery tasks: ceil(n / items_per_task) batches of
near-equal size, items in order (the tasks themselves: tests/integration/test_factcheck_batching.py)."""

from __future__ import annotations

import pytest

from services.factcheck.celery_checker import batches


@pytest.mark.parametrize(
    ("n", "k", "sizes"),
    [(0, 4, []), (1, 4, [1]), (10, 4, [3, 3, 4]), (31, 30, [15, 16]), (30, 30, [30]), (5, 1, [1] * 5)],
)
def test_batches_are_ceil_n_over_k_of_near_equal_size(n: int, k: int, sizes: list[int]) -> None:
    items = list(range(n))
    got = batches(items, k)
    assert [len(b) for b in got] == sizes
    assert [x for b in got for x in b] == items
