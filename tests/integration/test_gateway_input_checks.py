"""Input checks of the HTTP API on a real runtime: wordless queries, fusion weights, booleans for
counts, wrong methods and unreadable bodies each get a 4xx naming the bad value and the fix; the gRPC
wire and the in-process retriever refuse the same queries alike."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from services.common import wire
from services.common.config import CorpusProfile, CorpusSettings
from services.common.errors import RampartError
from services.common.settings import RampartSettings
from services.common.types import Principal
from services.gateway.api_keys import ApiKeyStore
from services.gateway.app import create_app
from services.orchestrator.runtime import Runtime
from services.rerank.reranker import Reranker
from services.retrieval.config import FusionSettings
from services.retrieval.embedder import Embedder
from services.retrieval.hybrid import HybridRetriever, SearchParams

ALICE = Principal(tenant="acme", user="alice", groups=["eng"], scopes=["search", "ingest"])
LEAVE = {
    "id": "leave",
    "title": "Leave policy",
    "acl": {"groups": ["*"]},
    "text": "# Leave\n\nEvery employee gets 25 vacation days per year. Parental leave is sixteen weeks.",
}
WORDLESS = ["???", "\u0000", "🙂🙂", "\x07 \x1b", "!?-- ..."]


@contextmanager
def serve(runtime: Any, tmp_path: Any) -> Iterator[tuple[TestClient, dict[str, str]]]:
    """A gateway over ``runtime`` with LEAVE ingested and ALICE's key."""
    keys = ApiKeyStore(tmp_path / "keys.json")
    headers = {"Authorization": f"Bearer {keys.create(ALICE)[0]}"}
    with TestClient(create_app(runtime, keys)) as client:
        r = client.post("/v1/documents", json={"documents": [LEAVE]}, headers=headers)
        assert r.status_code == 200 and r.json()["indexed"] == 1, r.text
        yield client, headers


@pytest.fixture()
def api(runtime: Any, tmp_path: Any) -> Iterator[tuple[TestClient, dict[str, str]]]:
    with serve(runtime, tmp_path) as served:
        yield served


def error(resp: Any, status: int, code: str = "invalid_argument") -> dict[str, Any]:
    assert resp.status_code == status, resp.text
    body: dict[str, Any] = resp.json()
    assert set(body) == {"code", "message", "details"} and body["code"] == code, body
    return body


# ---- 1. queries without words ---------------------------------------------------------------------
@pytest.mark.parametrize("path", ["/v1/search", "/v1/answer"])
@pytest.mark.parametrize("query", WORDLESS)
def test_wordless_query_is_400_like_a_blank_one(
    api: tuple[TestClient, dict[str, str]], path: str, query: str
) -> None:
    client, headers = api
    body = error(client.post(path, json={"query": query}, headers=headers), 400)
    assert body["message"].startswith("query has no words (letters or digits) to search for: ")
    assert repr(query) in body["message"] and "send the words" in body["message"]
    assert body["details"]["field"] == "query"


def test_wordless_adaptive_search_and_history_turns(api: tuple[TestClient, dict[str, str]]) -> None:
    client, headers = api
    r = client.post("/v1/search", json={"query": "🙂🙂", "adaptive": True}, headers=headers)
    assert "has no words" in error(r, 400)["message"]
    assert "blank" in error(client.post("/v1/search", json={"query": "   "}, headers=headers), 400)["message"]


@pytest.mark.parametrize("query", ["leave", "休假", "L3", "25"])
def test_queries_with_words_in_any_script_are_served(
    api: tuple[TestClient, dict[str, str]], query: str
) -> None:
    client, headers = api
    r = client.post("/v1/search", json={"query": query, "top_k": 3}, headers=headers)
    assert r.status_code == 200, r.text


def test_wordless_query_is_refused_by_the_grpc_wire_and_in_process(runtime: Any) -> None:
    params = SearchParams.from_settings(FusionSettings(), top_k=3)
    for query in ["???", "\u0000", "🙂🙂"]:
        m = wire.search_request_to_pb(query, ALICE, params)
        with pytest.raises(RampartError) as remote:
            wire.search_request_from_pb(m)
        with pytest.raises(RampartError) as local:
            HybridRetriever(runtime.index, runtime.embedder).search(query, ALICE, params)
        assert remote.value.to_dict() == local.value.to_dict()
        assert remote.value.grpc_status == "INVALID_ARGUMENT"
        assert remote.value.details == {"field": "query"} and "has no words" in remote.value.message


