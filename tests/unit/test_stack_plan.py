"""What `rampart stack` would run, without running it (the e2e suite runs it)."""

from __future__ import annotations

import configparser
from pathlib import Path

import pytest

from services.common.errors import RampartError
from services.common.settings import RampartSettings
from services.stack.plan import StackSecrets, programs, stack_env
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


def test_replicas_need_opensearch_and_say_how(tmp_path: Path) -> None:
    with pytest.raises(RampartError, match="--index opensearch --replicas 2"):
        programs(settings(tmp_path, stack={"replicas": 2}))


def test_replicas_on_opensearch_each_get_ports_and_a_journal(tmp_path: Path) -> None:
    s = settings(
        tmp_path,
        index={"backend": "opensearch"},
        opensearch={"url": "http://10.0.0.9:9200"},
        stack={"replicas": 2, "replica_port_step": 100},
        retrieval_service={"port": 50051, "metrics_port": 9101},
        ingest_service={"port": 50052, "metrics_port": 0},
    )
    got = {p.name: p for p in programs(s)}
    assert "opensearch" not in got  # a URL: the stack attaches to that node
    assert {"retrieval", "retrieval-1", "ingest", "ingest-1"} <= set(got)
    assert got["retrieval-1"].env["RAMPART_RETRIEVAL_SERVICE__PORT"] == "50151"
    assert got["retrieval-1"].env["RAMPART_RETRIEVAL_SERVICE__METRICS_PORT"] == "9201"
    assert got["ingest-1"].env["RAMPART_INGEST_SERVICE__METRICS_PORT"] == "0"
    journals = {got[n].env["RAMPART_INGEST_SERVICE__JOURNAL_DIR"] for n in ("ingest", "ingest-1")}
    assert journals == {str(s.ingest_journal_dir().resolve()), f"{s.ingest_journal_dir().resolve()}-1"}
    env = stack_env(s, "tok")
    assert env["RAMPART_REMOTE__RETRIEVAL_ADDRESS"] == "127.0.0.1:50051,127.0.0.1:50151"
    assert env["RAMPART_REMOTE__INGEST_ADDRESS"] == "127.0.0.1:50052,127.0.0.1:50152"
    assert env["RAMPART_INDEX__BACKEND"] == "opensearch"
    assert env["RAMPART_OPENSEARCH__URL"] == "http://10.0.0.9:9200"
    assert env["RAMPART_SERVE__PIPELINE_MIN_REPLICAS"] == env["RAMPART_SERVE__PIPELINE_MAX_REPLICAS"] == "2"


def test_opensearch_without_a_url_runs_a_node_first(tmp_path: Path) -> None:
    s = settings(
        tmp_path, index={"backend": "opensearch"}, opensearch={"data_dir": tmp_path / "os", "port": 9333}
    )
    got = sorted(programs(s), key=lambda p: p.priority)
    node = next(p for p in got if p.name == "opensearch")
    assert node.argv[-2:] == ["opensearch", "run"]
    assert node.priority < next(p.priority for p in got if p.name == "retrieval")
    assert stack_env(s, "tok")["RAMPART_OPENSEARCH__URL"] == "http://127.0.0.1:9333"


def test_a_replica_port_past_65535_names_the_step(tmp_path: Path) -> None:
    s = settings(
        tmp_path,
        index={"backend": "opensearch"},
        opensearch={"url": "http://127.0.0.1:9200"},
        stack={"replicas": 3},
        retrieval_service={"port": 64000},
    )
    with pytest.raises(RampartError, match="REPLICA_PORT_STEP"):
        programs(s)


def test_credentials_are_on_by_default_and_never_in_the_file(tmp_path: Path) -> None:
    s = settings(tmp_path)
    stack_secrets = StackSecrets.fresh(s, "tok")
    assert stack_secrets.redis is not None and stack_secrets.ray_token and stack_secrets.triton_key
    env = stack_env(s, stack_secrets)
    got = {p.name: p for p in programs(s)}
    text = render(list(got.values()), tmp_path / "stack", workdir=tmp_path)
    passwords = [*stack_secrets.redis.passwords.values(), stack_secrets.ray_token, stack_secrets.triton_key]
    assert not any(p in text or p in repr(stack_secrets) for p in passwords)
    # Redis: ACL users, the default user off; each role's URL carries its own credentials
    assert "--aclfile" in got["redis"].argv
    for role in ("orchestrator", "worker"):
        refs = got[role].env_refs
        url = env[refs["RAMPART_FACTCHECK__CELERY__BROKER_URL"]]
        assert url.startswith(f"redis://{role}:") and url.endswith("/0")
        assert (
            f'RAMPART_FACTCHECK__CELERY__BROKER_URL="%(ENV_{refs["RAMPART_FACTCHECK__CELERY__BROKER_URL"]})s"'
            in text
        )
    assert "RAMPART_FACTCHECK__CELERY__BROKER_URL" not in env  # only by role, never one for all
    acl = stack_secrets.redis.acl_text()
    assert acl.startswith("user default off") and not any(p in acl for p in passwords)
    # mTLS: the gRPC programs each with their own certificate; the others without TLS settings
    for name in ("retrieval", "ingest", "orchestrator", "gateway"):
        assert got[name].env["RAMPART_REMOTE__TLS__CERT_FILE"].endswith(f"certs/{name}.pem")
    assert "RAMPART_REMOTE__TLS__ENABLED" not in got["worker"].env | got["triton"].env
    # Ray: token auth from a file of the stack
    assert env["RAY_AUTH_MODE"] == "token" and env["RAY_AUTH_TOKEN_PATH"].endswith("ray-auth-token")
    # Triton: the launcher requires the key and the reranker sends it, from the shared environment only
    assert env["RAMPART_RERANK__TRITON__KEY"] == stack_secrets.triton_key
    assert not any("TRITON__KEY" in arg for p in got.values() for arg in p.argv)


