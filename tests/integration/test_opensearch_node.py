"""The assembled OpenSearch node: the session's node runs 2.19.1 with the k-NN plugin, and
``rampart opensearch up|status|down`` manages a node of its own (a second one, on another free port,
with its data where the settings say)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from services.common.net import free_port
from services.retrieval.opensearch_node import OpenSearchNode, node_info, running_pid
from tests.conftest import flat
from tests.integration.opensearch_server import rampart_cli


def test_node_runs_opensearch_2_19_with_knn(opensearch: OpenSearchNode) -> None:
    info = node_info(opensearch.url)
    assert info.version == "2.19.1"
    assert {"opensearch-knn", "lang-painless", "analysis-common"} <= set(info.plugins)
    assert info.status == "green"


def rampart(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return rampart_cli(env, "opensearch", *args)


def test_cli_up_status_down(tmp_path: Path) -> None:
    home = tmp_path / "os"
    port = free_port()
    env = {"RAMPART_OPENSEARCH__DATA_DIR": str(home), "RAMPART_OPENSEARCH__PORT": str(port)}
    try:
        up = rampart(env, "up")
        assert up.returncode == 0, up.stdout + up.stderr
        out = flat(up.stdout)
        assert f"OpenSearch 2.19.1 at http://127.0.0.1:{port}: green" in out
        assert "opensearch-knn" in out
        assert (home / "data").is_dir() and running_pid(home) is not None
        again = rampart(env, "up")  # a second up finds it and says so
        assert again.returncode == 0 and "already runs" in flat(again.stderr)
        status = rampart(env, "status")
        assert status.returncode == 0 and "green" in status.stdout
    finally:
        down = rampart(env, "down")
    assert down.returncode == 0 and "stopped pid" in down.stderr
    assert running_pid(home) is None
    gone = rampart(env, "status")
    assert gone.returncode == 2
    assert f"http://127.0.0.1:{port} is unreachable" in flat(gone.stderr)
    assert "rampart opensearch up" in flat(gone.stderr)
