"""A user never sees a chunk their ACL forbids: randomised multi-tenant corpus, every query path, in
process and over the stack's gRPC services (docs/security.md)."""

from __future__ import annotations

import random
import secrets
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from pydantic import SecretStr

from services.common.config import CorpusProfile, CorpusSettings, RemoteSettings, ServiceTlsSettings
from services.common.dev_certs import make_dev_certs
from services.common.service_auth import ServiceAuth
from services.common.settings import RampartSettings
from services.common.types import Acl, Document, Principal, SearchFilters
from services.gateway.api_keys import ApiKeyStore
from services.gateway.app import create_app
from tests.integration.grpc_servers import RetrievalServiceProcess

TENANTS = ["acme", "globex", "initech"]
USERS = ["u1", "u2", "u3", "u4"]
GROUPS = ["g1", "g2", "g3"]
WORDS = [
    "salary",
    "budget",
    "merger",
    "vacation",
    "laptop",
    "vpn",
    "password",
    "incident",
    "robot",
    "warehouse",
    "pricing",
    "contract",
    "security",
    "leave",
    "travel",
    "expense",
    "policy",
    "onboarding",
    "customer",
    "shipping",
    "forklift",
    "audit",
    "payroll",
]
PATHS: list[dict[str, Any]] = [
    {"fusion": {"weights": {"bm25": 1, "dense": 0}}},
    {"fusion": {"weights": {"bm25": 0, "dense": 1}}},
    {"fusion": {"method": "minmax"}},
    {"fusion": {"method": "zscore", "fill_missing": False}},
    {"fusion": {"method": "rrf"}},
    {"fusion": {"link_seeds": 20, "backlinks": 10}},
    # the knowledge graph's walk: passages reached through shared entities, readable ones only
    {
        "fusion": {"weights": {"bm25": 0.4, "dense": 0.3, "graph": 0.3}, "graph_depth": 3}
    },  # pages named by / naming the top: readable ones only
    {"fusion": {"method": "minmax", "candidates": 5, "bounds": {"dense": {"low": 0, "high": 1}}}},
    {"filters": {"metadata": {"kind": "memo"}}},
    {"factcheck": {"enabled": False}, "rerank": {"enabled": False}},
    {"factcheck": {"depth": 100, "min_keep": 0}},
]


@pytest.fixture()
def settings(settings: RampartSettings) -> RampartSettings:
    """Every tenant's corpus linked (its documents name each other): the pages the link stream adds,
    named by or naming the top results, are a path the ACL must hold on too (docs/corpus-profiles.md)."""
    return settings.model_copy(update={"corpus": CorpusSettings(profile=CorpusProfile.LINKED)})


def corpus(rng: random.Random) -> list[Document]:
    docs = []
    for i in range(60):
        users = rng.sample(USERS, rng.randint(0, 2))
        groups = rng.sample([*GROUPS, "*"], rng.randint(0 if users else 1, 2))
        text = ". ".join(" ".join(rng.choices(WORDS, k=12)) for _ in range(rng.randint(2, 8))) + "."
        text += "".join(f" See Doc {j}." for j in rng.sample(range(60), 3))  # names other documents
        docs.append(
            Document(
                id=f"d{i}",
                tenant=rng.choice(TENANTS),
                acl=Acl(users=users, groups=groups),
                title=f"Doc {i}",
                text=text,
                metadata={"kind": rng.choice(["memo", "wiki"])},
            )
        )
    return docs


def allowed(doc: Document, who: Principal) -> bool:
    if doc.tenant != who.tenant:
        return False
    return who.user in doc.acl.users or bool({*who.groups, "*"} & set(doc.acl.groups))


@pytest.mark.parametrize("seed", [1, 2])
def test_no_forbidden_chunk_on_any_path(runtime: Any, tmp_path: Any, seed: int) -> None:
    rng = random.Random(seed)
    docs = corpus(rng)
    by_key = {(d.tenant, d.id): d for d in docs}
    results = runtime.ingest.ingest(docs)
    assert all(r.outcome == "indexed" for r in results), results

    keys = ApiKeyStore(tmp_path / "keys.json")
    principals = [
        Principal(
            tenant=rng.choice(TENANTS),
            user=rng.choice([*USERS, "nobody"]),
            groups=rng.sample(GROUPS, rng.randint(0, 2)),
        )
        for _ in range(8)
    ]
    seen_any = 0
    with TestClient(create_app(runtime, keys)) as client:
        for who in principals:
            key, _ = keys.create(who)
            readable = {d.id for d in docs if allowed(d, who)}
            for path in PATHS:
                query = " ".join(rng.choices(WORDS, k=3))
                r = client.post(
                    "/v1/search",
                    json={"query": query, "top_k": 100, **path},
                    headers={"Authorization": f"Bearer {key}"},
                )
                assert r.status_code == 200, r.text
                got = {h["doc_id"] for h in r.json()["results"]}
                withheld = {f["doc_id"] for f in r.json()["filtered"]}  # fact-check's audit list
                assert got | withheld <= readable, (who, path, (got | withheld) - readable)
                seen_any += len(got)
                # in-process path (CLI / orchestrator) is filtered the same way
                f = SearchFilters(**path["filters"]) if "filters" in path else None
                params = runtime.search.params(top_k=100, filters=f)
                hits = runtime.search.search(query, who, params).hits
                for h in hits:
                    assert allowed(by_key[(h.chunk.tenant, h.chunk.doc_id)], who)
            # what is readable and matches is actually found (the filter is not "return nothing");
            # fact-check off: random word soup is rightly judged irrelevant, and this is about ACLs
            if readable:
                r = client.post(
                    "/v1/search",
                    json={"query": " ".join(WORDS), "top_k": 100, "factcheck": {"enabled": False}},
                    headers={"Authorization": f"Bearer {key}"},
                )
                assert {h["doc_id"] for h in r.json()["results"]} == readable
    assert seen_any > 0


