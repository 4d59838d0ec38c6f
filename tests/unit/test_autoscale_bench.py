"""How `rampart bench autoscale` reads Serve's replicas and judges what the autoscaler did."""

from __future__ import annotations

import subprocess
import sys
import time

from services.evaluation.scale_bench import (
    ReplicaSampler,
    autoscale_summary,
    replica_deployment,
    serve_replicas,
)


def test_replica_titles_name_their_deployment() -> None:
    assert (
        replica_deployment("ray::ServeReplica:rampart-orchestrator:PipelineDeployment")
        == "PipelineDeployment"
    )
    running = "ray::ServeReplica:rampart-orchestrator:PipelineDeployment.handle_request_with_rejection"
    assert replica_deployment(running) == "PipelineDeployment"
    assert replica_deployment("ray::ServeReplica:app:OrchestratorIngress") == "OrchestratorIngress"
    for other in (
        "ray::IDLE",
        "ray::ServeController",
        "python -m ray::ServeReplica:a:B",
        "ray::ServeReplica:",
    ):
        assert replica_deployment(other) is None, other


def test_replicas_are_counted_from_real_process_titles() -> None:
    """Two processes titled as Serve titles its replicas (argv[0], as setproctitle leaves it) are
    counted; a third of another deployment is not."""
    script = "import sys, time; time.sleep(30)"
    titles = ["ray::ServeReplica:t:TestOnlyDeployment", "ray::ServeReplica:t:TestOnlyDeployment.run"]
    procs = [
        subprocess.Popen([title, "-c", script], executable=sys.executable)
        for title in [*titles, "ray::ServeReplica:t:OtherDeployment"]
    ]
    try:
        deadline = time.monotonic() + 10
        while serve_replicas("TestOnlyDeployment") < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert serve_replicas("TestOnlyDeployment") == 2
    finally:
        for p in procs:
            p.kill()
            p.wait()
    assert serve_replicas("TestOnlyDeployment") == 0


def test_the_sampler_records_counts_over_time() -> None:
    counts = iter(range(100))
    with ReplicaSampler(0.01, count=lambda: next(counts)) as sampler:
        time.sleep(0.1)
    assert len(sampler.samples) >= 3
    assert [n for _, n in sampler.samples] == list(range(len(sampler.samples)))
    assert all(a[0] <= b[0] for a, b in zip(sampler.samples, sampler.samples[1:], strict=False))


def test_a_pipeline_that_scales_up_then_down_is_as_asked() -> None:
    samples = [(0, 1), (10, 1), (20, 1), (32, 2), (50, 2), (80, 2), (100, 2), (150, 1), (170, 1)]
    s = autoscale_summary(samples, load_start=20, load_end=80, low=1, high=2)
    assert s["replicas_before"] == 1 and s["replicas_max_under_load"] == 2 and s["replicas_at_end"] == 1
    assert (s["first_added_after_s"], s["ceiling_after_s"], s["back_to_floor_after_s"]) == (12, 12, 70)
    assert s["as_asked"] is True


def test_what_is_not_as_asked() -> None:
    never_up = [(0, 1), (20, 1), (50, 1), (80, 1), (120, 1)]
    assert autoscale_summary(never_up, 20, 80, 1, 2)["as_asked"] is False
    never_down = [(0, 1), (20, 1), (40, 2), (80, 2), (120, 2)]
    s = autoscale_summary(never_down, 20, 80, 1, 2)
    assert s["back_to_floor_after_s"] is None and s["as_asked"] is False
    up_before_load = [(0, 2), (20, 2), (40, 2), (80, 2), (120, 1)]
    assert autoscale_summary(up_before_load, 20, 80, 1, 2)["as_asked"] is False
    # down, then up again before the end: back at the floor only from the last rise on
    bounce = [(0, 1), (30, 2), (80, 2), (100, 1), (110, 2), (130, 1), (140, 1)]
    assert autoscale_summary(bounce, 20, 80, 1, 2)["back_to_floor_after_s"] == 50
    short_of_ceiling = [(0, 1), (30, 2), (80, 2), (120, 1)]
    assert autoscale_summary(short_of_ceiling, 20, 80, 1, 3)["as_asked"] is False


def test_a_bench_folder_is_removed_when_done_and_kept_named_when_it_fails() -> None:
    import pytest

    from services.evaluation.stack_bench import bench_folder

    said: list[str] = []
    with bench_folder("rtest-", said.append) as work:
        (work / "f").write_text("x")
    assert not work.exists() and said == []
    with pytest.raises(RuntimeError), bench_folder("rtest-", said.append) as kept:
        raise RuntimeError("the bench failed")
    try:
        assert kept.is_dir() and said == [
            f"kept {kept} for its logs (stack/logs/<program>.log); remove it when done"
        ]
    finally:
        kept.rmdir()
