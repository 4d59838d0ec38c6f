"""What `rampart stack` would run, without running it (the e2e suite runs it)."""

from __future__ import annotations

import configparser
from pathlib import Path

import pytest

from services.common.errors import RampartError
from services.common.settings import RampartSettings
from services.stack.plan import programs, stack_env
from services.stack.supervisor_conf import render


def settings(tmp_path: Path, **extra: object) -> RampartSettings:
    venv = tmp_path / "triton-venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").touch()
    return RampartSettings(
        data_dir=tmp_path / "data",
        rerank={"triton": {"venv": venv}},
        **extra,  # type: ignore[arg-type]
    )


def test_programs_start_dependencies_first(tmp_path: Path) -> None:
    got = programs(settings(tmp_path))
    names = [p.name for p in sorted(got, key=lambda p: p.priority)]
    assert names == ["redis", "triton", "retrieval", "ingest", "worker", "orchestrator", "gateway"]
    assert {p.env.get("OTEL_SERVICE_NAME") for p in got if p.name in ("gateway", "retrieval")} == {
        "rampart-gateway",
        "rampart-retrieval",
    }


def test_optional_stages_drop_their_programs(tmp_path: Path) -> None:
    s = settings(tmp_path, factcheck={"backend": "none"}, stack={"triton": False})
    names = {p.name for p in programs(s)}
    assert "worker" not in names and "triton" not in names
    env = stack_env(s, "tok")
    assert env["RAMPART_RERANK__BACKEND"] == "onnx" and env["RAMPART_FACTCHECK__BACKEND"] == "none"


def test_missing_triton_venv_is_named_with_the_fix(tmp_path: Path) -> None:
    s = RampartSettings(data_dir=tmp_path, rerank={"triton": {"venv": tmp_path / "nope"}})  # type: ignore[arg-type]
    with pytest.raises(RampartError, match="make triton"):
        programs(s)


def test_env_wires_every_stage_remote(tmp_path: Path) -> None:
    s = settings(tmp_path, gateway={"port": 9000}, serve={"port": 9001})
    env = stack_env(s, "secret-token")
    assert env["RAMPART_REMOTE__RETRIEVAL_ADDRESS"] == f"127.0.0.1:{s.retrieval_service.port}"
    assert env["RAMPART_REMOTE__ORCHESTRATOR_URL"] == "http://127.0.0.1:9001"
    assert env["RAMPART_REMOTE__INTERNAL_TOKEN"] == "secret-token"
    assert env["RAMPART_FACTCHECK__BACKEND"] == "celery" and env["RAMPART_SESSIONS__BACKEND"] == "redis"
    assert env["RAMPART_RERANK__BACKEND"] == "triton"


def test_config_parses_and_carries_no_secret(tmp_path: Path) -> None:
    s = settings(tmp_path)
    text = render(programs(s), tmp_path / "stack", workdir=tmp_path)
    assert "secret" not in text.lower() and "token" not in text.lower()
    conf = configparser.RawConfigParser()
    conf.read_string(text)
    gateway = conf["program:gateway"]
    assert gateway["autorestart"] == "true" and gateway["stopasgroup"] == "true"
    assert gateway["command"].endswith("services.cli.main serve")
    redis = conf["program:redis"]["command"]
    assert '--save ""' in redis  # an empty argument survives supervisord's shlex split
