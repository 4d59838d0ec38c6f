"""``CeleryFactChecker`` (Celery workers over a real Redis) under the ``FactChecker`` contract, its
agreement with the in-process checker, and what only it meets: the Redis evidence cache, bad task
input, and failing soft (``unverified``, promptly) when Redis or the workers are gone, recovering when
they return. Nothing is mocked: Debian's redis-server and ``rampart worker`` processes run on loopback.
"""

from __future__ import annotations

import os
import signal
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from services.common.errors import ErrorCode, RampartError
from services.common.net import free_port
from services.common.redis_server import redact_url
from services.common.verdicts import Verdict
from services.factcheck.celery_app import TASK_NAME, bounded, evidence_key
from services.factcheck.celery_checker import CeleryFactChecker
from services.factcheck.checker import CheckOutcome, FactChecker
from services.factcheck.evidence import CheckInput
from services.factcheck.in_process import InProcessFactChecker
from services.retrieval.embedder import Embedder
from tests.contracts.fact_checker import (
    CLUSTER,
    DEADLINE_S,
    INJECTION,
    MIXED,
    PARAPHRASES,
    QUERY,
    RELEVANT,
    FactCheckerContract,
    assert_same,
    reference_checker,
    verdicts,
)
from tests.integration.redis_server import CeleryWorker, RedisServer, celery_settings


def unique(n: int, tag: str = "") -> list[CheckInput]:
    """Passages no earlier check has seen (so they are not in the evidence cache)."""
    nonce = uuid.uuid4().hex[:8]
    return [
        CheckInput(
            chunk_id=f"u-{nonce}-{i}",
            doc_id=f"doc-{nonce}-{i}",
            text=f"Parental leave note {tag} {nonce} number {i}: employees get {i + 2} weeks of leave "
            f"in the {['sales', 'legal', 'ops', 'hr'][i % 4]} department.",
            rerank_logit=0.5,
        )
        for i in range(n)
    ]


def long_items(n: int) -> list[CheckInput]:
    """Unseen passages of ~25,000 characters: ~70 ms of evidence each on one core, long enough that a
    worker process killed at a random moment is almost surely in the middle of one."""
    nonce = uuid.uuid4().hex[:8]
    return [
        CheckInput(
            chunk_id=f"long-{nonce}-{i}",
            doc_id=f"long-doc-{nonce}-{i}",
            text=" ".join(
                f"Note {nonce}-{i}-{k}: employees get {k % 30} weeks of leave." for k in range(500)
            ),
        )
        for i in range(n)
    ]


def make_checker(server: RedisServer, models_dir: Path, embedder: Embedder) -> CeleryFactChecker:
    s = celery_settings(server, models_dir)
    s = s.model_copy(update={"factcheck": s.factcheck.model_copy(update=CLUSTER)})
    return CeleryFactChecker.from_settings(s.factcheck, s.llm, embedder)


@pytest.fixture(scope="module")
def in_process(embedder: Embedder, models_dir: Path) -> Iterator[InProcessFactChecker]:
    checker = reference_checker(embedder, models_dir)
    yield checker
    checker.close()


@pytest.fixture(scope="module")
def celery_checker(
    redis_server: RedisServer, celery_worker: CeleryWorker, models_dir: Path, embedder: Embedder
) -> Iterator[CeleryFactChecker]:
    checker = make_checker(redis_server, models_dir, embedder)
    yield checker
    checker.close()


class TestCeleryFactChecker(FactCheckerContract):
    @pytest.fixture()
    def checker(self, celery_checker: CeleryFactChecker) -> FactChecker:
        return celery_checker


@pytest.mark.timeout(120)
def test_same_verdicts_reasons_and_scores(in_process: FactChecker, celery_checker: FactChecker) -> None:
    assert celery_checker.model_id == in_process.model_id
    for items in (MIXED, [RELEVANT], [INJECTION, *PARAPHRASES], unique(5), [*unique(3), *MIXED]):
        want = in_process.check(QUERY, items, deadline_s=DEADLINE_S)
        got = celery_checker.check(QUERY, items, deadline_s=DEADLINE_S)
        assert not got.unverified, got.reason
        assert_same(got.judgements, want.judgements)


