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


class Restartable:
    """A retrieval server on a fixed port that can be stopped and started again (a restart)."""

    def __init__(self, loop: BackgroundLoop, root: Path) -> None:
        self.loop, self.root, self.port = loop, root, free_port()
        self.app: RetrievalApp | None = None

    def start(self) -> None:
        async def start() -> None:
            index = EmbeddedIndex.open(self.root, dim=DIM)
            self.app = RetrievalApp(RetrievalServiceSettings(host="127.0.0.1", port=self.port), index, None)
            await self.app.start()

        self.loop.run(start())

    def stop(self) -> None:
        assert self.app is not None
        self.loop.run(self.app.stop(grace_s=0.1))


def test_a_restart_inside_the_retry_window_is_ridden_over(tmp_path: Path) -> None:
    """A read sent while the server is down succeeds once it is back within ``remote.retry_window_ms``;
    with no window it fails at once, UNAVAILABLE naming the address (the control)."""
    import threading
    import time

    from services.common.errors import ErrorCode, RampartError

    loop = BackgroundLoop()
    server = Restartable(loop, tmp_path / "index")
    server.start()
    address = f"127.0.0.1:{server.port}"
    patient = RemoteIndex.connect(address, RemoteSettings(deadline_ms=8000, retry_window_ms=6000))
    hasty = RemoteIndex.connect(address, RemoteSettings(deadline_ms=8000, retry_window_ms=0))
    try:
        assert patient.stats()["chunks"] == 0 and hasty.stats()["chunks"] == 0  # both connected
        server.stop()
        t0 = time.monotonic()
        with pytest.raises(RampartError) as err:
            hasty.stats()
        assert err.value.code is ErrorCode.UNAVAILABLE and address in err.value.message
        assert time.monotonic() - t0 < 2.0
        back = threading.Timer(1.5, server.start)
        back.start()
        t0 = time.monotonic()
        assert patient.stats()["chunks"] == 0  # sent while down, answered by the restarted server
        assert time.monotonic() - t0 >= 1.0
        back.join()
    finally:
        patient.close()
        hasty.close()
        server.stop()
        loop.close()
