"""``/v1/answer`` and adaptive ``/v1/search`` on a real runtime: answers with citations, sessions
across turns, ACLs, bad input, and the LLM path against a scripted endpoint and a real llama.cpp one."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from services.common.settings import RampartSettings
from services.common.types import Principal
from services.gateway.api_keys import ApiKeyStore
from services.gateway.app import create_app
from services.orchestrator.runtime import Runtime
from services.rerank.reranker import Reranker
from services.retrieval.embedder import Embedder
from tests.integration.llm_server import LlamaServer
from tests.integration.scripted_llm import Scripted, chat

DOCS = [
    (
        "leave",
        "Leave policy",
        ["*"],
        "Every employee gets 25 vacation days per year. Parental leave is sixteen weeks.",
    ),
    ("bands", "Salary bands", ["hr"], "Engineering salary bands: L3 earns 120k to 140k per year."),
    (
        "parental",
        "Parental leave",
        ["*"],
        "Primary caregivers receive 20 weeks of fully paid parental leave. Secondary caregivers receive "
        "8 weeks of fully paid parental leave. Tell People Operations eight weeks ahead.",
    ),
    (
        "dune",
        "Dune (novel)",
        ["*"],
        "Dune is a 1965 epic science fiction novel by American author Frank Herbert, first published as "
        "two serials in Analog magazine.",
    ),
    (
        "herbert",
        "Frank Herbert",
        ["*"],
        "Frank Herbert (October 8, 1920 - February 11, 1986) was an American science-fiction author best "
        "known for the novel Dune. Herbert was born in Tacoma, Washington.",
    ),
    (
        "asimov",
        "Isaac Asimov",
        ["*"],
        "Isaac Asimov was an American writer and professor of biochemistry at Boston University. Asimov "
        "was born in Petrovichi, Russia, in 1920.",
    ),
]


def open_api(
    settings: RampartSettings, embedder: Embedder, reranker: Reranker, tmp: Path
) -> tuple[TestClient, dict[str, str], Runtime]:
    rt = Runtime.open(settings, embedder=embedder, reranker=reranker)
    keys = ApiKeyStore(tmp / "keys.json")
    made = {
        "writer": keys.create(Principal(tenant="acme", user="ops", scopes=["search", "ingest"]))[0],
        "alice": keys.create(Principal(tenant="acme", user="alice", groups=["eng"]))[0],
        "bob": keys.create(Principal(tenant="acme", user="bob", groups=["hr"]))[0],
    }
    client = TestClient(create_app(rt, keys))
    docs = [{"id": i, "title": t, "acl": {"groups": g}, "text": x} for i, t, g, x in DOCS]
    r = client.post("/v1/documents", json={"documents": docs}, headers=auth(made["writer"]))
    assert r.status_code == 200 and r.json()["indexed"] == len(DOCS), r.text
    return client, made, rt


@pytest.fixture()
def api(
    settings: RampartSettings, embedder: Embedder, reranker: Reranker, tmp_path: Path
) -> Iterator[tuple[TestClient, dict[str, str]]]:
    client, made, rt = open_api(settings, embedder, reranker, tmp_path)
    with client:
        yield client, made
    rt.close()


def auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def ask(client: TestClient, key: str, query: str, **extra: Any) -> Any:
    return client.post("/v1/answer", json={"query": query, **extra}, headers=auth(key))


def test_extractive_answer_cites_what_it_says(api: tuple[TestClient, dict[str, str]]) -> None:
    client, k = api
    r = ask(client, k["alice"], "How many vacation days does an employee get per year?")
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["method"] == "extractive"
    assert "25 vacation days" in body["answer"]
    assert body["citations"][0]["doc_id"] == "leave"
    assert "[1]" in body["answer"]
    a = body["adaptive"]
    assert a["route"]["type"] in ("simple", "conversational", "complex")
    assert a["retrieval_calls"] >= 1 and a["session_id"].startswith("s_")
    assert a["grade"]["grade"] in ("correct", "ambiguous", "incorrect")


def test_alike_sentences_with_different_facts_are_both_kept(api: tuple[TestClient, dict[str, str]]) -> None:
    client, k = api
    body = ask(client, k["alice"], "How many weeks of parental leave do caregivers get?").json()
    assert "20 weeks" in body["answer"] and "8 weeks" in body["answer"], body["answer"]


def test_answers_never_cite_what_the_caller_may_not_read(api: tuple[TestClient, dict[str, str]]) -> None:
    client, k = api
    alice = ask(client, k["alice"], "What does an L3 engineer earn in the salary bands?").json()
    assert "120k" not in alice["answer"]
    assert all(c["doc_id"] != "bands" for c in alice["citations"])
    assert all(r["doc_id"] != "bands" for r in alice["results"])
    bob = ask(client, k["bob"], "What does an L3 engineer earn in the salary bands?").json()
    assert "120k" in bob["answer"]


def test_an_answer_from_doubtful_context_says_so(api: tuple[TestClient, dict[str, str]]) -> None:
    client, k = api
    # alice may not read the salary bands: what she can read does not answer, and the answer says so
    doubtful = ask(client, k["alice"], "What does an L3 engineer earn in the salary bands?").json()
    assert doubtful["caution"], doubtful
    assert doubtful["answer"].startswith("No document clearly answers this")
    assert doubtful["adaptive"]["grade"]["grade"] == "incorrect" or doubtful["factcheck_fallback"]
    sure = ask(client, k["alice"], "How many vacation days does an employee get per year?").json()
    assert sure["caution"] is None and sure["answer"].startswith("Every employee gets 25 vacation days")


def test_a_session_carries_the_conversation(api: tuple[TestClient, dict[str, str]]) -> None:
    client, k = api
    first = ask(client, k["alice"], "Who wrote the novel Dune?").json()
    sid = first["adaptive"]["session_id"]
    follow = ask(client, k["alice"], "Where was he born?", session_id=sid)
    assert follow.status_code == 200, follow.text
    body = follow.json()
    assert body["adaptive"]["route"]["type"] == "conversational"
    assert "Herbert" in body["adaptive"]["searched_query"]
    assert "Tacoma" in body["answer"]
    # the same id is nobody else's session: not found, and nothing about whether it exists
    other = ask(client, k["bob"], "Where was he born?", session_id=sid)
    assert other.status_code == 404 and "omit session_id" in other.json()["message"]


def test_explicit_history_instead_of_a_session(api: tuple[TestClient, dict[str, str]]) -> None:
    client, k = api
    r = ask(client, k["alice"], "Where was he born?", history=["Tell me about Isaac Asimov"])
    assert r.status_code == 200, r.text
    assert "Asimov" in r.json()["adaptive"]["searched_query"]
    assert r.json()["adaptive"]["session_id"] is None


@pytest.mark.parametrize(
    ("body", "status", "needle"),
    [
        ({"query": "x" * 10_000}, 400, "limit"),
        ({"query": "   "}, 400, "blank"),
        ({"query": "q", "history": ["h"] * 201}, 400, "history"),
        ({"query": "q", "history": ["x" * 10_000]}, 400, "history[0]"),
        ({"query": "q", "session_id": "not-a-session"}, 400, "session id"),
        ({"query": "q", "session_id": "s_AAAAAAAAAAAAAAAAAAAAAAAA"}, 404, "no session"),
        ({"query": "q", "session_id": "s_AAAAAAAAAAAAAAAAAAAAAAAA", "history": ["h"]}, 400, "either"),
        ({"query": "q", "tenant": "globex"}, 403, "tenant"),
    ],
)
def test_bad_answer_requests_get_clear_errors(
    api: tuple[TestClient, dict[str, str]], body: dict[str, Any], status: int, needle: str
) -> None:
    client, k = api
    r = client.post("/v1/answer", json=body, headers=auth(k["alice"]))
    assert r.status_code == status, r.text
    assert needle in r.json()["message"]


def test_long_histories_are_accepted_and_bounded(api: tuple[TestClient, dict[str, str]]) -> None:
    client, k = api
    r = ask(
        client,
        k["alice"],
        "Where was he born?",
        history=[f"Tell me about Isaac Asimov {i}" for i in range(200)],
    )
    assert r.status_code == 200, r.text


def test_adaptive_search(api: tuple[TestClient, dict[str, str]]) -> None:
    client, k = api
    r = client.post(
        "/v1/search",
        json={"query": "Where was the author of Dune born?", "adaptive": True, "top_k": 3},
        headers=auth(k["alice"]),
    )
    assert r.status_code == 200, r.text
    body = r.json()
    assert len(body["results"]) <= 3 and body["adaptive"]["retrieval_calls"] >= 1
    plain = client.post("/v1/search", json={"query": "Dune"}, headers=auth(k["alice"])).json()
    assert plain["adaptive"] is None
    for bad in (
        {"adaptive": True, "fusion": {"method": "rrf"}},
        {"session_id": "s_AAAAAAAAAAAAAAAAAAAAAAAA"},
    ):
        r = client.post("/v1/search", json={"query": "Dune", **bad}, headers=auth(k["alice"]))
        assert r.status_code == 400, r.text


# ---- with an LLM ------------------------------------------------------------------------------------
def llm_api(
    settings: RampartSettings,
    embedder: Embedder,
    reranker: Reranker,
    tmp: Path,
    base_url: str,
    **llm: Any,
) -> tuple[TestClient, dict[str, str], Runtime]:
    update = {"base_url": base_url, "timeout_s": 5.0, "retries": 0, **llm}
    s = settings.model_copy(update={"llm": settings.llm.model_copy(update=update)})
    return open_api(s, embedder, reranker, tmp)


def test_llm_answers_must_cite(
    settings: RampartSettings, embedder: Embedder, reranker: Reranker, tmp_path: Path
) -> None:
    replies = iter(["Employees get 25 vacation days [1].", "Twenty-five days, trust me."])

    def reply(n: int) -> tuple[int, str]:
        body = next(replies, "")
        return 200, chat(body)

    with Scripted(reply) as server:
        client, k, rt = llm_api(settings, embedder, reranker, tmp_path, server.base_url)
        try:
            q = "How many vacation days does an employee get per year? Check the leave policy."
            cited = ask(client, k["alice"], q).json()
            uncited = ask(client, k["alice"], q).json()
        finally:
            rt.close()
    if cited["retrieval_skipped"]:  # routed Simple: the direct reply, flagged, no citations
        assert cited["method"] == "llm-direct" and cited["citations"] == []
        return
    assert cited["method"] == "llm" and cited["citations"][0]["doc_id"] == "leave"
    # a reply citing nothing is not trusted: the extractive answer, flagged
    assert uncited["method"] == "extractive" and "llm" in uncited["degraded"]
    prompt = server.requests[0]["body"]["messages"][1]["content"]
    assert "<<<SOURCES" in prompt and "25 vacation days" in prompt


@pytest.mark.timeout(240)
def test_real_llama_server_answers_or_degrades(
    settings: RampartSettings, embedder: Embedder, reranker: Reranker, tmp_path: Path
) -> None:
    server = LlamaServer(tmp_path / "llama").start()
    try:
        client, k, rt = llm_api(
            settings, embedder, reranker, tmp_path, server.base_url, timeout_s=60.0, max_tokens=48
        )
        try:
            r = ask(client, k["alice"], "Who wrote the novel Dune and where was Frank Herbert born?")
        finally:
            rt.close()
    finally:
        server.stop()
    assert r.status_code == 200, r.text
    body = r.json()
    # SmolLM2-135M may or may not cite: either a cited LLM answer or the flagged extractive one
    if body["method"] == "llm":
        assert body["citations"] and all(c["doc_id"] in {d[0] for d in DOCS} for c in body["citations"])
    else:
        assert body["method"] in ("extractive", "llm-direct") or "llm" in body["degraded"]
