"""Bad HTTP input reads the same from every app: 400, the first problem named, each field listed."""

from __future__ import annotations

import json

from fastapi.exceptions import RequestValidationError

from services.common.errors import ErrorCode
from services.common.http_errors import MAX_PROBLEMS, error_response, invalid_request


def test_invalid_request_names_the_first_field_and_lists_all() -> None:
    exc = RequestValidationError(
        [
            {"loc": ("body", "query"), "msg": "Field required", "type": "missing"},
            {"loc": ("body", "top_k"), "msg": "Input should be less than 101", "type": "less_than"},
        ]
    )
    err = invalid_request(exc)
    assert err.code is ErrorCode.INVALID_ARGUMENT
    assert err.message == "invalid request: body.query: Field required"
    response = error_response(err)
    assert response.status_code == 400
    body = json.loads(bytes(response.body))
    assert [e["field"] for e in body["details"]["errors"]] == ["body.query", "body.top_k"]
    assert body["details"]["errors"][1]["type"] == "less_than"


def test_invalid_request_is_bounded_and_never_empty() -> None:
    many = [{"loc": ("body", f"f{i}"), "msg": "bad", "type": "x"} for i in range(50)]
    assert len(invalid_request(RequestValidationError(many)).details["errors"]) == MAX_PROBLEMS
    assert invalid_request(RequestValidationError([])).message == "invalid request: body: invalid"


class _UnusedBackend:
    """Routing errors are answered before any backend call; every call here is a test failure."""

    async def search(self, call: object) -> object:
        raise AssertionError("search must not be reached")

    async def answer(self, call: object) -> object:
        raise AssertionError("answer must not be reached")

    async def readiness(self) -> dict[str, object]:
        raise AssertionError("readiness must not be reached")


def test_orchestrator_ingress_answers_routing_errors_in_the_house_shape() -> None:
    from fastapi.testclient import TestClient

    from services.orchestrator.serving.http_app import create_orchestrator_app

    client = TestClient(create_orchestrator_app(_UnusedBackend(), token=None))  # type: ignore[arg-type]
    missing = client.get("/v1/nowhere")
    assert missing.status_code == 404
    assert missing.json()["code"] == "not_found"
    wrong = client.get("/v1/search")
    assert wrong.status_code == 405
    body = wrong.json()
    assert body["code"] == "method_not_allowed"
    assert body["details"]["allow"] == ["POST"]
    assert "use POST" in body["message"]
    assert wrong.headers["allow"] == "POST"
