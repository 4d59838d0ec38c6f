"""The Reranker contract, held against both implementations: in-process onnxruntime and a real
tritonserver (python backend) serving the same shipped model over gRPC."""

from __future__ import annotations

import math
import multiprocessing
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from services.common.errors import ErrorCode, RampartError
from services.models.reranker_export import spearman
from services.rerank.config import TritonSettings
from services.rerank.onnx_reranker import OnnxReranker
from services.rerank.reranker import Reranker
from services.rerank.stage import RerankStage
from services.rerank.triton_reranker import TritonReranker
from tests.conftest import free_port, start_triton
from tests.unit.test_rerank_stage import HITS, hit

pytestmark = pytest.mark.integration

PASSAGES = [
    "Paris is the capital and most populous city of France.",
    "The mitochondrion is the powerhouse of the cell.",
    "France's capital, Paris, lies on the Seine.",
    "Basketball was invented by James Naismith in 1891.",
]


@pytest.fixture(params=["onnx", "triton"])
def impl(request: pytest.FixtureRequest, reranker: Reranker) -> Iterator[Reranker]:
    if request.param == "onnx":
        yield reranker
        return
    server = request.getfixturevalue("triton_server")
    remote = TritonReranker.connect(TritonSettings(url=server.grpc_url, deadline_ms=60_000, batch_size=16))
    yield remote
    remote.close()


def test_scores_one_finite_logit_per_passage_in_order(impl: Reranker) -> None:
    scores = impl.score("what is the capital of france", PASSAGES)
    assert len(scores) == len(PASSAGES) and all(math.isfinite(s) for s in scores)
    # A trained model puts both Paris passages above the two unrelated ones.
    assert min(scores[0], scores[2]) > max(scores[1], scores[3])
    assert impl.score("what is the capital of france", list(reversed(PASSAGES))) == pytest.approx(
        list(reversed(scores)), abs=1e-4
    )


def test_implementations_agree(reranker: Reranker, triton_server: object) -> None:
    remote = TritonReranker.connect(TritonSettings(url=triton_server.grpc_url))  # type: ignore[attr-defined]
    try:
        local = reranker.score("vpn setup", [*PASSAGES, "connect to the vpn with your sso account"])
        far = remote.score("vpn setup", [*PASSAGES, "connect to the vpn with your sso account"])
        assert far == pytest.approx(local, abs=1e-4)
        assert remote.model_id.startswith(reranker.model_id)  # same weights, version pinned on top
    finally:
        remote.close()


def test_empty_inputs(impl: Reranker) -> None:
    assert impl.score("anything", []) == []
    (empty,) = impl.score("anything", [""])
    assert math.isfinite(empty)


def test_long_and_odd_text_is_truncated_not_fatal(impl: Reranker) -> None:
    huge = "word " * 100_000
    odd = "\x00\x01 bin\udcff\ufffd ärger 日本語 " * 50
    scores = impl.score("long input", [huge, odd])
    assert len(scores) == 2 and all(math.isfinite(s) for s in scores)
    # what lies past the model's length is never read: the first few thousand characters score alike
    (head,) = impl.score("long input", [huge[:6000]])
    assert scores[0] == pytest.approx(head, abs=1e-4)


def test_batch_larger_than_model_maximum_is_split(impl: Reranker) -> None:
    passages = [f"passage number {i} about topic {i % 7}, study {i}" for i in range(150)]  # > max batch 64
    together = impl.score("topic 3", passages)
    alone = [impl.score("topic 3", [p])[0] for p in passages[:20]]
    assert len(together) == 150 and all(math.isfinite(s) for s in together)
    # Scored one pair per onnxruntime call (rerank.batch_size 1), int8 scores do not depend on the
    # company a pair is sent in, so splitting a large batch changes nothing.
    assert together[:20] == pytest.approx(alone, abs=1e-4)
    assert spearman(together[:20], alone) > 0.99


