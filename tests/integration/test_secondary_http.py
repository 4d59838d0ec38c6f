"""``HttpSource`` (a federated search endpoint, here a real HTTP server on loopback answering from the
contract's corpus for the principal it is sent) under the ``SecondarySource`` contract; its failing
twin posts to a port nothing listens on. The endpoint's other failures (5xx, timeouts, malformed
replies) and what the corrective stage makes of them: tests/integration/test_corrective.py."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import pytest
from pydantic import SecretStr

from services.orchestrator.corrective.config import SecondarySourceSettings
from services.orchestrator.corrective.secondary import HttpSource, SecondarySource
from tests.contracts.secondary_source import CORPUS, SecondarySourceContract
from tests.integration.federated_endpoint import Endpoint

TOKEN = "sekret-token"


def http_source(url: str) -> HttpSource:
    return HttpSource(
        SecondarySourceSettings(kind="http", url=url, api_key=SecretStr(TOKEN), timeout_ms=1500, retries=1)
    )


class TestHttpSource(SecondarySourceContract):
    @pytest.fixture()
    def source(self) -> Iterator[SecondarySource]:
        endpoint = Endpoint(CORPUS)
        endpoint.mode = "corpus"
        source = http_source(endpoint.url)
        yield source
        source.close()
        endpoint.stop()

    @pytest.fixture()
    def failing_source(self) -> Iterator[SecondarySource]:
        endpoint = Endpoint()
        endpoint.stop()  # nothing listens on the port any more: connection refused
        source = http_source(endpoint.url)
        yield source
        source.close()

    @pytest.fixture()
    def credentials(self) -> Sequence[str]:
        return (TOKEN,)
