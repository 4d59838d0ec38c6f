"""The stack's gateway against its own OpenAPI document (issue 36): the same FastAPI app as the
embedded one (``rampart serve`` over ``GatewayBackends.remote``), so the same document, but every
search and answer crosses the orchestrator's Serve ingress over HTTP and every document the ingest
service over gRPC: an error must come back through both hops as a documented status with an
``ErrorBody``, and a request the schema admits must still be served.

Fewer requests than tests/integration/test_api_conformance.py, which runs the coverage phase's
boundary cases and invalid requests against the same document: here 20 valid requests generated per
operation, seeded, over HTTP. Only valid ones: an invalid request is refused by the gateway's own
request models before any backend is called, the same code the embedded run checks. Its own tenant, so nothing it ingests reaches the other e2e tests' corpus; one key per operation, so no
operation spends another's rate limit (600 cost units a minute per key).
"""

from __future__ import annotations

import pytest
import schemathesis

from services.common.types import Principal
from services.gateway.api_keys import ApiKeyStore
from tests.api_conformance import CHECKS, config, run_operation
from tests.e2e.conftest import Stack
from tests.integration.test_api_conformance import OPERATIONS

EXAMPLES = 20
FUZZ = Principal(tenant="conformance", user="ops", groups=["eng"], scopes=["search", "ingest", "admin"])


@pytest.fixture(scope="module")
def stack_schema(stack: Stack) -> schemathesis.schemas.BaseSchema:
    stack.wait_ready()
    return schemathesis.openapi.from_url(
        f"{stack.gateway}/openapi.json", config=config(EXAMPLES, coverage=False, mode="positive"), timeout=30
    )


def test_the_stack_serves_the_embedded_document(stack_schema: schemathesis.schemas.BaseSchema) -> None:
    listed = {(m.upper(), p) for p, ops in stack_schema.raw_schema["paths"].items() for m in ops}
    assert listed == set(OPERATIONS)


@pytest.mark.parametrize(("method", "path"), OPERATIONS, ids=[f"{m} {p}" for m, p in OPERATIONS])
def test_stack_operation_conforms_to_the_openapi_document(
    stack: Stack, stack_schema: schemathesis.schemas.BaseSchema, method: str, path: str
) -> None:
    key = ApiKeyStore.from_settings(stack.settings).create(FUZZ)[0]  # the gateway reloads the key file
    headers = {"Authorization": f"Bearer {key}"}

    def check(case: schemathesis.Case) -> None:
        case.call_and_validate(base_url=stack.gateway, headers=headers, checks=CHECKS, timeout=120)

    run_operation(stack_schema, method, path, check, EXAMPLES)


def test_feedback_through_the_stacks_redis(stack: Stack) -> None:
    """The stack's gateway keeps impressions and feedback in the stack's Redis as its own ACL user
    (docs/learning.md): a search's result takes a label (a 503 would mean Redis refused the user's
    keys), and another principal of the tenant naming that request id gets the 404 of an unknown one."""
    stack.wait_ready()
    store = ApiKeyStore.from_settings(stack.settings)
    fay = {
        "Authorization": f"Bearer {store.create(Principal(tenant='labels', user='fay', scopes=['search', 'ingest']))[0]}"
    }
    gus = {"Authorization": f"Bearer {store.create(Principal(tenant='labels', user='gus'))[0]}"}
    doc = {"id": "due", "acl": {"groups": ["*"]}, "text": "Expense reports are due on the fifth working day."}
    with stack.client(timeout=120) as c:
        assert c.post("/v1/documents", json={"documents": [doc]}, headers=fay).status_code == 200
        shown = c.post("/v1/search", json={"query": "When are expense reports due?", "top_k": 3}, headers=fay)
        assert shown.status_code == 200 and shown.json()["results"], shown.text
        body = {
            "request_id": shown.json()["request_id"],
            "feedback": [{"chunk_id": shown.json()["results"][0]["chunk_id"], "label": "relevant"}],
        }
        r = c.post("/v1/feedback", json=body, headers=fay)
        assert r.status_code == 200 and r.json()["accepted"] == 1, r.text
        r = c.post("/v1/feedback", json=body, headers=gus)
        assert r.status_code == 404 and r.json()["code"] == "not_found", r.text
