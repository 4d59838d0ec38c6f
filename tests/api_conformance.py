"""What "the API conforms to its OpenAPI document" means, for schemathesis runs against the embedded
gateway (tests/integration/test_api_conformance.py) and the stack's (tests/e2e/test_stack_conformance.py).

Every generated request is sent with a valid key and its response must pass:

- ``not_a_server_error``: no 5xx;
- ``response_schema_conformance``, ``content_type_conformance``, ``status_code_conformance``: the status
  is one the operation documents, and the body has the documented type and schema (errors included:
  ``ErrorBody``);
- ``positive_data_acceptance``: a request the schema admits is served. The statuses accepted besides
  2xx are only those whose cause is state, not the request's shape: 403 (a tenant or source namespace
  other than the key's), 404 (a document or session the caller cannot see), 409 (a conflicting write),
  412 (an option the tenant's configuration does not allow), 429 (a rate limit). Never 400: a schema
  that admits what the server refuses as malformed is the gap this run is for;
- ``negative_data_rejection``: a request the schema refuses is refused with a documented 4xx (413 too:
  a batch of documents over ``gateway.max_batch_documents``, the schema's ``maxItems``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import hypothesis
from schemathesis import Case
from schemathesis import checks as common_checks
from schemathesis.config import SchemathesisConfig
from schemathesis.core.result import Ok
from schemathesis.pytest.lazy import get_all_tests
from schemathesis.schemas import BaseSchema
from schemathesis.specs.openapi import checks as openapi_checks

STATE_DEPENDENT = ["2xx", "403", "404", "409", "412", "429"]
# a refusal the API documents: 413 is a batch over gateway.max_batch_documents (the schema's maxItems)
REFUSED = ["400", "401", "403", "404", "409", "413", "415", "429"]

CHECKS: list[Any] = [
    common_checks.not_a_server_error,
    openapi_checks.response_schema_conformance,
    openapi_checks.content_type_conformance,
    openapi_checks.status_code_conformance,
    openapi_checks.positive_data_acceptance,
    openapi_checks.negative_data_rejection,
]


def config(max_examples: int, *, coverage: bool = True, mode: str = "all") -> SchemathesisConfig:
    """A reproducible run: a fixed seed and no example database; positive and negative data (``mode``
    "all") or one of them; the examples and fuzzing phases (``max_examples`` generated requests per
    operation, split between the modes) and, with ``coverage``, the coverage phase's deterministic
    boundary cases (most of the requests: about 900 in all against the embedded gateway). No stateful
    phase: the operations declare no links between them."""
    return SchemathesisConfig.from_dict(
        {
            "seed": 1,
            "phases": {"stateful": {"enabled": False}, "coverage": {"enabled": coverage}},
            "generation": {
                "mode": mode,
                "max-examples": max_examples,
                "deterministic": True,
                "database": "none",
            },
            "checks": {
                "positive_data_acceptance": {"expected-statuses": STATE_DEPENDENT},
                "negative_data_rejection": {"expected-statuses": REFUSED},
            },
        }
    )


def run_operation(
    schema: BaseSchema, method: str, path: str, check: Callable[[Case], None], max_examples: int
) -> None:
    """Every phase of the run for one operation, each case handed to ``check``.

    Why not ``schemathesis.pytest.from_fixture``: schemathesis 4.32.5's lazy schema renames the pytest
    node through ``Function._nodeid``, which pytest 9.2 no longer has (AttributeError before any case
    runs). This is the same test builder it calls (``get_all_tests``), for one operation: the callers
    parametrize by operation, so each is its own pytest test."""
    one = schema.include(method=method, path=path)
    settings = hypothesis.settings(
        max_examples=max_examples,
        deadline=None,
        database=None,
        derandomize=True,
        suppress_health_check=list(hypothesis.HealthCheck),
    )

    def test(case: Case) -> None:
        check(case)

    tests = list(get_all_tests(schema=one, test_func=test, settings=settings, given_kwargs={}))
    assert len(tests) == 1 and isinstance(tests[0], Ok), f"{method} {path}: {tests}"
    _, run = tests[0].ok()
    run()
