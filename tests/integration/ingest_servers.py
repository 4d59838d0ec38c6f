"""The real ingest service (``python -m services.ingest.server``) for tests, with the retrieval service
it writes to, both as child processes on 127.0.0.1 (via :mod:`tests.integration.grpc_servers`)."""

from __future__ import annotations

from pathlib import Path
from types import TracebackType
from typing import Self

from services.common.net import free_port
from services.ingest.remote_ingest import RemoteIngest
from tests.integration.grpc_servers import GrpcServiceProcess, RetrievalServiceProcess

INGEST_SERVICE = "rampart.ingest.v1.IngestService"


class IngestServiceProcess(GrpcServiceProcess):
    """The ingest service over ``data_dir`` (its journal), writing to ``retrieval_address``; started =
    health SERVING (which needs the retrieval service to answer). Restartable on the same port."""

    def __init__(
        self, data_dir: Path, models_dir: Path, retrieval_address: str, *, port: int | None = None, **env: str
    ) -> None:
        port = port or free_port()
        super().__init__(
            "services.ingest.server",
            {
                "RAMPART_DATA_DIR": str(data_dir),
                "RAMPART_MODELS_DIR": str(models_dir),
                "RAMPART_REMOTE__RETRIEVAL_ADDRESS": retrieval_address,
                "RAMPART_INGEST_SERVICE__HOST": "127.0.0.1",
                "RAMPART_INGEST_SERVICE__PORT": str(port),
                "RAMPART_INGEST_SERVICE__METRICS_PORT": "0",
                "RAMPART_EMBEDDING__THREADS": "1",
                "RAMPART_LOG_LEVEL": "INFO",
                **env,
            },
            port=port,
            log_path=data_dir.parent / f"ingest-{port}.log",
            service=INGEST_SERVICE,
        )

    def client(self, *, deadline_ms: int = 10_000, ingest_deadline_ms: int = 60_000) -> RemoteIngest:
        return RemoteIngest(
            self.address,
            deadline_ms=deadline_ms,
            ingest_deadline_ms=ingest_deadline_ms,
            max_message_bytes=32 * 1024 * 1024,
        )


class IngestStack:
    """Retrieval service + ingest service over ``work``; ``env`` goes to both (settings they share)."""

    def __init__(self, work: Path, models_dir: Path, env: dict[str, str] | None = None) -> None:
        self.work = work
        self.models_dir = models_dir
        self.env = env or {}
        self.retrieval = RetrievalServiceProcess(
            work / "retrieval" / "data", models_dir, port=None, **self.env
        )
        self.ingest = self.new_ingest()

    def new_ingest(self, **env: str) -> IngestServiceProcess:
        """A (not yet started) ingest service on the same journal, port kept across restarts."""
        port = getattr(getattr(self, "ingest", None), "port", None)
        return IngestServiceProcess(
            self.work / "ingest" / "data",
            self.models_dir,
            self.retrieval.address,
            port=port,
            **{**self.env, **env},
        )

    def client(self) -> RemoteIngest:
        return self.ingest.client()

    def start(self) -> Self:
        self.retrieval.start()
        self.ingest.start()
        return self

    def stop(self) -> None:
        self.ingest.stop()
        self.retrieval.stop()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
