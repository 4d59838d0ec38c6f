"""The embedded gateway against its own OpenAPI document (issue 36): schemathesis generates requests
for every operation from ``/openapi.json``, valid and invalid, and ``tests/api_conformance.py``'s checks
hold for each response: no 5xx, every response valid against its declared schema and status, every
request the schema admits served, every request it refuses refused.

Bounded and reproducible: a fixed seed, derandomized Hypothesis, no example database, 50 generated
requests per operation (valid and invalid) beside the coverage phase's deterministic boundary cases,
about 1,100 requests in all. A failure prints the request (and a curl line) that reproduces it.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import schemathesis
from fastapi import FastAPI
from fastapi.testclient import TestClient

from services.common.settings import RampartSettings
from services.common.types import Principal
from services.gateway.api_keys import ApiKeyStore
from services.gateway.app import create_app
from services.orchestrator.runtime import Runtime
from services.rerank.reranker import Reranker
from services.retrieval.embedder import Embedder
from tests.api_conformance import CHECKS, config, run_operation

EXAMPLES = 50
OPERATIONS = [
    ("GET", "/healthz"),
    ("GET", "/readyz"),
    ("GET", "/v1/readiness"),
    ("GET", "/metrics"),
    ("POST", "/v1/documents"),
    ("GET", "/v1/documents/{doc_id}/status"),
    ("DELETE", "/v1/documents/{doc_id}"),
    ("POST", "/v1/search"),
    ("POST", "/v1/answer"),
    ("POST", "/v1/feedback"),
]
# an admin key: /v1/readiness answers it, and the write ACL lets it manage every document it names
OPS = Principal(tenant="acme", user="ops", groups=["eng"], scopes=["search", "ingest", "admin"])
CORPUS = [
    {"id": "leave", "acl": {"groups": ["*"]}, "text": "Every employee gets 25 vacation days per year."},
    {"id": "vpn", "acl": {"groups": ["eng"]}, "text": "Connect to the VPN with the corporate client."},
]


@dataclass
class Gateway:
    app: FastAPI
    client: TestClient
    headers: dict[str, str]
    schema: schemathesis.schemas.BaseSchema


@pytest.fixture()
def gateway(
    settings: RampartSettings, embedder: Embedder, reranker: Reranker, tmp_path: Path
) -> Iterator[Gateway]:
    """The real app over a real runtime with a small corpus, and its schema as schemathesis reads it
    from ``/openapi.json``. Rate limits off: a 429 is documented and accepted, but a run that spent its
    budget would test nothing after it."""
    unlimited = settings.gateway.model_copy(update={"rate_limit_per_minute": 0})
    with Runtime.open(
        settings.model_copy(update={"gateway": unlimited}), embedder=embedder, reranker=reranker
    ) as runtime:
        keys = ApiKeyStore(tmp_path / "keys.json")
        headers = {"Authorization": f"Bearer {keys.create(OPS)[0]}"}
        app = create_app(runtime, keys)
        with TestClient(app) as client:
            r = client.post("/v1/documents", json={"documents": CORPUS}, headers=headers)
            assert r.status_code == 200 and r.json()["indexed"] == len(CORPUS), r.text
            schema = schemathesis.openapi.from_asgi("/openapi.json", app, config=config(EXAMPLES))
            yield Gateway(app, client, headers, schema)


def test_every_operation_is_fuzzed(gateway: Gateway) -> None:
    """A new route joins OPERATIONS, or it would go unchecked."""
    listed = {
        (method.upper(), path) for path, ops in gateway.app.openapi()["paths"].items() for method in ops
    }
    assert listed == set(OPERATIONS)


@pytest.mark.parametrize(("method", "path"), OPERATIONS, ids=[f"{m} {p}" for m, p in OPERATIONS])
def test_operation_conforms_to_the_openapi_document(gateway: Gateway, method: str, path: str) -> None:
    def check(case: schemathesis.Case) -> None:
        case.call_and_validate(session=gateway.client, headers=gateway.headers, checks=CHECKS)

    run_operation(gateway.schema, method, path, check, EXAMPLES)