# ---- Celery specifics ------------------------------------------------------------------------------
@pytest.mark.timeout(120)
def test_second_call_is_served_from_the_redis_cache(
    celery_checker: CeleryFactChecker, redis_server: RedisServer
) -> None:
    items = unique(3, "cache")
    cache = redis_server.client(1)  # default cache: the result backend's database
    keys = [evidence_key(QUERY, bounded(i), celery_checker.model_id) for i in items]
    assert cache.exists(*keys) == 0
    first = celery_checker.check(QUERY, items, deadline_s=DEADLINE_S)
    assert cache.exists(*keys) == 3
    assert 0 < cache.ttl(keys[0]) <= celery_checker.settings.celery.cache_ttl_s
    # Same content under other chunk ids: served from the cache, judged under the caller's ids.
    renamed = [i.model_copy(update={"chunk_id": i.chunk_id + "-again"}) for i in items]
    second = celery_checker.check(QUERY, renamed, deadline_s=DEADLINE_S)
    assert [j.chunk_id for j in second.judgements] == [i.chunk_id for i in renamed]
    assert [j.verdict for j in second.judgements] == [j.verdict for j in first.judgements]


@pytest.mark.timeout(60)
def test_bad_task_input_gets_an_error_result_not_a_crash_loop(
    celery_checker: CeleryFactChecker, celery_worker: CeleryWorker
) -> None:
    app = celery_checker.app
    sent = [
        app.send_task(TASK_NAME, args=(QUERY, "not a dict")),
        app.send_task(TASK_NAME, args=(QUERY, {"chunk_id": 1, "text": None})),
        app.send_task(TASK_NAME, args=("   ", RELEVANT.model_dump())),
        app.send_task(TASK_NAME, args=(QUERY, RELEVANT.model_dump()), kwargs={"model_id": "other-model"}),
    ]
    huge = app.send_task(TASK_NAME, args=(QUERY, {**RELEVANT.model_dump(), "text": "leave " * 200_000}))
    errors = [r.get(timeout=20, interval=0.01)["error"] for r in sent]
    assert [e["code"] for e in errors] == [
        "invalid_argument",
        "invalid_argument",
        "invalid_argument",
        "failed_precondition",
    ]
    assert "JSON object" in errors[0]["message"] and "str" in errors[0]["message"]
    assert "chunk_id" in errors[1]["message"] and "doc_id" in errors[1]["message"]
    assert "RAMPART_MODELS_DIR" in errors[3]["message"]
    assert set(huge.get(timeout=20, interval=0.01)) == {"chunk_id", "signals", "notes", "vector"}
    assert "Retry in" not in celery_worker.log()  # answers, not failures: nothing to redeliver
    assert celery_worker.proc is not None and celery_worker.proc.poll() is None
    assert (
        verdicts(celery_checker.check(QUERY, [RELEVANT], deadline_s=DEADLINE_S))["hr-1"] is Verdict.RELEVANT
    )


# ---- failures --------------------------------------------------------------------------------------
@pytest.mark.timeout(120)
def test_no_worker_gives_unverified_within_the_deadline_and_the_cache_still_serves(
    start_redis: Callable[[], RedisServer],
    start_worker: Callable[..., CeleryWorker],
    models_dir: Path,
    embedder: Embedder,
) -> None:
    server = start_redis()
    worker = start_worker(server)
    checker = make_checker(server, models_dir, embedder)
    try:
        want = verdicts(checker.check(QUERY, MIXED, deadline_s=DEADLINE_S))
        worker.stop()

        t0 = time.monotonic()
        assert verdicts(checker.check(QUERY, MIXED, deadline_s=1.0)) == want  # all cached
        assert time.monotonic() - t0 < 1.0

        t0 = time.monotonic()
        outcome = checker.check(QUERY, [*MIXED, *unique(2)], deadline_s=1.0)
        took = time.monotonic() - t0
        assert outcome.unverified and outcome.judgements == []
        assert "no fact-check worker answered" in (outcome.reason or "")
        assert 0.9 < took < 2.0, took

        with pytest.raises(RampartError) as err:
            checker.check_ready()
        assert err.value.code is ErrorCode.UNAVAILABLE and "rampart worker" in err.value.message
    finally:
        checker.close()


