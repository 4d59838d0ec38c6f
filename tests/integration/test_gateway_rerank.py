"""Reranking through the HTTP API: on by default, off per request, options validated, ACLs kept, and
degradation to fused order (flagged, counted) when the remote reranker is unreachable."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from prometheus_client import REGISTRY

from services.common.config import CorpusProfile, CorpusSettings
from services.common.settings import RampartSettings
from services.common.types import Principal
from services.gateway.api_keys import ApiKeyStore
from services.gateway.app import create_app
from services.orchestrator.runtime import Runtime
from services.rerank.config import RerankSettings, TritonSettings
from services.rerank.reranker import Reranker
from services.retrieval.embedder import Embedder
from tests.conftest import free_port
from tests.integration.test_gateway import HANDBOOK, auth, ingest, search


def client_for(
    runtime: Runtime, tmp_path: Path, docs: list[dict[str, Any]] = HANDBOOK
) -> tuple[TestClient, dict[str, str]]:
    """A gateway over ``runtime`` with writer/alice(eng)/bob(hr) keys and ``docs`` ingested; also an
    ingest key whose documents are untrusted (wiki) and an admin key (ops-admin)."""
    keys = ApiKeyStore(tmp_path / "keys.json")
    made = {
        "writer": keys.create(Principal(tenant="acme", user="ops", scopes=["search", "ingest"]))[0],
        "alice": keys.create(Principal(tenant="acme", user="alice", groups=["eng"]))[0],
        "bob": keys.create(Principal(tenant="acme", user="bob", groups=["hr"]))[0],
        "wiki": keys.create(Principal(tenant="acme", user="wiki-sync", scopes=["ingest"]), trust="untrusted")[
            0
        ],
        "ops-admin": keys.create(Principal(tenant="acme", user="root", scopes=["admin"]))[0],
    }
    client = TestClient(create_app(runtime, keys))
    assert ingest(client, made["writer"], docs).status_code == 200
    return client, made


@pytest.fixture()
def api(runtime: Runtime, tmp_path: Path) -> Iterator[tuple[TestClient, dict[str, str]]]:
    client, made = client_for(runtime, tmp_path)
    with client:
        yield client, made


ON = {"enabled": True}


def test_search_is_reranked_by_default_and_on_request(api: tuple[TestClient, dict[str, str]]) -> None:
    client, k = api
    default = search(client, k["bob"], "how many vacation days do employees get").json()
    assert default["candidates"]["reranked"] >= 1  # on by default (rerank.enabled)
    body = search(client, k["bob"], "how many vacation days do employees get", rerank=ON).json()
    assert body["degraded"] == []
    assert body["candidates"]["reranked"] >= 1 and body["timings_ms"]["rerank"] > 0
    top = body["results"][0]
    assert top["doc_id"] == "leave" and isinstance(top["scores"]["rerank"], float)


def test_rerank_options_per_request(api: tuple[TestClient, dict[str, str]]) -> None:
    client, k = api
    off = search(client, k["bob"], "vacation days", rerank={"enabled": False}).json()
    assert "reranked" not in off["candidates"] and all("rerank" not in r["scores"] for r in off["results"])
    pure = search(client, k["bob"], "vacation days", rerank={**ON, "mode": "pure", "depth": 2}).json()
    assert pure["candidates"]["reranked"] == 2
    logits = [r["scores"]["rerank"] for r in pure["results"][:2]]
    assert logits == sorted(logits, reverse=True)  # pure mode: cross-encoder order
    for bad in (
        {"depth": 0},
        {"depth": 10_000},
        {"mode": "magic"},
        {"weight": 2},
        {"surprise": 1},
        {"link_weight": 1.5},
    ):
        resp = search(client, k["bob"], "vacation days", rerank=bad)
        assert resp.status_code == 400, (bad, resp.text)
        assert resp.json()["code"] == "invalid_argument"


TWO_HOP = [
    {
        "id": "laptop",
        "title": "Laptop refresh",
        "acl": {"groups": ["*"]},
        "text": "Engineers get a new laptop every three years; order it through Procurement Desk.",
    },
    {
        "id": "desk",
        "title": "Procurement Desk",
        "acl": {"groups": ["*"]},
        "text": "The team answers on the ops channel, weekdays from nine to five.",
    },
    {
        "id": "bags",
        "title": "Laptop bags",
        "acl": {"groups": ["*"]},
        "text": "The office shop sells laptop bags and sleeves for engineers at cost.",
    },
]


def test_link_weight_lifts_the_page_the_best_one_names(
    settings: RampartSettings, embedder: Embedder, reranker: Reranker, tmp_path: Path
) -> None:
    """The real model reads "how often do engineers get a new laptop" against each page alone: the
    Procurement Desk page, which the best page names, says nothing about laptops and ranks below the
    page on laptop bags. Lifted to 0.99 of the way to the best page's score it comes second; the raw
    logits are the same either way. The lift is a link feature: acme's corpus is linked here."""
    linked = settings.model_copy(update={"corpus": CorpusSettings(tenants={"acme": CorpusProfile.LINKED})})
    with Runtime.open(linked, embedder=embedder, reranker=reranker) as runtime:
        client, k = client_for(runtime, tmp_path, TWO_HOP)
        with client:
            query = "how often do engineers get a new laptop"
            plain = search(client, k["bob"], query, rerank={**ON, "link_weight": 0}).json()
            assert [r["doc_id"] for r in plain["results"][:3]] == ["laptop", "bags", "desk"]
            lifted = search(client, k["bob"], query, rerank={**ON, "link_weight": 0.99}).json()
            assert [r["doc_id"] for r in lifted["results"][:3]] == ["laptop", "desk", "bags"]
            logits = {r["doc_id"]: r["scores"]["rerank"] for r in plain["results"]}
            assert {r["doc_id"]: r["scores"]["rerank"] for r in lifted["results"]} == logits