# ---- 2. fusion weights ----------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("weights", "needle"),
    [
        ({"bm25": -1, "dense": 2}, "weights['bm25'] = -1.0 must be a finite number >= 0"),
        ({"bm25": 1, "dense": -0.5}, "weights['dense'] = -0.5"),
        ({"bm25": 0, "dense": 0}, "every retriever weight is 0"),
        ({"bm25": True}, "not true"),
        ({"bm25": "1"}, "body.fusion.weights.bm25"),
    ],
)
def test_bad_fusion_weights_are_400_naming_retriever_and_value(
    api: tuple[TestClient, dict[str, str]], weights: dict[str, Any], needle: str
) -> None:
    client, headers = api
    r = client.post("/v1/search", json={"query": "leave", "fusion": {"weights": weights}}, headers=headers)
    body = error(r, 400)
    assert needle in body["message"], body
    assert body["details"]["errors"][0]["field"].startswith("body.fusion.weights")


def test_good_fusion_weights_are_served(api: tuple[TestClient, dict[str, str]]) -> None:
    client, headers = api
    for weights in ({"bm25": 1, "dense": 0}, {"bm25": 0.3, "dense": 0.7}, {"dense": 2}):
        r = client.post(
            "/v1/search", json={"query": "leave", "fusion": {"weights": weights}}, headers=headers
        )
        assert r.status_code == 200, r.text


def test_negative_weight_is_refused_by_the_grpc_wire() -> None:
    m = wire.search_request_to_pb("leave", ALICE, SearchParams.from_settings(FusionSettings(), top_k=3))
    for value in (-1.0, float("inf"), float("nan")):
        m.weights["bm25"] = value
        with pytest.raises(RampartError) as err:
            wire.search_request_from_pb(m)
        assert err.value.grpc_status == "INVALID_ARGUMENT"
        assert err.value.details["field"] == "weights.bm25" and "weights['bm25']" in err.value.message


# ---- 3. booleans are not counts -------------------------------------------------------------------
@pytest.mark.parametrize(
    ("path", "extra", "field"),
    [
        ("/v1/search", {"top_k": True}, "body.top_k"),
        ("/v1/search", {"top_k": False}, "body.top_k"),
        ("/v1/answer", {"top_k": True}, "body.top_k"),
        ("/v1/search", {"fusion": {"candidates": True}}, "body.fusion.candidates"),
        ("/v1/search", {"fusion": {"rrf_k": True}}, "body.fusion.rrf_k"),
        ("/v1/search", {"fusion": {"backlinks": True}}, "body.fusion.backlinks"),
        ("/v1/search", {"rerank": {"depth": True}}, "body.rerank.depth"),
        ("/v1/search", {"factcheck": {"depth": True}}, "body.factcheck.depth"),
        ("/v1/search", {"factcheck": {"min_keep": False}}, "body.factcheck.min_keep"),
    ],
)
def test_booleans_for_integers_are_400(
    api: tuple[TestClient, dict[str, str]], path: str, extra: dict[str, Any], field: str
) -> None:
    client, headers = api
    body = error(client.post(path, json={"query": "leave", **extra}, headers=headers), 400)
    assert body["message"].startswith(f"invalid request: {field}: Input should be a valid integer, not ")
    assert "send an integer such as 10" in body["message"]


def test_plain_integers_are_still_accepted(api: tuple[TestClient, dict[str, str]]) -> None:
    client, headers = api
    r = client.post(
        "/v1/search",
        json={"query": "leave", "top_k": 2, "rerank": {"depth": 5}, "factcheck": {"depth": 5, "min_keep": 0}},
        headers=headers,
    )
    assert r.status_code == 200, r.text
    assert len(r.json()["results"]) <= 2


def test_whole_floats_are_the_integers_they_spell(api: tuple[TestClient, dict[str, str]]) -> None:
    """JSON Schema (the OpenAPI document's language) counts 2.0 as the integer 2, so a client generated
    from it may send one: served as 2. A fraction stays refused."""
    client, headers = api
    r = client.post(
        "/v1/search", json={"query": "leave", "top_k": 2.0, "fusion": {"candidates": 50.0}}, headers=headers
    )
    assert r.status_code == 200, r.text
    assert len(r.json()["results"]) <= 2
    body = error(client.post("/v1/search", json={"query": "leave", "top_k": 2.5}, headers=headers), 400)
    assert body["details"]["errors"][0]["field"] == "body.top_k"


@pytest.mark.parametrize(
    "extra",
    [
        {"rerank": {"weight": False}},
        {"rerank": {"link_weight": True}},
        {"fusion": {"bounds": {"dense": {"low": True}}}},
    ],
)
def test_booleans_for_fractions_are_400(
    api: tuple[TestClient, dict[str, str]], extra: dict[str, Any]
) -> None:
    """Schemathesis found ``rerank.weight: false`` served as 0.0: the schema says number, and a boolean
    is not one (as for the integers above)."""
    client, headers = api
    error(client.post("/v1/search", json={"query": "leave", **extra}, headers=headers), 400)