def test_the_triton_key_is_the_users_when_given_and_absent_without_triton(tmp_path: Path) -> None:
    given = "k" * 24
    s = settings(tmp_path)
    keyed = RampartSettings(
        data_dir=tmp_path / "data", rerank={"triton": {"venv": s.rerank.triton.venv, "key": given}}
    )  # type: ignore[arg-type]
    assert StackSecrets.fresh(keyed, "t").triton_key == given
    fresh = {StackSecrets.fresh(s, "t").triton_key for _ in range(2)}
    assert len(fresh) == 2 and None not in fresh  # one per start
    off = settings(tmp_path / "off", stack={"triton": False})
    assert StackSecrets.fresh(off, "t").triton_key is None
    assert "RAMPART_RERANK__TRITON__KEY" not in stack_env(off, StackSecrets.fresh(off, "t"))


def test_credentials_can_be_turned_off(tmp_path: Path) -> None:
    s = settings(tmp_path, stack={"tls": False, "redis_auth": False, "ray_auth": False})
    env = stack_env(s, StackSecrets.fresh(s, "tok"))
    got = {p.name: p for p in programs(s)}
    assert "--aclfile" not in got["redis"].argv and env["RAY_AUTH_MODE"] == "disabled"
    assert env[got["worker"].env_refs["RAMPART_FACTCHECK__CELERY__BROKER_URL"]].startswith(
        "redis://127.0.0.1:"
    )
    assert "RAMPART_REMOTE__TLS__ENABLED" not in got["retrieval"].env
    with pytest.raises(RampartError, match="RAMPART_STACK__TLS=true"):
        programs(settings(tmp_path / "other", stack={"tls": False, "redis_tls": True}))


def test_redis_tls_serves_tls_only_and_clients_check_the_ca(tmp_path: Path) -> None:
    s = settings(tmp_path, stack={"redis_tls": True})
    redis = next(p for p in programs(s) if p.name == "redis").argv
    assert redis[redis.index("--port") + 1] == "0" and "--tls-port" in redis
    url = stack_env(s, StackSecrets.fresh(s, "tok"))["RAMPART_STACK_REDIS_URL_WORKER_BROKER"]
    assert url.startswith("rediss://worker:") and "ssl_cert_reqs=required" in url and "ca.pem" in url


def test_the_gateway_keeps_feedback_in_the_stacks_durable_redis(tmp_path: Path) -> None:
    """Feedback in Redis streams as the gateway's ACL user (by reference: the URL holds its password),
    and a Redis that keeps an append-only file, so a restart of the stack loses no feedback."""
    s = settings(tmp_path, stack={"redis_auth": True})
    got = {p.name: p for p in programs(s)}
    gateway = got["gateway"]
    assert gateway.env["RAMPART_FEEDBACK__BACKEND"] == "redis"
    ref = gateway.env_refs["RAMPART_FEEDBACK__REDIS_URL"]
    env = stack_env(s, StackSecrets.fresh(s, "tok"))
    assert env[ref].startswith("redis://gateway:") and env[ref].endswith("/3")
    redis = got["redis"].argv
    assert redis[redis.index("--appendonly") + 1] == "yes"
    assert redis[redis.index("--dir") + 1] == str(s.stack_dir().resolve())


def test_triton_grpc_is_mutual_tls_with_the_stack_ca_and_the_orchestrator_presents_its_own(
    tmp_path: Path,
) -> None:
    """stack.tls: `triton serve` gets the triton certificate and the CA (mutual TLS), the orchestrator
    (the only program that reranks) the CA and its own certificate in rerank.triton.tls."""
    s = settings(tmp_path)
    got = {p.name: p for p in programs(s)}
    argv = got["triton"].argv
    folder = s.stack_dir().resolve() / "certs"
    for flag, file in (
        ("--grpc-cert", "triton.pem"),
        ("--grpc-key", "triton-key.pem"),
        ("--grpc-ca", "ca.pem"),
    ):
        assert argv[argv.index(flag) + 1] == str(folder / file)
    env = got["orchestrator"].env
    assert env["RAMPART_RERANK__TRITON__TLS__ENABLED"] == "true"
    assert env["RAMPART_RERANK__TRITON__TLS__CA_FILE"] == str(folder / "ca.pem")
    assert env["RAMPART_RERANK__TRITON__TLS__CERT_FILE"] == str(folder / "orchestrator.pem")
    loaded = RampartSettings(
        **{
            "rerank": {
                "triton": {
                    "tls": {
                        k.removeprefix("RAMPART_RERANK__TRITON__TLS__").lower(): v
                        for k, v in env.items()
                        if "__TLS__" in k and "TRITON" in k
                    }
                }
            }
        }
    )  # type: ignore[arg-type]
    assert loaded.rerank.triton.tls.key_file == folder / "orchestrator-key.pem"
    assert not [k for p in got.values() if p.name != "orchestrator" for k in p.env if "TRITON__TLS" in k]
    plain = {p.name: p for p in programs(settings(tmp_path / "plain", stack={"tls": False}))}
    assert "--grpc-cert" not in plain["triton"].argv
    assert "RAMPART_RERANK__TRITON__TLS__ENABLED" not in plain["orchestrator"].env
