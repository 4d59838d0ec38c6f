"""``rampart serve`` as a real process on loopback, driven over real HTTP."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import httpx

from tests.conftest import REPO
from tests.integration.cli_server import cli_env, rampart_serve


def test_serve_answers_search_with_acl(tmp_path: Path, models_dir: Path) -> None:
    env = {**os.environ, **cli_env(tmp_path / "data", models_dir)}
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
    with rampart_serve(env) as base:
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