@pytest.mark.parametrize(
    "extra",
    [
        {"rerank": {"enabled": 0.0}},
        {"factcheck": {"enabled": 1}},
        {"fusion": {"fill_missing": "yes"}},
        {"adaptive": "true"},
    ],
)
def test_numbers_and_strings_for_booleans_are_400(
    api: tuple[TestClient, dict[str, str]], extra: dict[str, Any]
) -> None:
    """Schemathesis found ``rerank.enabled: 0.0`` served as false: the schema says boolean."""
    client, headers = api
    error(client.post("/v1/search", json={"query": "leave", **extra}, headers=headers), 400)


def test_a_version_past_int64_is_400_not_500(api: tuple[TestClient, dict[str, str]]) -> None:
    """Schemathesis found a version above 2**63 - 1 reaching SQLite (OverflowError: a 500); the bound
    is in the model now, and stated in the OpenAPI document."""
    client, headers = api
    for version in (2**63, 2**70):
        doc = {**LEAVE, "id": "huge", "version": version}
        body = error(client.post("/v1/documents", json={"documents": [doc]}, headers=headers), 400)
        assert body["details"]["errors"][0]["field"] == "body.documents.0.version"


@pytest.mark.parametrize("weights", [{"graph": 1}, {"graph": 1, "bm25": 0}])
def test_a_search_of_the_graph_alone_that_finds_nothing_is_empty_not_400(
    api: tuple[TestClient, dict[str, str]], weights: dict[str, float]
) -> None:
    """Whether the graph finds anything depends on the index, not on the request: a 400 refused a
    request the schema admits. No results, and ``graph.status`` says why."""
    client, headers = api
    r = client.post("/v1/search", json={"query": "leave", "fusion": {"weights": weights}}, headers=headers)
    assert r.status_code == 200, r.text
    assert r.json()["results"] == [] and r.json()["graph"]["status"] in ("no_entity", "no_graph")


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"query": "leave", "session_id": "s_short"}, "body.session_id"),
        ({"query": "leave", "adaptive": True, "session_id": ""}, "body.session_id"),
        ({"query": "leave", "fusion": {"weights": {"bm25": 1, "bm42": 1}}}, "body.fusion.weights"),
        ({"query": "leave", "fusion": {"weights": {}}}, "body.fusion.weights"),
    ],
)
def test_what_the_schema_refuses_the_model_refuses(
    api: tuple[TestClient, dict[str, str]], body: dict[str, Any], field: str
) -> None:
    """A session id the server could never have minted, unknown retrievers and no weight at all are
    refused by the request model, as the OpenAPI document's pattern and weights rule say."""
    client, headers = api
    assert (
        error(client.post("/v1/search", json=body, headers=headers), 400)["details"]["errors"][0]["field"]
        == field
    )


@pytest.mark.parametrize(("field", "value"), [("link_seeds", 21), ("backlinks", 11), ("backlinks", -1)])
def test_link_counts_out_of_range_are_400(
    api: tuple[TestClient, dict[str, str]], field: str, value: int
) -> None:
    client, headers = api
    r = client.post("/v1/search", json={"query": "leave", "fusion": {field: value}}, headers=headers)
    body = error(r, 400)
    assert body["details"]["errors"][0]["field"] == f"body.fusion.{field}"


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"fusion": {"link_seeds": 3}}, "fusion.link_seeds"),
        ({"fusion": {"link_seeds": 0, "backlinks": 2}}, "fusion.backlinks"),
        ({"rerank": {"link_weight": 0.5}}, "rerank.link_weight"),
    ],
)
def test_link_options_are_refused_for_a_generic_tenant(
    api: tuple[TestClient, dict[str, str]], options: dict[str, Any], field: str
) -> None:
    """acme's corpus profile is generic (the default), which switches the link features off: asking
    for one is refused naming the option and the fix, not a knob silently ignored; 0 (off) is served.
    412 failed_precondition, not 400: the request is well formed (the OpenAPI document admits it), the
    tenant's configuration refuses it."""
    client, headers = api
    r = client.post("/v1/search", json={"query": "leave", **options}, headers=headers)
    body = error(r, 412, "failed_precondition")
    assert body["details"]["field"] == field
    assert "corpus profile is generic" in body["message"]
    assert """RAMPART_CORPUS__TENANTS='{"acme": "linked"}'""" in body["message"], body["message"]
    off = {"fusion": {"link_seeds": 0, "backlinks": 0}, "rerank": {"link_weight": 0}}
    assert client.post("/v1/search", json={"query": "leave", **off}, headers=headers).status_code == 200