def test_no_forbidden_chunk_over_the_grpc_services(
    settings: RampartSettings, embedder: Any, reranker: Any, models_dir: Path, tmp_path: Path
) -> None:
    """The stack's gRPC paths: the retrieval service as a child process over mTLS with the deployment
    token, a runtime whose index and retriever are its clients (as the orchestrator's pipeline is),
    the gateway over that runtime, and every read of ``IndexService`` and ``LinkService`` called as
    each principal on every chunk id there is: none returns what the principal may not read."""
    from services.orchestrator.runtime import Runtime

    rng = random.Random(3)
    docs = corpus(rng)
    certs = make_dev_certs(tmp_path / "certs")
    tls = {
        "RAMPART_REMOTE__TLS__ENABLED": "true",
        "RAMPART_REMOTE__TLS__CA_FILE": str(certs.ca),
        "RAMPART_REMOTE__TLS__CERT_FILE": str(certs.cert("retrieval")),
        "RAMPART_REMOTE__TLS__KEY_FILE": str(certs.key("retrieval")),
    }
    token = secrets.token_urlsafe(16)
    # one client here both writes the corpus and reads it, so the write side admits it too (the
    # stack splits the two between ingest's and the orchestrator's certificates: test_service_auth.py)
    service = RetrievalServiceProcess(
        tmp_path / "retrieval" / "data",
        models_dir,
        RAMPART_REMOTE__INTERNAL_TOKEN=token,
        RAMPART_RETRIEVAL_SERVICE__WRITE_CALLERS='["*"]',
        **tls,
    )
    client_remote = RemoteSettings(
        retrieval_address=service.address,
        internal_token=SecretStr(token),
        tls=ServiceTlsSettings(
            enabled=True,
            ca_file=certs.ca,
            cert_file=certs.cert("orchestrator"),
            key_file=certs.key("orchestrator"),
        ),
    )
    service.probe_auth = ServiceAuth.from_settings(client_remote)
    with service:
        rt = Runtime.open(
            settings.model_copy(update={"remote": client_remote}), embedder=embedder, reranker=reranker
        )
        try:
            assert type(rt.index).__name__ == "RemoteIndex"
            assert all(r.outcome == "indexed" for r in rt.ingest.ingest(docs))
            every = list(range(1, rt.index.stats()["chunks"] * 2 + 10))  # every id there is, and more
            principals = [
                Principal(
                    tenant=rng.choice(TENANTS),
                    user=rng.choice([*USERS, "nobody"]),
                    groups=rng.sample(GROUPS, rng.randint(0, 2)),
                )
                for _ in range(6)
            ]
            by_key = {(d.tenant, d.id): d for d in docs}
            for who in principals:
                check_reads_by_id(rt.index, every, who, by_key)
            check_searches(rt, docs, principals, tmp_path, rng)
        finally:
            rt.close()


def check_reads_by_id(index: Any, every: list[int], who: Principal, by_key: dict[Any, Document]) -> None:
    """Reads that name chunks by id return only what ``who`` may read, whatever ids are asked for."""
    chunks = index.chunks(every, who)
    assert all(allowed(by_key[(c.tenant, c.doc_id)], who) for c in chunks.values())
    readable = set(chunks)
    assert set(index.stored_vectors(every, who)) == readable
    probe = next(iter(index.stored_vectors(list(readable), who).values()), None)
    if probe is not None:
        assert set(index.cosine(probe, every, who)) == readable
    copies = index.copy_cosines(every, who, 8)
    assert set(copies) <= readable
    others = {o for c in copies.values() for o in c.others}
    assert others <= readable, others - readable
    named = index.named([f"See Doc {i}." for i in range(60)], who, 100)
    assert {cid for cid, _ in named} <= readable


def check_searches(
    rt: Any, docs: list[Document], principals: list[Principal], tmp_path: Path, rng: random.Random
) -> None:
    """Every search path of the randomised test, through the gateway over the remote runtime."""
    keys = ApiKeyStore(tmp_path / "keys.json")
    with TestClient(create_app(rt, keys)) as client:
        for who in principals:
            key, _ = keys.create(who)
            readable = {d.id for d in docs if allowed(d, who)}
            for path in PATHS:
                query = " ".join(rng.choices(WORDS, k=3))
                r = client.post(
                    "/v1/search",
                    json={"query": query, "top_k": 100, **path},
                    headers={"Authorization": f"Bearer {key}"},
                )
                assert r.status_code == 200, r.text
                got = {h["doc_id"] for h in r.json()["results"]} | {f["doc_id"] for f in r.json()["filtered"]}
                assert got <= readable, (who, path, got - readable)
            r = client.post(
                "/v1/search",
                json={"query": " ".join(WORDS), "top_k": 100, "factcheck": {"enabled": False}},
                headers={"Authorization": f"Bearer {key}"},
            )
            assert {h["doc_id"] for h in r.json()["results"]} == readable
