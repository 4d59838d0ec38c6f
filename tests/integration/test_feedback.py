"""``POST /v1/feedback`` through the real gateway over a real embedded runtime (issue 40, point 1):
labels on results a search showed, stored durably, refused for results not shown and for another
principal's requests, exported per tenant (store and CLI); the Redis backend with two gateway
replicas sharing one real redis-server as the gateway's ACL user, surviving a restart."""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from services.cli.main import app as cli
from services.common.redis_server import RedisAuth
from services.common.settings import RampartSettings
from services.common.types import Principal
from services.gateway.api_keys import ApiKeyStore
from services.gateway.app import create_app
from services.learning.config import MAX_COMMENT_CHARS, FeedbackSettings
from services.learning.feedback_store import Impression, Shown, build_feedback_store
from services.orchestrator.runtime import Runtime
from services.rerank.reranker import Reranker
from services.retrieval.embedder import Embedder
from tests.integration.redis_server import RedisServer

CORPUS = {
    "acme": [
        {"id": "leave", "acl": {"groups": ["*"]}, "text": "Every employee gets 25 vacation days per year."},
        {"id": "vpn", "acl": {"groups": ["*"]}, "text": "Connect to the VPN with the corporate client."},
    ],
    "globex": [{"id": "leave", "acl": {"groups": ["*"]}, "text": "Globex staff get 30 vacation days."}],
}
PEOPLE = {
    "alice": Principal(tenant="acme", user="alice", groups=["eng"], scopes=["search", "ingest"]),
    "bob": Principal(tenant="acme", user="bob", groups=["eng"], scopes=["search"]),
    "carol": Principal(tenant="globex", user="carol", groups=["ops"], scopes=["search", "ingest"]),
}
# fast searches: the feedback path is under test, not the reranker or the fact-check
PLAIN = {"rerank": {"enabled": False}, "factcheck": {"enabled": False}}


@dataclass
class Gateway:
    client: TestClient
    keys: dict[str, dict[str, str]]

    def search(self, who: str, query: str = "vacation days") -> dict[str, object]:
        r = self.client.post("/v1/search", json={"query": query, "top_k": 5, **PLAIN}, headers=self.keys[who])
        assert r.status_code == 200, r.text
        body: dict[str, object] = r.json()
        assert body["results"], body
        return body

    def feedback(
        self, who: str, request_id: object, *items: dict[str, object]
    ) -> tuple[int, dict[str, object]]:
        r = self.client.post(
            "/v1/feedback", json={"request_id": request_id, "feedback": list(items)}, headers=self.keys[who]
        )
        return r.status_code, r.json()


def chunk(body: dict[str, object], n: int = 0) -> str:
    results = body["results"]
    assert isinstance(results, list)
    return str(results[n]["chunk_id"])


@contextlib.contextmanager
def gateway(
    settings: RampartSettings, embedder: Embedder, reranker: Reranker, keys: ApiKeyStore, **gw: object
) -> Iterator[Gateway]:
    """One gateway (a replica, when several share a Redis) over its own runtime on ``settings``;
    rate limits off unless ``gw`` sets them."""
    unlimited = settings.gateway.model_copy(update={"rate_limit_per_minute": 0, **gw})
    changed = settings.model_copy(update={"gateway": unlimited})
    with (
        Runtime.open(changed, embedder=embedder, reranker=reranker) as rt,
        TestClient(create_app(rt, keys)) as client,
    ):
        headers = {who: {"Authorization": f"Bearer {key}"} for who, key in issued(keys).items()}
        yield Gateway(client, headers)


def issued(keys: ApiKeyStore) -> dict[str, str]:
    """A key per person, made once per key file (replicas share the file, as they share the key Secret)."""
    cache = _ISSUED.setdefault(str(keys.path), {})
    for who, principal in PEOPLE.items():
        if who not in cache:
            cache[who] = keys.create(principal)[0]
    return cache


_ISSUED: dict[str, dict[str, str]] = {}


def ingest(gw: Gateway) -> None:
    for who in ("alice", "carol"):
        tenant = PEOPLE[who].tenant
        r = gw.client.post("/v1/documents", json={"documents": CORPUS[tenant]}, headers=gw.keys[who])
        assert r.status_code == 200 and r.json()["indexed"] == len(CORPUS[tenant]), r.text


@pytest.fixture()
def embedded(
    settings: RampartSettings, embedder: Embedder, reranker: Reranker, tmp_path: Path
) -> Iterator[Gateway]:
    with gateway(settings, embedder, reranker, ApiKeyStore(tmp_path / "keys.json")) as gw:
        ingest(gw)
        yield gw


