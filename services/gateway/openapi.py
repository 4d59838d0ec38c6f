"""The gateway's OpenAPI document: the models' schemas plus what only the settings know.

The request models state every rule that holds whatever the deployment (patterns, ranges, "exactly
one of", ``services/api/schemas.py``); the limits an operator sets (``gateway.max_top_k``,
``max_query_chars``, ``max_batch_documents``) are written into the document here, from the same
settings the checks read, so a client generated from ``/openapi.json`` never builds a request that the
server then refuses for its size. FastAPI's 422 responses are dropped: validation errors answer 400
with ``ErrorBody`` (``errors.py``), which every operation documents instead.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi import FastAPI

from services.gateway.config import GatewaySettings

UNUSED_COMPONENTS = ("HTTPValidationError", "ValidationError")  # the 422 body FastAPI would document


def state_limits(doc: dict[str, Any], gw: GatewaySettings) -> dict[str, Any]:
    """``doc`` (an OpenAPI document of the gateway) with ``gw``'s request limits and without 422s."""
    schemas: dict[str, Any] = doc.get("components", {}).get("schemas", {})
    for name in ("SearchRequest", "AnswerRequest"):
        props = schemas.get(name, {}).get("properties", {})
        if "query" in props:
            props["query"]["maxLength"] = gw.max_query_chars
        if "top_k" in props:
            props["top_k"]["maximum"] = gw.max_top_k
        for branch in props.get("history", {}).get("anyOf", []):
            if branch.get("type") == "array":
                branch["items"]["maxLength"] = gw.max_query_chars
    documents = schemas.get("IngestRequest", {}).get("properties", {}).get("documents")
    if documents is not None:
        documents["maxItems"] = gw.max_batch_documents
    for operations in doc.get("paths", {}).values():
        for operation in operations.values():
            operation.get("responses", {}).pop("422", None)
    for unused in UNUSED_COMPONENTS:
        schemas.pop(unused, None)
    return doc


def install_openapi(app: FastAPI, gw: GatewaySettings) -> None:
    """Serve ``app``'s generated document (FastAPI caches it) with :func:`state_limits` applied; the
    edit is idempotent, so the cached document is simply edited again."""
    generate: Callable[[], dict[str, Any]] = app.openapi

    def openapi() -> dict[str, Any]:
        return state_limits(generate(), gw)

    app.openapi = openapi  # type: ignore[method-assign]
