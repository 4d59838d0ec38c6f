"""Batched fact-check tasks: a check's cache misses go out as ceil(n / items_per_task) tasks, and a
batch answers per item (a bad item gets its own error, the others their evidence). How a check splits
its passages into batches is a unit test (tests/unit/test_factcheck_batches.py).

Task counts are the worker's own (``inspect().stats()["total"]``, what it executed), not a mock's.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from services.common.config import LlmSettings
from services.common.errors import ErrorCode
from services.common.settings import RampartSettings
from services.factcheck.celery_app import (
    BATCH_TASK_NAME,
    TASK_NAME,
    as_sent,
    cache_url,
    evidence_key,
    redis_client,
)
from services.factcheck.celery_checker import CeleryFactChecker
from services.factcheck.evidence import CheckInput, Evidence
from services.factcheck.in_process import InProcessFactChecker
from services.retrieval.embedder import Embedder
from tests.integration.redis_server import CeleryWorker, RedisServer, celery_settings

QUERY = "How many weeks of parental leave do employees get?"
DEADLINE_S = 20.0


def passages(n: int) -> list[CheckInput]:
    """Passages no earlier check has seen (so none is in the evidence cache)."""
    nonce = uuid.uuid4().hex[:8]
    return [
        CheckInput(
            chunk_id=f"b-{nonce}-{i}",
            doc_id=f"doc-{nonce}-{i}",
            text=f"Parental leave note {nonce} number {i}: employees get {i + 2} weeks of leave.",
            rerank_logit=0.5,
        )
        for i in range(n)
    ]


def executed(checker: CeleryFactChecker, worker: CeleryWorker) -> dict[str, int]:
    replies = checker.app.control.inspect(destination=[worker.hostname], timeout=2.0).stats() or {}
    total: dict[str, int] = replies[worker.hostname]["total"]
    return total


def wait_executed(
    checker: CeleryFactChecker, worker: CeleryWorker, want: dict[str, int], timeout_s: float = 5.0
) -> dict[str, int]:
    """The worker's counts once they reach ``want`` (it counts a task when its pool takes it, which
    may trail the result by a moment), or the last counts seen."""
    end = time.monotonic() + timeout_s
    while (got := executed(checker, worker)) != want and time.monotonic() < end:
        time.sleep(0.05)
    return got


@pytest.fixture(scope="module")
def in_process(embedder: Embedder, models_dir: Path) -> Iterator[InProcessFactChecker]:
    checker = InProcessFactChecker(embedder, RampartSettings(models_dir=models_dir).factcheck)
    yield checker
    checker.close()


@pytest.mark.timeout(120)
def test_a_check_sends_ceil_n_over_k_batch_tasks(
    redis_server: RedisServer,
    celery_worker: CeleryWorker,
    models_dir: Path,
    embedder: Embedder,
    in_process: InProcessFactChecker,
) -> None:
    """10 new passages at k = 1, 4, 100: 10, 3 and 1 tasks; cached and repeated passages send none,
    and the verdicts are the in-process checker's whatever the batching."""
    checkers = {
        k: CeleryFactChecker.from_settings(
            celery_settings(redis_server, models_dir, items_per_task=k).factcheck, LlmSettings(), embedder
        )
        for k in (1, 4, 100)
    }
    try:
        counts = executed(checkers[1], celery_worker)
        for k, want in ((1, 10), (4, 3), (100, 1)):
            items = passages(10)
            outcome = checkers[k].check(QUERY, items, deadline_s=DEADLINE_S)
            assert not outcome.unverified, outcome.reason
            expected = in_process.check(QUERY, items, deadline_s=DEADLINE_S)
            assert [(j.chunk_id, j.verdict) for j in outcome.judgements] == [
                (j.chunk_id, j.verdict) for j in expected.judgements
            ]
            counts = {**counts, BATCH_TASK_NAME: counts.get(BATCH_TASK_NAME, 0) + want}
            assert wait_executed(checkers[k], celery_worker, counts) == counts, f"items_per_task={k}"

        # 4 cached + 6 new, two of them the same passage under another chunk id: 5 distinct misses
        # at k = 4 make 2 tasks
        cached = passages(4)
        checkers[4].check(QUERY, cached, deadline_s=DEADLINE_S)
        fresh = passages(5)
        twin = fresh[0].model_copy(update={"chunk_id": fresh[0].chunk_id + "-twin"})
        counts = {**counts, BATCH_TASK_NAME: counts[BATCH_TASK_NAME] + 1}
        assert wait_executed(checkers[4], celery_worker, counts) == counts
        outcome = checkers[4].check(QUERY, [*cached, *fresh, twin], deadline_s=DEADLINE_S)
        assert not outcome.unverified, outcome.reason
        assert [j.chunk_id for j in outcome.judgements][-1] == twin.chunk_id
        counts = {**counts, BATCH_TASK_NAME: counts[BATCH_TASK_NAME] + 2}
        assert wait_executed(checkers[4], celery_worker, counts) == counts
    finally:
        for c in checkers.values():
            c.close()


