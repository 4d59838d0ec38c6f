"""Each rule the OpenAPI document states and the check the server makes are one rule: for every input
here, the schema (read by jsonschema_rs, the validator schemathesis uses, with ECMA-262 patterns)
admits it exactly when the server's check lets it through. tests/integration/test_api_conformance.py
holds the whole document to the running gateway; these pin the pieces, over every code point where a
rule is about characters."""

from __future__ import annotations

import functools
import json
import unicodedata
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema_rs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from services.api.schemas import ADAPTIVE_OR_PLAIN, ONE_CONVERSATION, IngestRequest, SearchRequest
from services.common.query_text import WORD_PATTERN, has_words
from services.common.settings import RampartSettings
from services.common.types import DEFAULT_TOP_K, MAX_VERSION, NOT_BLANK_PATTERN, Acl, Document
from services.gateway.api_keys import ApiKeyStore
from services.gateway.app import create_app
from services.gateway.backends import GatewayBackends
from services.gateway.config import GatewaySettings
from services.retrieval.fusion import RETRIEVERS, weights_json_schema, weights_problem

SURROGATES = range(0xD800, 0xE000)  # not text: no JSON string carries one alone


@functools.cache
def _validator(schema: str) -> Any:
    return jsonschema_rs.validator_for(json.loads(schema))


def admits(schema: dict[str, Any], value: object) -> bool:
    return bool(_validator(json.dumps(schema, sort_keys=True)).is_valid(value))


def characters() -> Iterator[str]:
    return (chr(cp) for cp in range(0x110000) if cp not in SURROGATES)


def test_the_word_pattern_is_has_words_on_every_assigned_code_point() -> None:
    """``[\\p{L}\\p{N}]`` and ``str.isalnum`` agree on every character Python's Unicode tables assign (a
    character assigned in a newer Unicode version than Python's may be a letter to the validator)."""
    words = jsonschema_rs.validator_for({"type": "string", "pattern": WORD_PATTERN})
    wrong = [
        hex(ord(c))
        for c in characters()
        if unicodedata.category(c) != "Cn" and words.is_valid(c) != has_words(c)
    ]
    assert wrong == []


def test_the_not_blank_pattern_is_strip_on_every_code_point() -> None:
    blank = jsonschema_rs.validator_for({"type": "string", "pattern": NOT_BLANK_PATTERN})
    wrong = [hex(ord(c)) for c in characters() if blank.is_valid(c) != bool(c.strip())]
    assert wrong == []


WEIGHT_NAMES = st.sampled_from([*RETRIEVERS, "bm42"])
WEIGHT_VALUES = st.one_of(
    st.sampled_from([0.0, -0.0, 1.0, -1.0]), st.floats(allow_nan=False, allow_infinity=False)
)


@settings(max_examples=500, deadline=None, database=None, derandomize=True)
@given(st.dictionaries(WEIGHT_NAMES, WEIGHT_VALUES, max_size=4))
def test_weights_schema_is_weights_problem(weights: dict[str, float]) -> None:
    assert admits({"type": "object", **weights_json_schema()}, weights) == (weights_problem(weights) is None)


def accepted(model: Any, body: dict[str, Any]) -> bool:
    try:
        model.model_validate_json(json.dumps(body))
    except ValidationError:
        return False
    return True


INGEST = IngestRequest.model_json_schema()
TEXTS = st.sampled_from([None, "", " ", "\u3000\n", "x", "\u00a0y"])
NAMES = st.lists(st.sampled_from(["alice", "eng", "*"]), max_size=2)


@settings(max_examples=300, deadline=None, database=None, derandomize=True)
@given(
    text=TEXTS,
    payload=st.sampled_from([None, "aGk="]),
    users=st.one_of(st.none(), NAMES),
    groups=st.one_of(st.none(), NAMES),
    version=st.sampled_from([0, 7, 7.0, MAX_VERSION, MAX_VERSION + 1, 2**63, -1]),
)
def test_document_schema_is_the_document_model(
    text: str | None, payload: str | None, users: list[str] | None, groups: list[str] | None, version: int
) -> None:
    """Exactly one payload, a text that is not blank, an ACL with a reader, a version within int64."""
    acl = {k: v for k, v in (("users", users), ("groups", groups)) if v is not None}
    doc: dict[str, Any] = {"id": "d", "version": version, "acl": acl}
    doc.update(
        {k: v for k, v in (("text", text), ("content_base64", payload)) if v is not None or k == "text"}
    )
    body = {"documents": [doc]}
    assert admits(INGEST, body) == accepted(IngestRequest, body), body


