"""``rampart serve`` as a real process on loopback, driven over real HTTP."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.conftest import REPO

pytestmark = pytest.mark.integration


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_serve_answers_search_with_acl(tmp_path: Path, models_dir: Path) -> None:
    env = {
        **os.environ,
        "RAMPART_DATA_DIR": str(tmp_path / "data"),
        "RAMPART_MODELS_DIR": str(models_dir),
        "RAMPART_LOG_LEVEL": "WARNING",
    }
    cli = [sys.executable, "-m", "services.cli.main"]
    subprocess.run(
        [*cli, "ingest", str(REPO / "samples" / "acme"), "--tenant", "acme"],
        env=env,
        check=True,
        capture_output=True,
        cwd=REPO,
    )

    def key(user: str, groups: str) -> str:
        out = subprocess.run(
            [*cli, "keys", "create", "--tenant", "acme", "--user", user, "--groups", groups],
            env=env,
            check=True,
            capture_output=True,
            text=True,
            cwd=REPO,
        )
        return out.stdout.strip()

    alice, bob = key("alice", "eng"), key("bob", "hr")
    port = free_port()
    proc = subprocess.Popen(
        [*cli, "serve", "--port", str(port)],
        env=env,
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            with contextlib.suppress(httpx.TransportError):  # not listening yet
                if httpx.get(f"{base}/readyz", timeout=1).status_code == 200:
                    break
            assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else "server exited"
            assert time.monotonic() < deadline, "server not ready in 60 s"
            time.sleep(0.3)
        q = {"query": "What is the salary range for a Staff Engineer (L5)?", "top_k": 20}
        as_bob = httpx.post(
            f"{base}/v1/search", json=q, headers={"Authorization": f"Bearer {bob}"}, timeout=30
        )
        as_alice = httpx.post(
            f"{base}/v1/search", json=q, headers={"Authorization": f"Bearer {alice}"}, timeout=30
        )
        assert as_bob.status_code == 200 and as_alice.status_code == 200
        assert as_bob.json()["results"][0]["doc_id"] == "hr-salary-bands.md"
        assert "hr-salary-bands.md" not in {h["doc_id"] for h in as_alice.json()["results"]}
        assert as_alice.headers["x-request-id"]
        assert httpx.post(f"{base}/v1/search", json=q, timeout=10).status_code == 401

        # the CLI works against the running server with --url (the server holds the index)
        writer = subprocess.run(
            [*cli, "keys", "create", "--tenant", "acme", "--user", "ops", "--scopes", "search,ingest"],
            env=env,
            check=True,
            capture_output=True,
            text=True,
            cwd=REPO,
        ).stdout.strip()
        note = tmp_path / "notes"
        note.mkdir()
        (note / "parking.md").write_text("# Parking\n\nVisitor parking is in garage B, level 2.")
        remote = {**env, "RAMPART_URL": base}
        ing = subprocess.run(
            [*cli, "ingest", str(note), "--tenant", "acme", "--api-key", writer],
            env=remote,
            capture_output=True,
            text=True,
            cwd=REPO,
        )
        assert ing.returncode == 0 and "1 indexed" in ing.stderr, ing.stderr
        found = subprocess.run(
            [*cli, "search", "where do visitors park", "--json", "--api-key", alice],
            env=remote,
            capture_output=True,
            text=True,
            cwd=REPO,
        )
        assert found.returncode == 0, found.stderr
        assert '"doc_id": "parking.md"' in found.stdout
    finally:
        proc.terminate()
        proc.wait(timeout=30)
