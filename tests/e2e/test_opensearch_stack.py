"""The distributed stack on OpenSearch with two replicas (`rampart stack up --index opensearch
--replicas 2`): the stack starts its own node on a free port under supervisord, two retrieval
replicas, two ingest workers (a journal each) and two pipeline replicas. Through the gateway:
ingest → search → answer → delete, the ACLs, and the replicas — a retrieval replica and an ingest
worker SIGKILLed while searches and ingest keep answering from the others.

One module, one stack (named to run before test_stack.py, so the two stacks never run at once): the
embedded stack's suite covers the rest (degradations, traces, metrics) on the other backend.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from services.common.errors import RampartError
from services.common.net import free_port
from services.common.settings import RampartSettings
from services.common.types import Principal
from services.gateway.api_keys import ApiKeyStore
from services.stack.control import Supervisor, running_stack
from services.stack.plan import Addresses
from tests.e2e.conftest import _loopback_only, stack_env_vars
from tests.e2e.test_stack import DOCS, QUERIES, auth, documents, ids

REPLICAS = 2


class OsStack:
    def __init__(self, settings: RampartSettings, sup: Supervisor, keys: dict[str, str], work: Path) -> None:
        self.settings, self.supervisor, self.keys, self.work = settings, sup, keys, work
        self.gateway = Addresses.of(settings).gateway_url

    def client(self) -> httpx.Client:
        return httpx.Client(base_url=self.gateway, timeout=90.0)


@pytest.fixture(scope="module")
def os_stack(models_dir: Path) -> Iterator[OsStack]:
    if not _loopback_only():
        pytest.fail("e2e tests start Ray, whose servers bind every interface: run them with `make test-e2e`")
    work = Path(tempfile.mkdtemp(prefix="ro-", dir="/tmp"))
    env = {
        **stack_env_vars(work, models_dir),
        "RAMPART_INDEX__BACKEND": "opensearch",
        "RAMPART_OPENSEARCH__PORT": str(free_port()),
        "RAMPART_OPENSEARCH__DATA_DIR": str(work / "opensearch"),
        "RAMPART_STACK__REPLICAS": str(REPLICAS),
        # replica i listens on port + 7·i: the stack's ports are the only listeners in this namespace
        "RAMPART_STACK__REPLICA_PORT_STEP": "7",
        "RAMPART_STACK__TRITON": "false",  # rerank in each pipeline replica: one process less on 2 cores
    }
    with pytest.MonkeyPatch.context() as mp:
        for k, v in env.items():
            mp.setenv(k, v)
        settings = RampartSettings()
        store = ApiKeyStore.from_settings(settings)
        keys = {
            # admin: it re-ingests and deletes documents restricted to groups it is not in (the write ACL)
            "writer": store.create(
                Principal(tenant="acme", user="ops", scopes=["search", "ingest", "admin"])
            )[0],
            "alice": store.create(Principal(tenant="acme", user="alice", groups=["eng"]))[0],
            "bob": store.create(Principal(tenant="acme", user="bob", groups=["hr"]))[0],
        }
        try:
            with running_stack(settings, Path.cwd(), log=work / "supervisord.out") as sup:
                yield OsStack(settings, sup, keys, work)
        except RampartError as exc:
            pytest.fail(f"the OpenSearch stack did not start: {exc.message}")
        finally:
            if os.environ.get("RAMPART_KEEP_E2E") is None:
                shutil.rmtree(work, ignore_errors=True)


def wait_indexed(c: httpx.Client, key: str, doc_ids: list[str], timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    states: dict[str, Any] = {}
    while time.monotonic() < deadline:
        states = {
            d: c.get(f"/v1/documents/{d}/status", headers=auth(key)).json().get("state") for d in doc_ids
        }
        if all(s == "indexed" for s in states.values()):
            return
        time.sleep(0.5)
    pytest.fail(f"not indexed after {timeout_s:.0f} s: {states}")


def test_the_stack_runs_its_node_and_the_replicas(os_stack: OsStack) -> None:
    states = {s.name: s.state for s in os_stack.supervisor.states()}
    for name in ("opensearch", "retrieval", "retrieval-1", "ingest", "ingest-1", "orchestrator", "gateway"):
        assert states.get(name) == "RUNNING", states
    # Serve started two pipeline replicas (its controller logs each deployment's replica count)
    logs = [p for p in (os_stack.work / "ray").rglob("controller_*.log") if p.parent.name == "serve"]
    text = "".join(p.read_text(errors="replace") for p in logs)
    assert f"Adding {REPLICAS} replicas to Deployment(name='PipelineDeployment'" in text, text[-2000:]


def test_ingest_search_answer_delete_on_opensearch(os_stack: OsStack) -> None:
    w, alice, bob = (os_stack.keys[k] for k in ("writer", "alice", "bob"))
    with os_stack.client() as c:
        r = c.post("/v1/documents", json={"documents": documents()}, headers=auth(w))
        assert r.status_code == 200 and r.json()["indexed"] == len(DOCS), r.text
        again = c.post("/v1/documents", json={"documents": documents()}, headers=auth(w))
        assert again.status_code == 200 and again.json()["unchanged"] == len(DOCS), again.text
        r = c.post("/v1/search", json={"query": QUERIES[0], "top_k": 3}, headers=auth(alice))
        assert r.status_code == 200, r.text
        assert ids(r.json())[0] == "leave" and r.json()["degraded"] == [], r.json()
        q = {"query": "VPN WireGuard hardware key", "top_k": 10}
        assert "vpn" in ids(c.post("/v1/search", json=q, headers=auth(alice)).json())
        assert "vpn" not in ids(c.post("/v1/search", json=q, headers=auth(bob)).json())
        a = c.post("/v1/answer", json={"query": QUERIES[0]}, headers=auth(alice))
        assert a.status_code == 200 and "20 weeks" in a.json()["answer"], a.text
        d = c.delete("/v1/documents/laptops", headers=auth(w))
        assert d.status_code in (200, 204), d.text
        r = c.post("/v1/search", json={"query": QUERIES[3], "top_k": 5}, headers=auth(alice))
        assert r.status_code == 200 and "laptops" not in ids(r.json()), r.json()


def test_a_killed_retrieval_replica_and_ingest_worker_are_served_around(os_stack: OsStack) -> None:
    """SIGKILL replica 0 of retrieval and of ingest: searches and ingest keep answering from replica 1
    (gRPC round robin skips a dead server) while supervisord restarts them."""
    w, alice = os_stack.keys["writer"], os_stack.keys["alice"]
    os_stack.supervisor.kill_program("retrieval")
    os_stack.supervisor.kill_program("ingest")
    time.sleep(1.0)  # the kernel closed their connections; the balancers see it within milliseconds
    with os_stack.client() as c:
        for i in range(6):
            r = c.post("/v1/search", json={"query": QUERIES[i % 3], "top_k": 3}, headers=auth(alice))
            assert r.status_code == 200, r.text
        texts = [
            "The cafeteria serves breakfast from seven to ten every weekday.",
            "Parking permits are renewed each January at the security office.",
            "The gym on the ground floor opens at six in the morning.",
            "Printers on every floor release jobs when you tap your badge.",
        ]
        extra = [
            {"id": f"extra{i}", "title": t.split(" ")[1], "acl": {"groups": ["*"]}, "text": t}
            for i, t in enumerate(texts)
        ]
        for doc in extra:  # each batch its own call: round robin sends them to whichever worker is up
            r = c.post("/v1/documents", json={"documents": [doc]}, headers=auth(w))
            assert r.status_code == 200 and r.json()["indexed"] == 1, r.text
        wait_indexed(c, w, [d["id"] for d in extra])
        for doc in extra:  # each found again, whichever replica serves the search
            r = c.post("/v1/search", json={"query": doc["text"], "top_k": 3}, headers=auth(alice))
            assert r.status_code == 200, r.text
            seen = ids(r.json()) + [f["doc_id"] for f in r.json().get("filtered", [])]
            assert doc["id"] in seen, r.json()
