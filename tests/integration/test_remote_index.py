"""``RemoteIndex``: the ``SearchIndex`` contract through a real retrieval gRPC server on loopback,
serving an embedded index in this process."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from services.common.config import RemoteSettings, RetrievalServiceSettings
from services.common.net import free_port
from services.retrieval.config import IndexSettings
from services.retrieval.embedded_index import EmbeddedIndex
from services.retrieval.index import SearchIndex
from services.retrieval.remote_index import RemoteIndex
from services.retrieval.server import RetrievalApp
from tests.contracts.search_index import DIM, SearchIndexContract
from tests.integration.grpc_servers import BackgroundLoop


class ServedIndex:
    """An embedded index served by an in-process retrieval gRPC server, used through ``RemoteIndex``."""

    def __init__(self, loop: BackgroundLoop, root: Path, kind: str) -> None:
        self.loop = loop
        port = loop.run(self._start(root, kind))
        self.client = RemoteIndex.connect(f"127.0.0.1:{port}", RemoteSettings())

    async def _start(self, root: Path, kind: str) -> int:
        # Opened on the loop's thread, which also closes it (the index's file lock is per thread).
        index = EmbeddedIndex.open(root, dim=DIM, settings=IndexSettings(vector_kind=kind))
        self.app = RetrievalApp(RetrievalServiceSettings(host="127.0.0.1", port=free_port()), index, None)
        return await self.app.start()

    def close(self) -> None:
        self.client.close()
        self.loop.run(self.app.stop(grace_s=1.0))  # closes the embedded index too


class TestRemoteIndex(SearchIndexContract):
    @pytest.fixture()
    def make_index(self, tmp_path: Path) -> Iterator[Callable[[], SearchIndex]]:
        opened: list[ServedIndex] = []
        loop = BackgroundLoop()

        def make() -> SearchIndex:
            for ix in opened:
                ix.close()
            opened.clear()
            served = ServedIndex(loop, tmp_path / "index", "flat")
            opened.append(served)
            return served.client

        yield make
        for ix in opened:
            ix.close()
        loop.close()
