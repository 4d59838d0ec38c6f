"""The orchestrator as a real Ray Serve app on loopback, against the in-process pipeline.

Ray's servers bind every interface, so the app runs in a loopback-only network namespace: a driver
script (``serve_ray_driver.py``) runs there as a subprocess and writes what it saw as JSON; the tests
assert on it. ``unshare -n`` needs root; without it, ``unshare -rn`` (a user namespace) is tried, and
if neither works the tests fail, saying so: they are never skipped.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from services.api.schemas import SearchRequest
from services.common.errors import RampartError
from services.common.settings import RampartSettings
from services.common.types import Acl, Document, Principal
from services.orchestrator.runtime import Runtime
from services.orchestrator.serving.http_app import InProcessBackend, create_orchestrator_app
from services.orchestrator.serving.messages import PipelineSearchRequest
from services.orchestrator.serving.pipeline_service import PipelineService
from services.rerank.reranker import Reranker
from services.retrieval.embedder import Embedder
from tests.conftest import REPO

LOOPBACK_ONLY = 'ip link set lo up && exec "$0" "$@"'


def loopback_namespace() -> list[str]:
    """The ``unshare`` prefix that works here (root: -n; else a user namespace: -rn)."""
    tried = []
    for flags in ("-n", "-rn"):
        probe = subprocess.run(
            ["unshare", flags, "sh", "-c", "ip link set lo up"], capture_output=True, text=True, check=False
        )
        if probe.returncode == 0:
            return ["unshare", flags, "sh", "-c", LOOPBACK_ONLY]
        tried.append(f"unshare {flags}: {probe.stderr.strip() or probe.returncode}")
    pytest.fail(
        "cannot make a loopback-only network namespace for Ray (its servers bind every interface): "
        + "; ".join(tried)
        + ". Run as root or allow unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone=1)."
    )


@pytest.fixture(scope="module")
def driven(models_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    work = tmp_path_factory.mktemp("serve-ray")
    out = work / "out.json"
    # Ray's unix sockets live under RAY_TMPDIR: keep the path short (108-byte socket path limit)
    ray_tmp = Path(tempfile.mkdtemp(prefix="rr-", dir="/tmp"))
    env = {
        **os.environ,
        "RAY_TMPDIR": str(ray_tmp),
        "RAY_USAGE_STATS_ENABLED": "0",
        "RAMPART_LOG_LEVEL": "WARNING",
    }
    try:
        cmd = [*loopback_namespace(), sys.executable, "-m", "tests.integration.serve_ray_driver"]
        proc = subprocess.run(
            [*cmd, str(work / "w"), str(models_dir), "8123", str(out)],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=240,
            check=False,
        )
        assert proc.returncode == 0 and out.exists(), f"driver failed:\n{proc.stderr[-4000:]}"
        report: dict[str, Any] = json.loads(out.read_text())
        report["_ray_tmp"] = str(ray_tmp)
        yield report
    finally:
        shutil.rmtree(ray_tmp, ignore_errors=True)


def test_serve_results_equal_in_process_over_http_and_handle(driven: dict[str, Any]) -> None:
    for who in ("alice", "bob", "eve"):
        assert driven["http"][who] == driven["inprocess"][who], who
        assert driven["handle"][who] == driven["inprocess"][who], who
    assert driven["inprocess"]["bob"]["docs"], "the reference found nothing: the comparison proves nothing"
    assert driven["inprocess"]["alice"]["reranked"] is True
    assert driven["readyz"]["status"] == 200 and driven["readyz"]["body"]["index"]["chunks"] == 3


def test_serve_answers_and_adaptive_search_equal_in_process(driven: dict[str, Any]) -> None:
    for who in ("alice", "bob", "eve"):
        assert driven["http_answer"][who] == driven["inprocess_answer"][who], who
    assert driven["handle_answer"] == driven["inprocess_answer"]["alice"]
    bob = driven["inprocess_answer"]["bob"]
    assert bob["answer"] and bob["cited"], "the reference answered nothing: the comparison proves nothing"
    assert driven["inprocess_answer"]["eve"]["cited"] == []  # another tenant reads nothing
    assert driven["adaptive"]["status"] == 200 and driven["adaptive"]["route"]["type"]


def test_serve_start_on_a_locked_index_fails_with_the_cause(driven: dict[str, Any]) -> None:
    locked = driven["locked"]
    assert locked is not None and locked["code"] == "unavailable"
    assert "in use by another rampart process" in locked["message"]  # the replica's own error
    # how many constructor tries Serve makes is the deployment's option (test_serve_config); the seconds
    # they take depend on the machine's load (94 s once on a loaded 2-core run), so none are asserted


def test_serve_enforces_acl(driven: dict[str, Any]) -> None:
    assert "bands" not in driven["http"]["alice"]["docs"]  # hr-only document
    assert "bands" in driven["http"]["bob"]["docs"]
    assert driven["http"]["eve"]["docs"] == []  # another tenant gets nothing
    assert driven["handle"]["eve"]["docs"] == []


def test_serve_reconfigure_is_live_and_validated(driven: dict[str, Any]) -> None:
    before, after = driven["info_before"], driven["info_after"]
    assert before["pid"] == after["pid"], "a tunables-only change must not restart the replica"
    assert before["rerank_enabled"] is True and after["rerank_enabled"] is False
    assert after["grading"] == [before["grading"][0], 0.8]  # only the given threshold moved
    assert driven["http_norerank"]["reranked"] is False
    assert driven["http_norerank"] == driven["inprocess_norerank"]
    refused = driven["refused"]
    assert refused["depth_zero"]["code"] == "invalid_argument"
    assert "rerank_depth" in refused["depth_zero"]["message"]
    assert "rerank_dept" in refused["unknown_key"]["message"]
    assert "incorrect_threshold=0.6" in refused["thresholds_crossed"]["message"]
    assert driven["info_after_refused"] == after  # the running replica kept its tunables
    assert driven["still_serving"] == 200


def test_serve_bad_input_is_4xx_with_reason(driven: dict[str, Any]) -> None:
    bad = driven["bad"]
    expected = {
        "top_k_zero": (400, "top_k"),
        "top_k_huge": (400, "top_k=5000"),
        "long_query": (400, "10000 characters"),
        "blank_query": (400, "blank"),
        "other_tenant": (403, "globex"),
        "no_principal": (400, "principal"),
        "unknown_field": (400, "sudo"),
        "malformed": (400, "JSON"),
        "adaptive_fusion": (400, "adaptive"),  # the route picks the stages: explicit knobs are refused
    }
    for name, (status, words) in expected.items():
        assert bad[name]["status"] == status, (name, bad[name])
        assert words in bad[name]["body"]["message"], (name, bad[name]["body"])
        assert bad[name]["body"]["code"] in ("invalid_argument", "permission_denied", "failed_precondition")
    assert bad["handle_top_k_huge"]["status"] == 400
    assert bad["handle_unwrap_code"] == "invalid_argument"


def test_ray_refuses_drivers_without_the_clusters_token(driven: dict[str, Any]) -> None:
    """Token auth on (the default): a driver with no token or another one cannot join the cluster the
    orchestrator started; one with its token can (so the refusals are the token's doing)."""
    assert driven["ray_clients"] == {"no_token": False, "wrong_token": False, "own_token": True}


def test_serve_shutdown_leaves_no_ray_process(driven: dict[str, Any]) -> None:
    assert driven["ray_processes_while_running"] >= 3  # gcs, raylet, workers: the check can fail
    assert driven["left_after_shutdown"] == []
    ray_tmp = driven["_ray_tmp"]
    survivors = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes().decode(errors="replace")
            except OSError:
                continue
            if ray_tmp in cmdline:
                survivors.append(cmdline[:200])
    assert survivors == []


def test_check_health_fails_when_the_index_is_closed(
    settings: RampartSettings, embedder: Embedder, reranker: Reranker
) -> None:
    """What Serve's health check calls: a closed index makes the replica report itself unhealthy."""
    runtime = Runtime.open(settings, embedder=embedder, reranker=reranker)
    service = PipelineService(runtime)
    runtime.ingest.ingest(
        [Document(id="d", tenant="acme", acl=Acl(groups=["*"]), title="t", text="Vacation is 25 days.")]
    )
    service.check_health()  # healthy: no exception
    call = PipelineSearchRequest(
        principal=Principal(tenant="acme", user="u"), request=SearchRequest(query="vacation", top_k=3)
    )
    assert [h.doc_id for h in service.search(call).results] == ["d"]
    runtime.index.close()
    with pytest.raises(RampartError) as err:
        service.check_health()
    assert err.value.code.value == "unavailable" and err.value.details["stage"] == "index"
    if runtime.fact_checker is not None:
        runtime.fact_checker.close()  # the rest of runtime.close(); the index is closed already


def test_embedded_mode_serves_the_same_http_app_in_process(
    settings: RampartSettings, embedder: Embedder, reranker: Reranker
) -> None:
    """No Ray: the orchestrator's HTTP app over the in-process backend (the embedded mode)."""
    service = PipelineService(Runtime.open(settings, embedder=embedder, reranker=reranker))
    try:
        service.runtime.ingest.ingest(
            [Document(id="d", tenant="acme", acl=Acl(groups=["hr"]), title="t", text="Vacation is 25 days.")]
        )
        body = {
            "principal": {"tenant": "acme", "user": "bob", "groups": ["hr"]},
            "request": {"query": "vacation"},
        }
        with TestClient(create_orchestrator_app(InProcessBackend(service))) as client:
            ok = client.post("/v1/search", json=body)
            assert ok.status_code == 200 and [r["doc_id"] for r in ok.json()["results"]] == ["d"]
            body["principal"]["groups"] = ["eng"]  # type: ignore[index]
            assert client.post("/v1/search", json=body).json()["results"] == []  # ACL inside the index
            bad = client.post("/v1/search", json={**body, "request": {"query": "v", "top_k": 10_000}})
            assert bad.status_code == 400 and "top_k=10000" in bad.json()["message"]
            assert client.get("/readyz").json()["index"]["chunks"] == 1
    finally:
        service.close()
