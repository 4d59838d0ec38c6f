"""Drive a real Ray Serve orchestrator and write what it saw as JSON (run by test_serve_ray.py).

Runs inside a loopback-only network namespace (Ray's servers bind every interface). Usage:
``python -m tests.integration.serve_ray_driver WORK_DIR MODELS_DIR PORT OUT_JSON``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from services.api.schemas import AnswerRequest, AnswerResponse, SearchRequest, SearchResponse
from services.common.errors import RampartError
from services.common.settings import RampartSettings
from services.common.types import Document, Principal
from services.evaluation.serve_bench import descendants
from services.orchestrator.runtime import Runtime
from services.orchestrator.serving.config import ServeSettings
from services.orchestrator.serving.messages import PipelineAnswerRequest, PipelineReply, PipelineSearchRequest
from services.orchestrator.serving.pipeline_service import PipelineService
from services.orchestrator.serving.serve_config import LiveTunables

HANDBOOK = [
    {
        "id": "leave",
        "title": "Leave policy",
        "acl": {"groups": ["*"]},
        "text": "# Leave\n\nEvery employee gets 25 vacation days per year. Parental leave is sixteen weeks.",
    },
    {
        "id": "bands",
        "title": "Salary bands",
        "acl": {"groups": ["hr"]},
        "text": "Engineering salary bands: L3 earns 120k to 140k. Vacation days are not part of pay.",
    },
    {
        "id": "vpn",
        "title": "VPN setup",
        "acl": {"groups": ["eng", "hr"]},
        "text": "Install the VPN client, then sign in with your badge number. Vacation days need a ticket.",
    },
]
PRINCIPALS = {
    "alice": Principal(tenant="acme", user="alice", groups=["eng"]),
    "bob": Principal(tenant="acme", user="bob", groups=["hr"]),
    "eve": Principal(tenant="globex", user="eve", groups=["hr", "eng"]),
}
QUERY = "How many vacation days do I get?"


def call(who: str, **request: Any) -> PipelineSearchRequest:
    body = SearchRequest.model_validate({"query": QUERY, "top_k": 5, **request})
    return PipelineSearchRequest(principal=PRINCIPALS[who], request=body)


def answer_call(who: str, **request: Any) -> PipelineAnswerRequest:
    body = AnswerRequest.model_validate({"query": QUERY, "top_k": 3, **request})
    return PipelineAnswerRequest(principal=PRINCIPALS[who], request=body)


def answer_summary(resp: AnswerResponse | dict[str, Any]) -> dict[str, Any]:
    """What must match across transports for an answer (session ids are random, timings vary)."""
    r = resp if isinstance(resp, dict) else resp.model_dump(mode="json")
    return {
        "answer": r["answer"],
        "method": r["method"],
        "cited": [c["doc_id"] for c in r["citations"]],
        "route": r["adaptive"]["route"]["type"],
        "grade": (r["adaptive"]["grade"] or {}).get("grade"),
        "docs": [h["doc_id"] for h in r["results"]],
    }


def summary(resp: SearchResponse | dict[str, Any]) -> dict[str, Any]:
    """What must match across transports: ranking, scores, verdicts (not timings or request ids)."""
    r = resp if isinstance(resp, dict) else resp.model_dump(mode="json")
    return {
        "docs": [h["doc_id"] for h in r["results"]],
        "chunks": [h["chunk_id"] for h in r["results"]],
        "fused": [round(h["fused"], 4) for h in r["results"]],
        "reranked": "rerank" in r["timings_ms"],
        "verdicts": [(h["verdict"] or {}).get("verdict") for h in r["results"]],
        "degraded": r["degraded"],
    }


def main(work: Path, models_dir: Path, port: int, out: Path) -> None:
    from services.orchestrator.serving import serve_app

    report: dict[str, Any] = {}
    settings = RampartSettings(
        data_dir=work / "data",
        models_dir=models_dir,
        log_level="WARNING",
        serve=ServeSettings(
            port=port,
            ingress_max_replicas=1,
            health_check_period_s=2.0,
            ready_timeout_s=60.0,
            object_store_mb=100,
        ),
    )
    # 1. the in-process reference, on the same index the replica will open
    runtime = Runtime.open(settings)
    docs = [Document.model_validate({**d, "tenant": "acme"}) for d in HANDBOOK]
    runtime.ingest.ingest(docs)
    service = PipelineService(runtime)
    report["inprocess"] = {who: summary(service.search(call(who))) for who in PRINCIPALS}
    report["inprocess_answer"] = {who: answer_summary(service.answer(answer_call(who))) for who in PRINCIPALS}
    service.reconfigure(LiveTunables(rerank_enabled=False))
    report["inprocess_norerank"] = summary(service.search(call("alice")))

    # 2. the same through Ray Serve; first while this process still holds the index: a clear error
    serve_app.connect(settings)
    started = time.monotonic()
    try:
        serve_app.deploy(settings)
        report["locked"] = None
    except RampartError as exc:
        report["locked"] = {"code": exc.code.value, "message": exc.message}
    report["locked_s"] = round(time.monotonic() - started, 1)
    service.close()
    started = time.monotonic()
    serve_app.deploy(settings)
    serve_app.wait_http_ready(settings)
    report["ready_s"] = round(time.monotonic() - started, 1)
    base = serve_app.base_url(settings)
    pipeline = serve_app.pipeline_handle(settings)
    with httpx.Client(base_url=base, timeout=60) as http:
        report["http"] = {}
        for who in PRINCIPALS:
            r = http.post("/v1/search", json=call(who).model_dump(mode="json"))
            report["http"][who] = summary(r.json()) if r.status_code == 200 else {"status": r.status_code}
        report["http_answer"] = {}
        for who in PRINCIPALS:
            r = http.post("/v1/answer", json=answer_call(who).model_dump(mode="json"))
            report["http_answer"][who] = (
                answer_summary(r.json()) if r.status_code == 200 else {"status": r.status_code}
            )
        report["handle_answer"] = answer_summary(
            pipeline.answer.remote(answer_call("alice")).result(timeout_s=60).unwrap_answer()
        )
        adaptive = http.post("/v1/search", json=call("alice", adaptive=True).model_dump(mode="json"))
        report["adaptive"] = {
            "status": adaptive.status_code,
            "route": adaptive.json().get("adaptive", {}).get("route"),
        }
        report["handle"] = {
            who: summary(pipeline.search.remote(call(who)).result(timeout_s=60).unwrap())
            for who in PRINCIPALS
        }
        ready = http.get("/readyz")
        report["readyz"] = {"status": ready.status_code, "body": ready.json()}

        # bad input: each must be a 4xx with a reason, never a 500 or a hang
        good = call("alice").model_dump(mode="json")
        bad_bodies = {
            "top_k_zero": {**good, "request": {**good["request"], "top_k": 0}},
            "top_k_huge": {**good, "request": {**good["request"], "top_k": 5000}},
            "long_query": {**good, "request": {**good["request"], "query": "x" * 10_000}},
            "blank_query": {**good, "request": {**good["request"], "query": "   "}},
            "other_tenant": {**good, "request": {**good["request"], "tenant": "globex"}},
            "no_principal": {"request": good["request"]},
            "unknown_field": {**good, "sudo": True},
            "adaptive_fusion": {
                **good,
                "request": {**good["request"], "adaptive": True, "fusion": {"method": "rrf"}},
            },
        }
        report["bad"] = {}
        for name, body in bad_bodies.items():
            r = http.post("/v1/search", json=body)
            report["bad"][name] = {"status": r.status_code, "body": r.json()}
        r = http.post("/v1/search", content=b"{not json", headers={"content-type": "application/json"})
        report["bad"]["malformed"] = {"status": r.status_code, "body": r.json()}
        handle_error: PipelineReply = pipeline.search.remote(call("alice", top_k=5000)).result(timeout_s=60)
        report["bad"]["handle_top_k_huge"] = {"status": handle_error.status, "error": handle_error.error}
        try:
            handle_error.unwrap()
        except RampartError as exc:
            report["bad"]["handle_unwrap_code"] = exc.code.value

        # live reconfigure: same replica process, new behaviour
        report["info_before"] = pipeline.info.remote().result(timeout_s=30)
        serve_app.deploy(settings, LiveTunables(rerank_enabled=False, grading_correct_threshold=0.8))
        report["info_after"] = pipeline.info.remote().result(timeout_s=30)
        r = http.post("/v1/search", json=good)
        report["http_norerank"] = summary(r.json())

        # a bad live config is refused before anything is deployed; the app keeps serving
        report["refused"] = {}
        for name, config in {
            "depth_zero": {"rerank_depth": 0},
            "unknown_key": {"rerank_dept": 20},
            "thresholds_crossed": {"grading_correct_threshold": 0.3, "grading_incorrect_threshold": 0.6},
        }.items():
            try:
                serve_app.deploy(settings, LiveTunables.parse(config))
                report["refused"][name] = None
            except RampartError as exc:
                report["refused"][name] = {"code": exc.code.value, "message": exc.message}
        report["info_after_refused"] = pipeline.info.remote().result(timeout_s=30)
        report["still_serving"] = http.post("/v1/search", json=good).status_code

    # 3. Ray's token auth, from outside: a driver without the token, or with another, is refused
    import ray

    report["ray_clients"] = ray_clients(ray.get_runtime_context().gcs_address)

    # 4. clean shutdown: nothing Ray started may outlive it
    ray_procs = descendants(os.getpid())
    report["ray_processes_while_running"] = len(ray_procs)
    serve_app.shutdown()
    deadline = time.monotonic() + 20
    while (left := descendants(os.getpid())) and time.monotonic() < deadline:
        time.sleep(0.2)
    report["left_after_shutdown"] = sorted(left)
    out.write_text(json.dumps(report, default=str))


def ray_clients(gcs: str) -> dict[str, bool]:
    """Whether a driver joins the cluster at ``gcs`` with no token, a wrong one and the cluster's own
    (run side by side: a refused driver gives up after ~20 s of retries)."""
    code = f"import ray; ray.init(address={gcs!r}); print('JOINED')"
    own = {k: v for k, v in os.environ.items() if k.startswith("RAY_AUTH")}
    base = {k: v for k, v in os.environ.items() if not k.startswith("RAY_AUTH")}
    tries = {
        "no_token": {"RAY_AUTH_MODE": "disabled"},
        "wrong_token": {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": "0" * 64},
        "own_token": own,
    }
    procs = {
        name: subprocess.Popen(  # this interpreter, a fixed snippet
            [sys.executable, "-c", code],
            env={**base, **env},
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        for name, env in tries.items()
    }
    joined = {}
    for name, proc in procs.items():
        try:
            stdout, _ = proc.communicate(timeout=90)
        except subprocess.TimeoutExpired:
            proc.kill()
            stdout, _ = proc.communicate()
        joined[name] = b"JOINED" in stdout
    return joined


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3]), Path(sys.argv[4]))
