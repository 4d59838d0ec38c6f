"""The OpenSearch node launcher's preconditions: without Java or Maven it says what to install (the
integration fixture turns that into a failure, never a skip); the config binds loopback only."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from services.common.errors import RampartError
from services.retrieval import opensearch_node
from services.retrieval.opensearch_node import PROJECT, build, node_config


def test_missing_maven_names_what_to_install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    project = tmp_path / "node"
    shutil.copytree(PROJECT, project, ignore=shutil.ignore_patterns("target"))
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(RampartError, match=r"`mvn` is not on PATH.*Java 17 and Maven"):
        build(project)


def test_config_binds_loopback_with_single_node_discovery(tmp_path: Path) -> None:
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    config = node_config(tmp_path / "home", 9299, plugins)
    yml = (config / "opensearch.yml").read_text()
    assert 'network.host: "127.0.0.1"' in yml
    assert "http.port: 9299" in yml and 'discovery.type: "single-node"' in yml
    assert (tmp_path / "home" / "plugins").resolve() == plugins.resolve()
    node_config(tmp_path / "home", 9299, plugins)  # rewriting keeps the link
    assert opensearch_node.running_pid(tmp_path / "home") is None