def test_backlinks_per_request_are_served_to_a_linked_tenant(
    settings: RampartSettings, embedder: Embedder, reranker: Reranker, tmp_path: Path
) -> None:
    linked = settings.model_copy(update={"corpus": CorpusSettings(tenants={"acme": CorpusProfile.LINKED})})
    with (
        Runtime.open(linked, embedder=embedder, reranker=reranker) as runtime,
        serve(runtime, tmp_path) as api,
    ):
        client, headers = api
        for backlinks in (0, 10):
            r = client.post(
                "/v1/search",
                json={"query": "leave", "fusion": {"link_seeds": 3, "backlinks": backlinks}},
                headers=headers,
            )
            assert r.status_code == 200, r.text


# ---- 4. wrong method ------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("method", "path", "allowed"), [("GET", "/v1/search", "POST"), ("PUT", "/v1/documents", "POST")]
)
def test_wrong_method_is_405_method_not_allowed_with_allow(
    api: tuple[TestClient, dict[str, str]], method: str, path: str, allowed: str
) -> None:
    client, headers = api
    r = client.request(method, path, headers=headers)
    body = error(r, 405, "method_not_allowed")
    assert r.headers["allow"] == allowed
    assert body["message"] == f"method {method} is not allowed on {path}; use {allowed}"
    assert body["details"] == {"method": method, "allow": [allowed]}


# ---- 5. unreadable bodies -------------------------------------------------------------------------
def test_malformed_json_names_the_body_and_the_position(api: tuple[TestClient, dict[str, str]]) -> None:
    client, headers = api
    r = client.post(
        "/v1/search", content=b'{"query": "x",', headers={**headers, "content-type": "application/json"}
    )
    body = error(r, 400)
    assert body["message"].startswith(
        "invalid request: body: request body is not valid JSON (at character 14: "
    )
    assert "content-type: application/json" in body["message"]
    assert [e["field"] for e in body["details"]["errors"]] == ["body"]


@pytest.mark.parametrize("content_type", [None, "text/plain"])
def test_body_without_json_content_type_says_so(
    api: tuple[TestClient, dict[str, str]], content_type: str | None
) -> None:
    client, headers = api
    sent = {**headers, **({"content-type": content_type} if content_type else {})}
    body = error(client.post("/v1/search", content=b'{"query": "leave"}', headers=sent), 400)
    assert "content-type: application/json" in body["message"]
    assert "valid dictionary" not in body["message"]
    assert body["details"]["errors"][0]["field"] == "body"


def test_missing_body_and_non_object_body(api: tuple[TestClient, dict[str, str]]) -> None:
    client, headers = api
    json_headers = {**headers, "content-type": "application/json"}
    missing = error(client.post("/v1/search", headers=json_headers), 400)
    assert "request body is missing" in missing["message"]
    listed = error(client.post("/v1/search", content=b'["leave"]', headers=json_headers), 400)
    assert "request body must be a JSON object, not list" in listed["message"]
    string = error(client.post("/v1/search", content=b'"hello"', headers=json_headers), 400)
    assert "request body must be a JSON object, not str" in string["message"]
    latin1 = error(client.post("/v1/search", content=b'{"query": "caf\xe9"}', headers=json_headers), 400)
    assert "UTF-8" in latin1["message"]


# ---- 6. the documented query limit ----------------------------------------------------------------
def test_query_length_limit_is_as_documented(api: tuple[TestClient, dict[str, str]], runtime: Any) -> None:
    client, headers = api
    limit = runtime.settings.gateway.max_query_chars
    assert limit == 2000
    assert client.post("/v1/search", json={"query": "a" * limit}, headers=headers).status_code == 200
    body = error(client.post("/v1/search", json={"query": "a" * (limit + 1)}, headers=headers), 400)
    assert body["message"] == f"query is {limit + 1} characters, the limit is {limit}; shorten it"


# ---- the API docs work offline ------------------------------------------------------------------


def test_docs_page_needs_no_cdn(api: tuple[TestClient, dict[str, str]]) -> None:
    client, _ = api
    page = client.get("/docs")
    assert page.status_code == 200
    assert "cdn." not in page.text and "https://" not in page.text.split("<body>")[0], page.text[:500]
    assets = re.findall(r'(?:src|href)="(/[^"]+\.(?:js|css))"', page.text)
    assert assets, page.text[:500]
    for path in assets:  # served by the gateway itself, without a key
        assert client.get(path).status_code == 200, path