def test_feedback_is_stored_with_the_search_it_labels(embedded: Gateway, settings: RampartSettings) -> None:
    shown = embedded.search("alice")
    first, second = chunk(shown, 0), chunk(shown, 1)
    status, body = embedded.feedback(
        "alice",
        shown["request_id"],
        {"chunk_id": first, "label": "relevant", "comment": "exactly this"},
        {"chunk_id": second, "label": "not_relevant"},
        {"chunk_id": first, "label": "clicked"},
    )
    assert status == 200, body
    assert body["accepted"] == 3 and body["request_id"] == shown["request_id"]
    events = list(build_feedback_store(settings).export("acme"))
    assert [(e.chunk_id, e.label) for e in events] == [
        (first, "relevant"),
        (second, "not_relevant"),
        (first, "clicked"),
    ]
    e = events[0]
    assert (e.tenant, e.user, e.query, e.action, e.rank) == ("acme", "alice", "vacation days", "search", 1)
    assert e.comment == "exactly this" and e.credential.startswith("key:") and e.doc_id in ("leave", "vpn")
    assert e.feedback_request_id == body["feedback_request_id"]


def test_answers_take_feedback_too(embedded: Gateway) -> None:
    r = embedded.client.post(
        "/v1/answer", json={"query": "How many vacation days?"}, headers=embedded.keys["alice"]
    )
    assert r.status_code == 200, r.text
    answer = r.json()
    assert answer["results"], answer
    status, body = embedded.feedback(
        "alice", answer["request_id"], {"chunk_id": chunk(answer), "label": "relevant"}
    )
    assert status == 200, body


def test_a_result_not_shown_is_refused_naming_it(embedded: Gateway) -> None:
    shown = embedded.search("alice")
    status, body = embedded.feedback(
        "alice",
        shown["request_id"],
        {"chunk_id": chunk(shown), "label": "clicked"},
        {"chunk_id": "nope:9", "label": "relevant"},
    )
    assert status == 404 and body["code"] == "not_found"
    assert "feedback[1].chunk_id 'nope:9' was not among the results" in body["message"]
    assert body["details"]["field"] == "feedback[1].chunk_id"


def test_another_principals_request_is_unknown_as_one_never_issued(embedded: Gateway) -> None:
    shown = embedded.search("alice")
    status, theirs = embedded.feedback(
        "bob", shown["request_id"], {"chunk_id": chunk(shown), "label": "relevant"}
    )
    assert status == 404
    status, never = embedded.feedback(
        "bob", "0123456789abcdef", {"chunk_id": chunk(shown), "label": "relevant"}
    )
    assert status == 404
    # the same words but for the id: bob learns nothing about alice's request
    assert theirs["message"].replace(str(shown["request_id"]), "X") == never["message"].replace(
        "0123456789abcdef", "X"
    )
    # the same request id, chosen by bob for his own search (x-request-id), is his own impression
    r = embedded.client.post(
        "/v1/search",
        json={"query": "VPN client", **PLAIN},
        headers={**embedded.keys["bob"], "x-request-id": str(shown["request_id"])},
    )
    assert r.status_code == 200 and r.json()["request_id"] == shown["request_id"]
    status, body = embedded.feedback(
        "bob", shown["request_id"], {"chunk_id": chunk(r.json()), "label": "clicked"}
    )
    assert status == 200, body
    status, body = embedded.feedback(
        "alice", shown["request_id"], {"chunk_id": chunk(shown), "label": "clicked"}
    )
    assert status == 200, body  # alice's impression is untouched by bob's


def test_bad_input_is_refused_with_the_value_and_the_fix(embedded: Gateway) -> None:
    shown = embedded.search("alice")
    rid, cid = shown["request_id"], chunk(shown)
    status, body = embedded.feedback("alice", rid, {"chunk_id": cid, "label": "great"})
    assert status == 400 and "label" in json.dumps(body["details"]) and "relevant" in json.dumps(body)
    status, body = embedded.feedback(
        "alice", rid, {"chunk_id": cid, "label": "relevant", "comment": "x" * (MAX_COMMENT_CHARS + 1)}
    )
    assert status == 400 and "comment" in json.dumps(body["details"])
    status, body = embedded.feedback("alice", "short", {"chunk_id": cid, "label": "relevant"})
    assert status == 400 and "request_id" in json.dumps(body["details"])
    status, body = embedded.feedback("alice", rid)
    assert status == 400 and "feedback" in json.dumps(body["details"])
    r = embedded.client.post(
        "/v1/feedback", json={"request_id": rid, "feedback": [{"chunk_id": cid, "label": "relevant"}]}
    )
    assert r.status_code == 401  # authenticated like a search


def test_an_expired_impression_says_so(embedded: Gateway, settings: RampartSettings) -> None:
    long_ago = time.time() - 7200
    store = build_feedback_store(settings)  # a second connection to the server's file
    store.remember(
        Impression(
            "acme",
            "alice",
            "expired-request",
            "search",
            "q",
            (Shown("c1", "leave", 1),),
            long_ago,
            long_ago + 3600,
        )
    )
    status, body = embedded.feedback("alice", "expired-request", {"chunk_id": "c1", "label": "relevant"})
    assert status == 404 and "expired at" in body["message"] and "search again" in body["message"]