def test_reranking_never_widens_acls(api: tuple[TestClient, dict[str, str]]) -> None:
    client, k = api
    for depth in (1, 5, 50):
        docs = [
            r["doc_id"]
            for r in search(
                client, k["alice"], "salary bands relocation vacation", rerank={**ON, "depth": depth}
            ).json()["results"]
        ]
        assert "bands" not in docs and "dana" not in docs


def test_unreachable_triton_degrades_to_fused_order(
    settings: RampartSettings, embedder: Embedder, tmp_path: Path
) -> None:
    dead = TritonSettings(url=f"127.0.0.1:{free_port()}", retries=0)
    s = settings.model_copy(update={"rerank": RerankSettings(backend="triton", triton=dead, enabled=True)})
    runtime = Runtime.open(s, embedder=embedder)  # starts although Triton is down
    try:
        client, k = client_for(runtime, tmp_path)
        with client:
            # metrics are process-wide (services/common/metrics.py): count this test's degradation only
            before = REGISTRY.get_sample_value("rampart_degraded_total", {"stage": "rerank"}) or 0.0
            resp = search(client, k["bob"], "how many vacation days do employees get")
            assert resp.status_code == 200
            body: dict[str, Any] = resp.json()
            assert body["degraded"] == ["rerank"]
            assert body["results"][0]["doc_id"] == "leave"  # fused order still answers
            assert all("rerank" not in r["scores"] for r in body["results"])
            ready = client.get("/v1/readiness", headers=auth(k["ops-admin"])).json()
            assert ready["rerank"].startswith("degraded")
            metrics = client.get("/metrics").text
            assert f'rampart_degraded_total{{stage="rerank"}} {before + 1!r}' in metrics
    finally:
        runtime.close()


def test_triton_backend_from_settings_serves_the_same_results(
    settings: RampartSettings, embedder: Embedder, runtime: Runtime, triton_server: Any, tmp_path: Path
) -> None:
    """RAMPART_RERANK__BACKEND=triton end to end: the factory connects to the real server and search
    returns what the in-process reranker returns."""
    remote = TritonSettings(url=triton_server.grpc_url, key=triton_server.caller_key)
    s = settings.model_copy(
        update={
            "data_dir": tmp_path / "remote-data",
            "rerank": RerankSettings(backend="triton", triton=remote, enabled=True),
        }
    )
    triton_rt = Runtime.open(s, embedder=embedder)
    try:
        assert triton_rt.reranker is not None and triton_rt.reranker.model_id.endswith("@v1")
        local_client, k_local = client_for(runtime, tmp_path / "local")
        remote_client, k_remote = client_for(triton_rt, tmp_path / "remote")
        with local_client, remote_client:
            query = "how many vacation days do employees get"
            far = search(remote_client, k_remote["bob"], query).json()
            near = search(local_client, k_local["bob"], query, rerank=ON).json()
            assert far["degraded"] == [] and far["candidates"]["reranked"] >= 1
            assert [r["doc_id"] for r in far["results"]] == [r["doc_id"] for r in near["results"]]
            assert [r["scores"]["rerank"] for r in far["results"]] == pytest.approx(
                [r["scores"]["rerank"] for r in near["results"]], abs=1e-4
            )
    finally:
        triton_rt.close()
