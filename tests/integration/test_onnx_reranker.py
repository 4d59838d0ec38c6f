"""``OnnxReranker`` (embedded default, in-process onnxruntime) under the ``Reranker`` contract, and
what only it does: side-by-side scoring, forked children, the model files it needs."""

from __future__ import annotations

import multiprocessing
import threading
from pathlib import Path
from typing import Any

import pytest

from services.common.errors import ErrorCode, RampartError
from services.rerank.onnx_reranker import OnnxReranker
from services.rerank.reranker import Reranker
from tests.contracts.reranker import PASSAGES, RerankerContract


class TestOnnxReranker(RerankerContract):
    @pytest.fixture()
    def impl(self, reranker: Reranker) -> Reranker:
        return reranker  # the session's shipped int8 model (tests/conftest.py)


def test_side_by_side_calls_score_exactly_as_one_at_a_time(models_dir: Path) -> None:
    """Batches run in parallel single-thread calls give the very scores of one call after another, also
    with several callers sharing the scorer's pool (the score cache keys on (model, query, chunk))."""
    passages = [p * n for n in (1, 3, 9) for p in PASSAGES]  # mixed lengths: several length batches
    one = OnnxReranker.from_dir(models_dir / "reranker", threads=1, parallel=1)
    many = OnnxReranker.from_dir(models_dir / "reranker", threads=1, parallel=3)
    try:
        expected = one.score("capital of France", passages)
        assert many.score("capital of France", passages) == expected
        got: list[list[float]] = []
        callers = [
            threading.Thread(target=lambda: got.append(many.score("capital of France", passages)))
            for _ in range(4)
        ]
        for t in callers:
            t.start()
        for t in callers:
            t.join(timeout=120)
        assert got == [expected] * 4
    finally:
        one.close()
        many.close()
    assert many.score("capital of France", passages[:2]) == expected[:2]  # closed: still scores, in turn


def _score_in_child(reranker: OnnxReranker, passages: list[str], out: Any) -> None:
    out.send(reranker.score("capital of France", passages))


def test_side_by_side_scorer_works_in_a_forked_child(models_dir: Path) -> None:
    """A prefork child inherits the scorer but not its pool's threads: it must make its own, not hang."""
    passages = [p * n for n in (1, 3) for p in PASSAGES]
    many = OnnxReranker.from_dir(models_dir / "reranker", threads=1, parallel=2)
    try:
        expected = many.score("capital of France", passages)  # the parent's pool now has threads
        ctx = multiprocessing.get_context("fork")
        receive, send = ctx.Pipe(duplex=False)
        child = ctx.Process(target=_score_in_child, args=(many, passages, send))
        child.start()
        try:
            assert receive.poll(120), "the forked child did not score within 120 s"
            assert receive.recv() == expected
            child.join(30)
            assert child.exitcode == 0
        finally:
            if child.is_alive():
                child.kill()
                child.join(10)
    finally:
        many.close()


def test_onnx_reports_missing_model_and_variant(tmp_path: Path, models_dir: Path) -> None:
    with pytest.raises(RampartError, match="rampart models build") as info:
        OnnxReranker.from_dir(tmp_path)
    assert info.value.code is ErrorCode.FAILED_PRECONDITION
    with pytest.raises(RampartError, match="no 'fp32' variant"):
        OnnxReranker.from_dir(models_dir / "reranker", variant="fp32")
