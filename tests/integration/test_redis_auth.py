"""Redis with ACL users per role and the default user off, and over TLS, on a real redis-server; the
fact-check's Celery round trip with each side's own credentials (docs/security.md)."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest
import redis

from services.common.dev_certs import make_dev_certs
from services.common.redis_server import RedisAuth, RedisTls, redact_url
from services.factcheck.celery_checker import CeleryFactChecker
from services.retrieval.embedder import Embedder
from tests.contracts.fact_checker import DEADLINE_S, QUERY, RELEVANT
from tests.integration.redis_server import CeleryWorker, RedisServer, celery_settings


@pytest.fixture()
def tls(tmp_path: Path) -> RedisTls:
    certs = make_dev_certs(tmp_path / "certs", ("redis",))
    return RedisTls(certs.cert("redis"), certs.key("redis"), certs.ca)


def test_each_role_reaches_only_what_it_needs(tmp_path: Path) -> None:
    auth = RedisAuth.fresh()
    server = RedisServer(tmp_path / "redis", auth=auth).start()
    try:
        with pytest.raises(redis.AuthenticationError):  # the default user is off: nothing without a user
            redis.Redis(port=server.port, socket_timeout=2).ping()
        with pytest.raises(redis.AuthenticationError):
            redis.Redis.from_url(f"redis://worker:wrong@127.0.0.1:{server.port}/0").ping()
        worker = server.client(role="worker")
        worker.set("celery-task-meta-x", "1")
        for admin in (lambda: worker.config_get("*"), worker.flushall, lambda: worker.acl_list()):
            with pytest.raises(redis.exceptions.NoPermissionError):
                admin()
        gateway = server.client(role="gateway")
        gateway.set("rampart:ratelimit:key:abc", "1")
        gateway.xadd("rampart:feedback:events:acme", {"e": "[]"})  # feedback streams and impressions
        gateway.set("rampart:feedback:imp:acme:alice:r1234567", "{}", ex=60)
        with pytest.raises(redis.exceptions.NoPermissionError):
            gateway.get("celery-task-meta-x")  # a session, a task, evidence: not the gateway's
        acl = (tmp_path / "redis" / "users.acl").read_text()
        assert stat.S_IMODE((tmp_path / "redis" / "users.acl").stat().st_mode) == 0o600
        assert not any(pw in acl for pw in auth.passwords.values())  # hashed only
        assert auth.passwords["worker"] not in redact_url(server.url(0, "worker"))
        assert auth.passwords["worker"] not in repr(auth)
    finally:
        server.stop()


def test_tls_only_port(tmp_path: Path, tls: RedisTls) -> None:
    server = RedisServer(tmp_path / "redis", auth=RedisAuth.fresh(), tls=tls).start()
    try:
        assert server.url(0, "worker").startswith("rediss://worker:")
        assert server.client(role="worker").ping()
        with pytest.raises(redis.ConnectionError):  # plaintext on the TLS port
            redis.Redis(port=server.port, socket_timeout=2, socket_connect_timeout=2).ping()
    finally:
        server.stop()


@pytest.mark.timeout(180)
@pytest.mark.parametrize("over_tls", [False, True], ids=["auth", "auth+tls"])
def test_celery_round_trip_with_each_roles_credentials(
    tmp_path: Path, models_dir: Path, embedder: Embedder, request: pytest.FixtureRequest, over_tls: bool
) -> None:
    tls = request.getfixturevalue("tls") if over_tls else None
    server = RedisServer(tmp_path / "redis", auth=RedisAuth.fresh(), tls=tls).start()
    worker = CeleryWorker(server, models_dir, tmp_path / "worker")
    try:
        worker.start()
        s = celery_settings(server, models_dir)
        checker = CeleryFactChecker.from_settings(s.factcheck, s.llm, embedder)
        try:
            got = checker.check(QUERY, [RELEVANT], deadline_s=DEADLINE_S)
            assert not got.unverified, got.reason
        finally:
            checker.close()
        assert server.auth is not None and server.auth.passwords["worker"] not in worker.log()
    finally:
        worker.stop()
        server.stop()
