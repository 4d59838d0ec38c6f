"""The whole distributed stack under supervisord, driven through its gateway.

Ray's servers bind every interface, so these tests run inside a loopback-only network namespace:
`make test` (and `make test-e2e`) start pytest under `unshare -n` (`-rn` without root). Run outside
one, they fail saying so — never skipped.
"""

from __future__ import annotations

import os
import secrets
import shutil
import socket
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from services.common.errors import RampartError
from services.common.net import free_port
from services.common.settings import RampartSettings
from services.common.types import Principal
from services.gateway.api_keys import ApiKeyStore
from services.stack.control import Supervisor, internal_token, running_stack
from services.stack.plan import Addresses
from services.stack.readiness import expected_stages, wait_ready
from tests.integration.otlp_receiver import OtlpReceiver


def _loopback_only() -> bool:
    # the interfaces of this process's network namespace (/sys/class/net shows the mount's, not ours)
    return {name for _, name in socket.if_nameindex()} <= {"lo"}


@dataclass
class Stack:
    settings: RampartSettings
    supervisor: Supervisor
    gateway: str
    keys: dict[str, str]
    receiver: OtlpReceiver

    def client(self, timeout: float = 60.0) -> httpx.Client:
        return httpx.Client(base_url=self.gateway, timeout=timeout)

    def wait_ready(self, timeout_s: float = 240.0) -> None:
        wait_ready(
            self.supervisor,
            self.gateway,
            expected_stages(self.settings),
            timeout_s,
            token=internal_token(self.settings),
        )


def stack_env_vars(work: Path, models_dir: Path) -> dict[str, str]:
    """Settings for a stack of its own under ``work``: private directories, a fresh port for every
    listener (so a second stack can start beside the session's)."""
    (work / "ray").mkdir(parents=True, exist_ok=True)
    ports = {
        name: str(free_port())
        for name in (
            "RAMPART_GATEWAY__PORT",
            "RAMPART_SERVE__PORT",
            "RAMPART_SERVE__METRICS_PORT",
            "RAMPART_RETRIEVAL_SERVICE__PORT",
            "RAMPART_RETRIEVAL_SERVICE__METRICS_PORT",
            "RAMPART_INGEST_SERVICE__PORT",
            "RAMPART_INGEST_SERVICE__METRICS_PORT",
            "RAMPART_STACK__REDIS_PORT",
            "RAMPART_STACK__WORKER_METRICS_PORT",
            "RAMPART_STACK__TRITON_GRPC_PORT",
            "RAMPART_STACK__TRITON_HTTP_PORT",
            "RAMPART_STACK__TRITON_METRICS_PORT",
        )
    }
    return {
        "RAMPART_DATA_DIR": str(work / "data"),
        "RAMPART_MODELS_DIR": str(models_dir),
        "RAMPART_LOG_LEVEL": "INFO",
        **ports,
        "RAMPART_STACK__DIR": str(work / "stack"),
        # the stack's programs and its readiness wait share it (a fresh one per stack)
        "RAMPART_REMOTE__INTERNAL_TOKEN": secrets.token_urlsafe(24),
        "RAMPART_STACK__READY_TIMEOUT_S": "400",
        "RAY_TMPDIR": str(work / "ray"),
    }


@pytest.fixture(scope="session")
def stack(models_dir: Path) -> Iterator[Stack]:
    if not _loopback_only():
        pytest.fail(
            "e2e tests start Ray, whose servers bind every interface: run them in a loopback-only "
            "network namespace with `make test-e2e` (unshare -n)"
        )
    work = Path(tempfile.mkdtemp(prefix="rs-", dir="/tmp"))  # short: unix socket paths ≤ 108 bytes
    receiver = OtlpReceiver().start()
    env = {
        **stack_env_vars(work, models_dir),
        "OTEL_TRACES_EXPORTER": "otlp",
        "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
        "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint,
        "OTEL_BSP_SCHEDULE_DELAY": "200",
    }
    with pytest.MonkeyPatch.context() as mp:
        for k, v in env.items():
            mp.setenv(k, v)
        settings = RampartSettings()
        store = ApiKeyStore.from_settings(settings)
        keys = {
            # admin: it re-ingests documents restricted to groups it is not in (the write ACL)
            "writer": store.create(
                Principal(tenant="acme", user="ops", scopes=["search", "ingest", "admin"])
            )[0],
            "alice": store.create(Principal(tenant="acme", user="alice", groups=["eng"]))[0],
            "bob": store.create(Principal(tenant="acme", user="bob", groups=["hr"]))[0],
            "other": store.create(Principal(tenant="globex", user="eve", groups=["eng"]))[0],
        }
        try:
            with running_stack(settings, Path.cwd(), log=work / "supervisord.out") as sup:
                yield Stack(settings, sup, Addresses.of(settings).gateway_url, keys, receiver)
        except RampartError as exc:  # the message carries supervisord's and each program's log tail
            pytest.fail(f"the stack did not start: {exc.message}")
        finally:
            receiver.stop()
            if os.environ.get("RAMPART_KEEP_E2E") is None:
                shutil.rmtree(work, ignore_errors=True)