def test_export_is_per_tenant_and_survives_a_restart(
    settings: RampartSettings, embedder: Embedder, reranker: Reranker, tmp_path: Path
) -> None:
    keys = ApiKeyStore(tmp_path / "keys.json")
    with gateway(settings, embedder, reranker, keys) as gw:
        ingest(gw)
        for who in ("alice", "carol"):
            shown = gw.search(who)
            status, body = gw.feedback(
                who, shown["request_id"], {"chunk_id": chunk(shown), "label": "relevant"}
            )
            assert status == 200, body
    # the gateway is gone: its store is closed; a new one over the same file has every event
    store = build_feedback_store(settings)
    assert [e.user for e in store.export("acme")] == ["alice"]
    assert [e.user for e in store.export("globex")] == ["carol"]
    assert sorted(e.tenant for e in store.export()) == ["acme", "globex"]
    assert list(store.export("acme", since=time.time() + 60)) == []
    store.close()
    # and through the CLI, as JSON lines
    env = {"RAMPART_DATA_DIR": str(settings.data_dir), "RAMPART_LOG_LEVEL": "WARNING"}
    out = tmp_path / "acme.jsonl"
    result = CliRunner().invoke(cli, ["feedback", "export", "--tenant", "acme", "--out", str(out)], env=env)
    assert result.exit_code == 0, result.output
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(d["tenant"], d["user"], d["label"]) for d in lines] == [("acme", "alice", "relevant")]
    assert out.stat().st_mode & 0o777 == 0o600
    result = CliRunner().invoke(
        cli, ["feedback", "export", "--since", "2000-01-01", "--until", "2999-01-01"], env=env
    )
    assert result.exit_code == 0 and {json.loads(x)["tenant"] for x in result.stdout.splitlines()} == {
        "acme",
        "globex",
    }
    result = CliRunner().invoke(cli, ["feedback", "export", "--since", "yesterday"], env=env)
    assert result.exit_code == 2 and "ISO 8601" in result.output


def test_redis_backend_is_shared_by_replicas_and_durable(
    settings: RampartSettings, embedder: Embedder, reranker: Reranker, tmp_path: Path
) -> None:
    """Two gateways on one redis-server, logged in as the gateway's ACL user: a search on one takes
    feedback on the other; after Redis restarts (append-only file), the feedback is still there."""
    redis = RedisServer(tmp_path / "redis", auth=RedisAuth.fresh(), persist=True).start()
    try:
        fb = FeedbackSettings(backend="redis", redis_url=redis.url(3, role="gateway"))
        keys = ApiKeyStore(tmp_path / "keys.json")
        one = settings.model_copy(update={"feedback": fb, "data_dir": tmp_path / "one"})
        two = settings.model_copy(update={"feedback": fb, "data_dir": tmp_path / "two"})
        with gateway(one, embedder, reranker, keys) as a, gateway(two, embedder, reranker, keys) as b:
            ingest(a)
            ingest(b)
            shown = a.search("alice")
            status, body = b.feedback(
                "alice", shown["request_id"], {"chunk_id": chunk(shown), "label": "clicked"}
            )
            assert status == 200, body
            status, _ = b.feedback("bob", shown["request_id"], {"chunk_id": chunk(shown), "label": "clicked"})
            assert status == 404
            theirs = b.search("carol")
            assert (
                b.feedback("carol", theirs["request_id"], {"chunk_id": chunk(theirs), "label": "relevant"})[0]
                == 200
            )
        assert not (tmp_path / "one" / "feedback.sqlite3").exists()  # nothing went to SQLite
        redis.stop()
        redis.start()
        store = build_feedback_store(one)
        assert [(e.user, e.label) for e in store.export("acme")] == [("alice", "clicked")]
        assert [e.tenant for e in store.export()] == ["acme", "globex"]
        store.close()
    finally:
        redis.stop()


def test_feedback_is_rate_limited_and_audited_without_its_comments(
    settings: RampartSettings, embedder: Embedder, reranker: Reranker, tmp_path: Path
) -> None:
    """Feedback draws 1 unit (``gateway.costs.feedback``) from the caller's budget, as a search does,
    and each call is an audit event naming the labelled request and chunks, never the comment."""
    log = tmp_path / "audit.jsonl"
    audit = settings.gateway.audit.model_copy(update={"path": log})
    with gateway(settings, embedder, reranker, ApiKeyStore(tmp_path / "k.json"), audit=audit) as gw:
        ingest(gw)
    limits = {"rate_limit_per_minute": 3, "audit": audit}
    with gateway(settings, embedder, reranker, ApiKeyStore(tmp_path / "k.json"), **limits) as gw:
        shown = gw.search("alice")  # 1 unit
        item = {"chunk_id": chunk(shown), "label": "relevant", "comment": "a secret remark"}
        assert gw.feedback("alice", shown["request_id"], item)[0] == 200  # 2
        assert gw.feedback("alice", "never-issued-id", item)[0] == 404  # 3
        status, body = gw.feedback("alice", shown["request_id"], item)
        assert status == 429 and body["code"] == "rate_limited", body
    events = [json.loads(line) for line in log.read_text().splitlines()]
    fed = [e for e in events if e["action"] == "feedback"]
    assert [e["outcome"] for e in fed] == ["ok", "not_found"]
    assert fed[0]["detail"] == f"on request_id {shown['request_id']}: relevant=1"
    assert fed[0]["chunk_ids"] == [chunk(shown)] and fed[0]["user"] == "alice"
    assert "a secret remark" not in log.read_text()