def test_acl_and_document_state_their_rules() -> None:
    assert Acl.model_json_schema()["anyOf"] and Document.model_json_schema()["oneOf"]
    assert float(MAX_VERSION) == MAX_VERSION and json.loads(json.dumps(float(MAX_VERSION))) == MAX_VERSION


def plain_search_refused(body: dict[str, Any]) -> bool:
    """The shape checks ``PipelineService`` makes on a search (services/orchestrator/serving)."""
    request = SearchRequest.model_validate_json(json.dumps(body))
    if request.session_id and request.history:
        return True
    if request.adaptive:
        return bool(request.fusion or request.rerank or request.factcheck)
    return bool(request.session_id or request.history)


SESSION = "s_" + "a" * 24


@settings(max_examples=300, deadline=None, database=None, derandomize=True)
@given(
    adaptive=st.sampled_from([None, True, False]),
    session_id=st.sampled_from([None, SESSION]),
    history=st.sampled_from([None, [], ["earlier"]]),
    options=st.sampled_from([None, "fusion", "rerank", "factcheck"]),
)
def test_adaptive_and_conversation_rules_are_the_pipeline_checks(
    adaptive: bool | None, session_id: str | None, history: list[str] | None, options: str | None
) -> None:
    body: dict[str, Any] = {"query": "leave"}
    for key, value in (("adaptive", adaptive), ("session_id", session_id), ("history", history)):
        if value is not None:
            body[key] = value
    if options is not None:
        body[options] = {}
    schema = {"type": "object", **ONE_CONVERSATION, **ADAPTIVE_OR_PLAIN}
    assert admits(schema, body) == (not plain_search_refused(body)), body


@pytest.mark.parametrize("query", ["leave", "休假", "L3", "25", "٣"])
def test_queries_with_words_match_the_query_pattern(query: str) -> None:
    schema = SearchRequest.model_json_schema()["properties"]["query"]
    assert admits(schema, query) and has_words(query)


@pytest.mark.parametrize("query", ["???", "\u0000", "🙂🙂", " ", "_"])
def test_wordless_queries_do_not(query: str) -> None:
    schema = SearchRequest.model_json_schema()["properties"]["query"]
    assert not admits(schema, query) and not has_words(query)


def served_document(tmp_path: Path, gateway: GatewaySettings) -> dict[str, Any]:
    """``/openapi.json`` of a gateway with ``gateway``'s limits (no backend is called to build it)."""
    settings = RampartSettings(data_dir=tmp_path / "data", gateway=gateway)
    backends = GatewayBackends(settings, ingestor=None, orchestrator=None)  # type: ignore[arg-type]
    return create_app(backends, ApiKeyStore(tmp_path / "keys.json")).openapi()


def test_every_default_is_valid_under_the_tightest_limits(tmp_path: Path) -> None:
    """A request that omits a field gets its default, so the default must be a value the document (and
    the server) admits; schemathesis found ``top_k``'s 10 refused under ``gateway.max_top_k=7``, which
    the settings now refuse (at least the default top_k)."""
    with pytest.raises(ValidationError):
        GatewaySettings(max_top_k=DEFAULT_TOP_K - 1)
    doc = served_document(tmp_path, GatewaySettings(max_top_k=DEFAULT_TOP_K, max_query_chars=1))
    schemas = doc["components"]["schemas"]
    defaults = [
        (name, field, prop)
        for name, schema in schemas.items()
        for field, prop in schema.get("properties", {}).items()
        if "default" in prop
    ]
    assert len(defaults) >= 10  # top_k, version, title, source, adaptive, ...
    for name, field, prop in defaults:
        assert admits({**prop, "components": doc["components"]}, prop["default"]), (name, field, prop)


def test_the_served_document_states_the_settings_limits(tmp_path: Path) -> None:
    gw = GatewaySettings(max_top_k=42, max_query_chars=300, max_batch_documents=5)
    doc = served_document(tmp_path, gw)
    schemas = doc["components"]["schemas"]
    for name in ("SearchRequest", "AnswerRequest"):
        props = schemas[name]["properties"]
        assert props["top_k"]["maximum"] == 42 and props["query"]["maxLength"] == 300
        assert props["history"]["anyOf"][0]["items"]["maxLength"] == 300
    assert schemas["IngestRequest"]["properties"]["documents"]["maxItems"] == 5
    responses = [r for ops in doc["paths"].values() for op in ops.values() for r in op["responses"]]
    assert "422" not in responses and "HTTPValidationError" not in schemas