@pytest.mark.timeout(60)
def test_a_bad_item_gets_its_error_and_the_others_their_evidence(
    redis_server: RedisServer, celery_worker: CeleryWorker, models_dir: Path, embedder: Embedder
) -> None:
    checker = CeleryFactChecker.from_settings(
        celery_settings(redis_server, models_dir).factcheck, LlmSettings(), embedder
    )
    app = checker.app
    good, other = passages(2)
    twin = good.model_copy(update={"chunk_id": "twin"})
    items: list[Any] = [
        good.model_dump(),
        "not a dict",
        {"chunk_id": 1, "text": None},
        other.model_dump(),
        twin.model_dump(),
    ]
    try:
        results = app.send_task(
            BATCH_TASK_NAME, args=(QUERY, items), kwargs={"model_id": checker.model_id}
        ).get(timeout=20, interval=0.01)
        assert len(results) == 5
        assert [r.get("chunk_id") for r in results] == [good.chunk_id, None, None, other.chunk_id, "twin"]
        for bad, words in ((results[1], ("JSON object", "str")), (results[2], ("chunk_id", "doc_id"))):
            assert bad["error"]["code"] == ErrorCode.INVALID_ARGUMENT.value
            assert all(w in bad["error"]["message"] for w in words), bad
        assert results[4]["signals"] == results[0]["signals"] and results[4]["vector"] == results[0]["vector"]

        # the single-passage task (callers from before batching) answers as a batch of one does
        single = app.send_task(TASK_NAME, args=(QUERY, good.model_dump())).get(timeout=20, interval=0.01)
        assert single["signals"] == results[0]["signals"]
        assert single["vector"] == pytest.approx(results[0]["vector"], abs=1e-5)

        # errors for the whole input: per item when the query or the model is wrong, once when
        # the items are not a list
        blank = app.send_task(BATCH_TASK_NAME, args=("  ", items[:2])).get(timeout=20, interval=0.01)
        assert [r["error"]["code"] for r in blank] == [ErrorCode.INVALID_ARGUMENT.value] * 2
        assert "query" in blank[0]["error"]["message"]
        wrong = app.send_task(
            BATCH_TASK_NAME, args=(QUERY, items[:2]), kwargs={"model_id": "other-model"}
        ).get(timeout=20, interval=0.01)
        assert wrong[0]["error"]["code"] == ErrorCode.FAILED_PRECONDITION.value
        assert "RAMPART_MODELS_DIR" in wrong[0]["error"]["message"]
        assert wrong[1]["error"]["code"] == ErrorCode.INVALID_ARGUMENT.value  # its own error first
        not_list = app.send_task(BATCH_TASK_NAME, args=(QUERY, good.model_dump())).get(
            timeout=20, interval=0.01
        )
        assert "JSON array" in not_list["error"]["message"] and "dict" in not_list["error"]["message"]
        assert "Retry in" not in celery_worker.log()  # answers, not failures: nothing to redeliver
    finally:
        checker.close()


@pytest.mark.timeout(60)
def test_stored_vectors_stay_with_the_caller(
    redis_server: RedisServer, celery_worker: CeleryWorker, models_dir: Path, embedder: Embedder
) -> None:
    """With every passage's stored embedding at hand the check sends none to the workers, which
    neither embed nor return one (their cached evidence has no vector), and the caller's verdicts
    still come from the stored vectors (the contract suite's all-or-none test checks that part)."""
    checker = CeleryFactChecker.from_settings(
        celery_settings(redis_server, models_dir).factcheck, LlmSettings(), embedder
    )
    items = [
        p.model_copy(update={"vector": [1.0 if d == k else 0.0 for d in range(embedder.dim)]})
        for k, p in enumerate(passages(3))
    ]
    try:
        outcome = checker.check(QUERY, items, deadline_s=DEADLINE_S)
        assert not outcome.unverified, outcome.reason
        cache = redis_client(cache_url(checker.settings.celery), checker.settings.celery)
        sent = as_sent(items)
        assert [(i.vector, i.embed) for i in sent] == [(None, False)] * 3
        cached = cache.mget([evidence_key(QUERY, i, checker.model_id) for i in sent])
        assert all(c is not None for c in cached), "the worker's evidence is cached under the slim key"
        assert [Evidence.model_validate_json(c).vector for c in cached if c] == [[], [], []]
        # a caller without stored vectors is not answered from that vectorless evidence
        fresh = [i.model_copy(update={"vector": None}) for i in items]
        assert cache.mget([evidence_key(QUERY, i, checker.model_id) for i in fresh]) == [None] * 3
    finally:
        checker.close()