@pytest.mark.parametrize(
    ("query", "passages", "match"),
    [("   ", ["x"], "non-empty"), ("q", "not a list", "list of strings"), ("q", [b"bytes"], "strings")],
)
def test_bad_input_is_a_clear_error(impl: Reranker, query: str, passages: object, match: str) -> None:
    with pytest.raises(RampartError, match=match) as info:
        impl.score(query, passages)  # type: ignore[arg-type]
    assert info.value.code is ErrorCode.INVALID_ARGUMENT


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


@pytest.mark.parametrize(("kind", "count"), [("KIND_CPU", 2), ("KIND_GPU", 1)])
def test_repository_instances_default_per_kind(
    models_dir: Path, tmp_path: Path, kind: str, count: int
) -> None:
    """Two CPU instances (one computes while the other's requests cross the python-backend hop); one
    per GPU."""
    from services.rerank.triton_repository import materialize

    repo = materialize(models_dir / "reranker", tmp_path / "repo", kind=kind)
    config = (repo / "rampart_reranker" / "config.pbtxt").read_text()
    assert f"instance_group [ {{ count: {count} kind: {kind} }} ]" in config


def test_onnx_reports_missing_model_and_variant(tmp_path: Path, models_dir: Path) -> None:
    with pytest.raises(RampartError, match="rampart models build") as info:
        OnnxReranker.from_dir(tmp_path)
    assert info.value.code is ErrorCode.FAILED_PRECONDITION
    with pytest.raises(RampartError, match="no 'fp32' variant"):
        OnnxReranker.from_dir(models_dir / "reranker", variant="fp32")


def test_triton_unreachable_is_unavailable_and_the_stage_degrades() -> None:
    cfg = TritonSettings(url=f"127.0.0.1:{free_port()}", retries=1)
    with pytest.raises(RampartError) as info:
        TritonReranker.connect(cfg)
    assert info.value.code is ErrorCode.UNAVAILABLE and "rampart triton serve" in info.value.message


def test_triton_version_pinning(triton_server: object) -> None:
    url = triton_server.grpc_url  # type: ignore[attr-defined]
    with pytest.raises(RampartError, match="version '2' is not ready"):
        TritonReranker.connect(TritonSettings(url=url, model_version="2"))


def test_triton_deadline_is_enforced(triton_server: object) -> None:
    remote = TritonReranker.connect(
        TritonSettings(url=triton_server.grpc_url, deadline_ms=10, batch_size=64)  # type: ignore[attr-defined]
    )
    try:
        with pytest.raises(RampartError) as info:
            remote.score("slow", ["word " * 400] * 256)
        assert info.value.code is ErrorCode.DEADLINE_EXCEEDED
        result = RerankStage(remote).apply("slow", HITS * 64, depth=256, mode="pure", weight=0.5)
        assert result.degraded == ["rerank"]
    finally:
        remote.close()


def test_server_dying_mid_batch_degrades_then_recovers(models_dir: Path, tmp_path: Path) -> None:
    """Kill Triton while a large call is in flight: the stage returns fused order, flagged; never hangs."""
    server = start_triton(models_dir, tmp_path / "a")
    remote = TritonReranker.connect(
        TritonSettings(url=server.grpc_url, deadline_ms=30_000, retries=1, batch_size=8)  # type: ignore[attr-defined]
    )
    stage = RerankStage(remote)
    results: list[object] = []
    # ~4 s of work for this model (400 distinct pairs at the model's full length): still in flight at 0.5 s
    filler = " ".join(f"word{j}" for j in range(200))
    many = HITS + [hit(i, f"passage {i} {filler}", 0.1 - i * 1e-4) for i in range(4, 400)]
    worker = threading.Thread(
        target=lambda: results.append(stage.apply("q", many, depth=400, mode="pure", weight=0.5))
    )
    try:
        worker.start()
        time.sleep(0.5)
        server.stop()  # type: ignore[attr-defined]
        worker.join(timeout=60)
        assert not worker.is_alive(), "rerank hung after the server died"
        (result,) = results
        assert result.degraded == ["rerank"]  # type: ignore[attr-defined]
        assert [h.chunk.doc_id for h in result.hits][:4] == ["d0", "d1", "d2", "d3"]  # type: ignore[attr-defined]
    finally:
        remote.close()
        server.stop()  # type: ignore[attr-defined]
