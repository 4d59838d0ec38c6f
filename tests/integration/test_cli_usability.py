"""The CLI gaps a new user hit in the README flows: verdicts and the whole response from ``search``,
``--tenant`` honoured with ``--url``, skipped files named by ``ingest``, and a pointer to ``--url`` when
``rampart serve`` holds the local index."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from services.cli.main import app
from tests.conftest import REPO, flat
from tests.integration.cli_server import cli_env, rampart_serve
from tests.integration.test_cli import run

# no acme document is about this: the fact-check judges the top results IRRELEVANT and falls back
OFF_TOPIC = "zebra migration across the savanna"


def invoke(env: dict[str, str], *args: str) -> Result:
    return CliRunner().invoke(app, list(args), env=env, catch_exceptions=False)


@dataclass(frozen=True)
class Served:
    env: dict[str, str]
    url: str
    acme_key: str  # acme/alice, groups eng, scope search


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory, models_dir: Path) -> Iterator[Served]:
    """``rampart serve`` on the samples of both tenants, as a real process on loopback."""
    env = cli_env(tmp_path_factory.mktemp("served") / "data", models_dir)
    for tenant in ("acme", "globex"):
        run(env, "ingest", str(REPO / "samples" / tenant), "--tenant", tenant)
    key = run(env, "keys", "create", "--tenant", "acme", "--user", "alice", "--groups", "eng").strip()
    with rampart_serve(env) as url:
        yield Served(env, url, key)


def test_search_json_is_the_whole_response_and_the_table_shows_verdicts(served: Served) -> None:
    remote = ("--url", served.url, "--api-key", served.acme_key)
    body = json.loads(run(served.env, "search", "How do I set up the VPN?", *remote, "--json"))
    assert {"query", "results", "filtered", "degraded", "factcheck_fallback"} <= set(body)
    assert body["results"] and all(h["verdict"] is not None for h in body["results"])
    table = flat(run(served.env, "search", "How do I set up the VPN?", *remote))
    assert "verdict" in table and "relevant" in table
    assert f"{len(body['filtered'])} passage(s) withheld by the fact-check" in table


def test_search_says_when_the_factcheck_fell_back(served: Served) -> None:
    remote = ("--url", served.url, "--api-key", served.acme_key)
    body = json.loads(run(served.env, "search", OFF_TOPIC, *remote, "--json"))
    assert body["factcheck_fallback"] is True
    assert any(h["verdict"]["verdict"] == "irrelevant" for h in body["results"])
    table = flat(run(served.env, "search", OFF_TOPIC, *remote))
    assert "fact-check fallback" in table and "irrelevant" in table


@pytest.mark.parametrize("command", ["search", "ask"])
def test_tenant_other_than_the_keys_is_refused_with_url(served: Served, command: str) -> None:
    remote = ("--url", served.url, "--api-key", served.acme_key)
    refused = invoke(served.env, command, "How long must a driver rest?", "--tenant", "globex", *remote)
    assert refused.exit_code == 2, refused.output
    assert "'globex'" in flat(refused.output) and "'acme'" in flat(refused.output)
    same = invoke(served.env, command, "How do I set up the VPN?", "--tenant", "acme", *remote)
    assert same.exit_code == 0, same.output


@pytest.mark.parametrize("command", ["search", "ask"])
def test_local_command_while_serving_points_to_url(served: Served, command: str) -> None:
    result = invoke(served.env, command, "How do I set up the VPN?", "--tenant", "acme")
    assert result.exit_code == 2, result.output
    message = flat(result.output)
    assert "in use by another rampart process" in message
    assert "--url http://" in message and "RAMPART_URL" in message and "--api-key" in message


def test_ingest_names_skipped_files_and_fails_when_nothing_is_supported(
    env: dict[str, str], tmp_path: Path
) -> None:
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "good.md").write_text("# Rockets\n\nSome useful words about rockets and their fuel.")
    (folder / "good.md.meta.json").write_text('{"title": "Rockets"}')  # a sidecar is not "skipped"
    (folder / "junk.bin").write_bytes(b"\x00\x01\x02")
    (folder / "table.csv").write_text("a,b\n1,2\n")
    (folder / "NOTES").write_text("no extension")
    result = invoke(env, "ingest", str(folder), "--tenant", "t")
    assert result.exit_code == 0, result.output
    message = flat(result.output)
    assert "1 indexed" in message and "3 skipped" in message
    # rich wraps a long path mid-word (tmp paths under pytest-xdist are long): compare without whitespace
    unwrapped = "".join(result.output.split())
    for name in ("junk.bin", "table.csv", "NOTES"):
        assert name in unwrapped
    assert "unsupported file type ('.bin')" in message and "good.md.meta.json" not in message

    # the local search's --json is the whole response too
    body = json.loads(run(env, "search", "rocket fuel", "--tenant", "t", "--json"))
    assert body["results"][0]["doc_id"] == "good.md"
    assert {"filtered", "degraded", "factcheck_fallback"} <= set(body)

    only_junk = tmp_path / "junk"
    only_junk.mkdir()
    (only_junk / "junk.bin").write_bytes(b"\x00")
    nothing = invoke(env, "ingest", str(only_junk), "--tenant", "t")
    assert nothing.exit_code == 1, nothing.output
    assert "nothing to ingest" in flat(nothing.output) and "junk.bin" in "".join(nothing.output.split())
