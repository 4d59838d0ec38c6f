"""The ingest service as a real process: crash after acknowledging (SIGKILL), the retrieval service
restarted while batches are pending, bounds and bad input answered with clear gRPC statuses."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import grpc
import pytest
from rampart.common.v1 import types_pb2
from rampart.ingest.v1 import ingest_pb2, ingest_pb2_grpc

from services.common.errors import ErrorCode, RampartError
from services.common.types import Acl, Document, DocumentState, DocumentStatus
from services.ingest.remote_ingest import RemoteIngest
from services.ingest.service import Outcome
from tests.integration.grpc_servers import REPO, hermetic_env
from tests.integration.ingest_servers import IngestStack

TEXTS = [
    "Expense reports are due by the fifth working day of each month.",
    "The on-call rotation hands over every Monday at ten in the morning.",
    "Laptops are replaced every three years, or sooner when they fail.",
]


def docs(prefix: str) -> list[Document]:
    return [
        Document(id=f"{prefix}{i}", tenant="acme", acl=Acl(groups=["*"]), text=t) for i, t in enumerate(TEXTS)
    ]


def eventually(check: Callable[[], bool], timeout_s: float = 60.0, what: str = "condition") -> None:
    end = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > end:
            pytest.fail(f"{what} not reached within {timeout_s:.0f}s")
        time.sleep(0.25)


def state(client: RemoteIngest, doc_id: str) -> DocumentStatus | None:
    try:
        return client.status("acme", doc_id)
    except RampartError:  # the service (or the index behind it) is restarting
        return None


def all_indexed(client: RemoteIngest, prefix: str) -> bool:
    states = [state(client, f"{prefix}{i}") for i in range(len(TEXTS))]
    return all(s is not None and s.state is DocumentState.INDEXED for s in states)


def kill(proc: subprocess.Popen[bytes] | None) -> None:
    assert proc is not None
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(10)


def test_sigkill_after_ack_loses_nothing(tmp_path: Path, models_dir: Path) -> None:
    # TEST_PROCESS_DELAY_S (tests only) holds each batch between its ack and its processing.
    stack = IngestStack(tmp_path, models_dir).start()
    try:
        stack.ingest.stop()
        stack.ingest = stack.new_ingest(RAMPART_INGEST_SERVICE__TEST_PROCESS_DELAY_S="60")
        stack.ingest.start()
        client = stack.client()
        batch_id = client.submit(docs("k"))  # acknowledged: journaled and fsync'd
        assert batch_id > 0
        pending = client.status("acme", "k0")
        assert pending is not None and pending.state is DocumentState.PENDING
        kill(stack.ingest.proc)
        stack.ingest.proc = None
        client.close()

        stack.ingest = stack.new_ingest()  # same journal, same port, no delay
        stack.ingest.start()
        client = stack.client()
        eventually(lambda: all_indexed(client, "k"), what="replayed batch indexed")
        assert [r.outcome for r in client.ingest(docs("k"))] == [Outcome.UNCHANGED] * 3  # idempotent resend
        stats = client.stats()
        assert stats["journal_queued_batches"] == 0
        client.close()
    finally:
        stack.stop()


def test_retrieval_restart_while_pending_then_retrieval_gone_for_good(
    tmp_path: Path, models_dir: Path
) -> None:
    stack = IngestStack(tmp_path, models_dir)
    stack.retrieval.start()
    stack.ingest = stack.new_ingest(
        RAMPART_INGEST_SERVICE__TEST_PROCESS_DELAY_S="1", RAMPART_INGEST_SERVICE__RETRY_MAX_S="120"
    )
    stack.ingest.start()
    client = stack.client()
    try:
        client.submit(docs("r"))
        stack.retrieval.stop()  # gone before the batch is processed
        time.sleep(2.5)  # the worker tries, fails as a whole, backs off
        assert stack.ingest.proc is not None and stack.ingest.proc.poll() is None
        stack.retrieval.start()  # same data dir, same port
        eventually(lambda: all_indexed(client, "r"), what="batch indexed after the retrieval restart")

        # Past RETRY_MAX_S, documents are reported failed with the reason instead of waiting forever.
        stack.ingest.stop()
        stack.ingest = stack.new_ingest(RAMPART_INGEST_SERVICE__RETRY_MAX_S="1")
        stack.ingest.start()
        client.close()
        client = stack.client()
        stack.retrieval.stop()
        results = client.ingest(docs("f"))
        assert [r.outcome for r in results] == [Outcome.FAILED] * 3
        assert all(
            r.code == ErrorCode.UNAVAILABLE.value and "RETRY_MAX_S" in (r.error or "") for r in results
        )
    finally:
        client.close()
        stack.stop()


def test_bounds_and_bad_input_are_clear_statuses(tmp_path: Path, models_dir: Path) -> None:
    stack = IngestStack(tmp_path, models_dir, {"RAMPART_GATEWAY__MAX_BATCH_DOCUMENTS": "3"}).start()
    try:
        stack.ingest.stop()
        stack.ingest = stack.new_ingest(
            RAMPART_INGEST_SERVICE__JOURNAL_MAX_BATCHES="1", RAMPART_INGEST_SERVICE__TEST_PROCESS_DELAY_S="30"
        )
        stack.ingest.start()
        client = stack.client()
        client.submit(docs("a"))
        with pytest.raises(RampartError) as exc:
            client.submit(docs("b"))
        assert exc.value.code is ErrorCode.RATE_LIMITED and "JOURNAL_MAX_BATCHES" in exc.value.message

        with pytest.raises(RampartError) as exc:
            client.ingest(docs("c") + docs("d"))
        assert exc.value.code is ErrorCode.PAYLOAD_TOO_LARGE and "MAX_BATCH_DOCUMENTS" in exc.value.message

        # Accepted but not processed before the deadline: our DEADLINE_EXCEEDED, saying nothing is lost.
        slow = RemoteIngest(
            stack.ingest.address, deadline_ms=5000, ingest_deadline_ms=1500, max_message_bytes=1 << 20
        )
        stack.ingest.stop()
        stack.ingest = stack.new_ingest(RAMPART_INGEST_SERVICE__TEST_PROCESS_DELAY_S="30")
        stack.ingest.start()
        with pytest.raises(RampartError) as exc:
            slow.ingest(docs("e"))
        assert exc.value.code is ErrorCode.DEADLINE_EXCEEDED and "poll" in exc.value.message
        slow.close()

        with stack.ingest.channel() as channel:
            stub = ingest_pb2_grpc.IngestServiceStub(channel)
            bad = types_pb2.Document(id="x", tenant="", acl=types_pb2.Acl(groups=["*"]), text="hello")
            with pytest.raises(grpc.RpcError) as rpc:
                stub.Ingest(ingest_pb2.IngestRequest(documents=[bad]), timeout=5)
            assert rpc.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert "tenant" in (rpc.value.details() or "")
            with pytest.raises(grpc.RpcError) as rpc:
                stub.Status(ingest_pb2.StatusRequest(tenant="acme", doc_id=""), timeout=5)
            assert rpc.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        client.close()
    finally:
        stack.stop()


def test_refuses_to_start_without_a_retrieval_address(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "services.ingest.server"],
        env=hermetic_env({"RAMPART_DATA_DIR": str(tmp_path)}),
        cwd=REPO,
        capture_output=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert b"RAMPART_REMOTE__RETRIEVAL_ADDRESS" in proc.stdout + proc.stderr