@pytest.mark.timeout(120)
def test_redis_down_gives_unverified_promptly_and_recovers_on_restart(
    start_redis: Callable[[], RedisServer],
    start_worker: Callable[..., CeleryWorker],
    models_dir: Path,
    embedder: Embedder,
) -> None:
    server = start_redis()
    start_worker(server)
    checker = make_checker(server, models_dir, embedder)
    try:
        assert verdicts(checker.check(QUERY, MIXED, deadline_s=DEADLINE_S))
        checker.check_ready()
        server.stop()

        for items in (MIXED, unique(2)):
            t0 = time.monotonic()
            outcome = checker.check(QUERY, items, deadline_s=3.0)
            assert outcome.unverified and "unreachable" in (outcome.reason or ""), outcome.reason
            assert time.monotonic() - t0 < 1.0
        t0 = time.monotonic()
        with pytest.raises(RampartError) as err:
            checker.check_ready()
        assert err.value.code is ErrorCode.UNAVAILABLE and "PING" in err.value.message
        assert time.monotonic() - t0 < 1.0

        server.start()  # same port, empty: the worker and the checker must reconnect by themselves
        end = time.monotonic() + 45
        while True:
            outcome = checker.check(QUERY, unique(2, "after-restart"), deadline_s=2.0)
            if not outcome.unverified:
                break
            assert time.monotonic() < end, f"no verdicts 45 s after Redis came back: {outcome.reason}"
            time.sleep(0.2)
        checker.check_ready()
    finally:
        checker.close()


@pytest.mark.timeout(120)
def test_transient_redis_errors_are_retried_then_reported(
    start_redis: Callable[[], RedisServer],
    start_worker: Callable[..., CeleryWorker],
    models_dir: Path,
    embedder: Embedder,
) -> None:
    """A worker whose evidence cache is unreachable: each try fails with a Redis ConnectionError,
    is retried with backoff, and the check ends unverified naming the error, not hung or crashed."""
    server = start_redis()
    dead = f"redis://127.0.0.1:{free_port()}/0"
    worker = start_worker(
        server, RAMPART_FACTCHECK__CELERY__CACHE_URL=dead, RAMPART_FACTCHECK__CELERY__RETRIES="1"
    )
    checker = make_checker(server, models_dir, embedder)
    try:
        outcome = checker.check(QUERY, [RELEVANT], deadline_s=DEADLINE_S)
        assert outcome.unverified and "ConnectionError" in (outcome.reason or ""), outcome.reason
        assert "hr-1" in (outcome.reason or "")
        assert worker.log().count("Retry in") == 1
        assert worker.proc is not None and worker.proc.poll() is None
    finally:
        checker.close()


def test_redacted_urls_hide_passwords_only() -> None:
    assert redact_url("redis://:s3cret@cache:6380/1") == "redis://:***@cache:6380/1"
    assert redact_url("rediss://app:s3cret@cache/0") == "rediss://app:***@cache/0"
    assert redact_url("redis://127.0.0.1:6379/0") == "redis://127.0.0.1:6379/0"


@pytest.mark.timeout(120)
def test_worker_process_killed_mid_task_never_hangs_the_check(
    start_redis: Callable[[], RedisServer],
    start_worker: Callable[..., CeleryWorker],
    models_dir: Path,
    embedder: Embedder,
) -> None:
    """SIGKILL a pool process that holds a task: the check still answers, and (acks_late +
    reject_on_worker_lost) the task is delivered again to the replacement process."""
    server = start_redis()
    worker = start_worker(server)
    checker = make_checker(server, models_dir, embedder)
    items = long_items(40)
    outcome: list[CheckOutcome] = []

    def active() -> list[str]:
        replies = checker.app.control.inspect(destination=[worker.hostname], timeout=1.0, limit=1).active()
        return [t["id"] for t in (replies or {}).get(worker.hostname, [])]

    try:
        runner = threading.Thread(target=lambda: outcome.append(checker.check(QUERY, items, deadline_s=30.0)))
        t0 = time.monotonic()
        runner.start()
        (victim,) = worker.children()
        # Freeze the process while the worker reports a task running on it; if the task is still
        # reported once frozen, the process is inside it (it cannot finish while stopped).
        while True:
            assert time.monotonic() - t0 < 20, "the worker never reported a running task"
            if active():
                os.kill(victim, signal.SIGSTOP)
                time.sleep(0.1)
                if lost := active():
                    break
                os.kill(victim, signal.SIGCONT)
        os.kill(victim, signal.SIGKILL)
        runner.join(timeout=40)
        assert not runner.is_alive(), "check hung after its worker process was killed"
        (done,) = outcome
        assert time.monotonic() - t0 < 32
        if done.unverified:  # allowed by the contract, but say why if it happens
            pytest.fail(f"expected the task to be redelivered in time: {done.reason}\n{worker.log()[-3000:]}")
        assert len(done.judgements) == len(items)
        assert worker.log().count(f"[{lost[0]}] received") == 2, "the killed task was not redelivered"
        assert worker.children() and worker.children() != [victim]
    finally:
        checker.close()
