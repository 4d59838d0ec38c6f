"""A throwaway ``redis-server`` (Debian's binary) on loopback, owned by the process that starts it.

Used by ``rampart bench factcheck`` and by the integration tests, so both exercise the fact-checker
against a real Redis started the same way. The server runs in the foreground as a child of the
caller (never daemonized, persistence off, its files in ``work``) and in its own session, so a Ctrl-C
in the terminal reaches the caller only: the caller decides when to stop it, and always does.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import secrets
import shutil
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote, urlencode, urlsplit, urlunsplit

import redis

from services.common.errors import ErrorCode, RampartError
from services.common.net import free_port
from services.common.processes import OwnedProcess

INSTALL_HINT = "apt-get install redis-server (`make system-deps` does it)"


# What each role's Redis user may do (Redis 7 ACL rules). Every role is denied the admin commands
# (CONFIG, ACL, SHUTDOWN, MONITOR, DEBUG, REPLICAOF, ...) and the flushes: a leaked credential cannot
# reconfigure the server, read the other users, or wipe it. The gateway touches only its rate-limit
# buckets; Celery's queues, results and pub/sub channels have fixed names shared by the orchestrator
# (the producer) and the workers, so those two keep every key and differ by credential, not by key.
ROLE_RULES: dict[str, str] = {
    "gateway": "~rampart:ratelimit:* ~rampart:feedback:* resetchannels +@all -@admin -@dangerous",
    "orchestrator": "~* &* +@all -@admin -flushall -flushdb",
    "worker": "~* &* +@all -@admin -flushall -flushdb",
}


@dataclass(frozen=True, repr=False)
class RedisAuth:
    """One Redis user per role (:data:`ROLE_RULES`) with its password; the ``default`` user is off, so a
    connection without credentials can do nothing but AUTH."""

    passwords: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def fresh(cls, roles: tuple[str, ...] = tuple(ROLE_RULES)) -> RedisAuth:
        return cls({role: secrets.token_urlsafe(24) for role in roles})

    def __repr__(self) -> str:  # never the passwords
        return f"RedisAuth(roles={sorted(self.passwords)})"

    def acl_text(self) -> str:
        """The ACL file: passwords only as SHA-256 (``#<hex>``), so the file holds no credential."""
        lines = ["user default off resetkeys resetchannels -@all"]
        for role, password in sorted(self.passwords.items()):
            digest = hashlib.sha256(password.encode()).hexdigest()
            lines.append(f"user {role} on #{digest} {ROLE_RULES[role]}")
        return "\n".join(lines) + "\n"

    def write_acl(self, path: Path) -> Path:
        """Write :meth:`acl_text` to ``path``, mode 600 from its creation."""
        path.unlink(missing_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(self.acl_text())
        return path


@dataclass(frozen=True)
class RedisTls:
    """Redis over TLS: the server's certificate and key, and the CA clients check it against."""

    cert: Path
    key: Path
    ca: Path

    def server_args(self, port: int) -> list[str]:
        # TLS on the one port, plaintext off; clients are checked by password, not certificate
        return [
            "--port", "0", "--tls-port", str(port), "--tls-cert-file", str(self.cert),
            "--tls-key-file", str(self.key), "--tls-ca-cert-file", str(self.ca), "--tls-auth-clients", "no",
        ]  # fmt: skip


def redis_url(
    port: int,
    db: int = 0,
    *,
    host: str = "127.0.0.1",
    role: str | None = None,
    auth: RedisAuth | None = None,
    tls: RedisTls | None = None,
) -> str:
    """The URL of ``db`` as ``role`` (credentials in it: pass it in settings or the environment, never
    log it: :func:`redact_url`); ``rediss://`` checking the CA with TLS."""
    userinfo = ""
    if auth is not None and role is not None:
        userinfo = f"{quote(role, safe='')}:{quote(auth.passwords[role], safe='')}@"
    if tls is None:
        return f"redis://{userinfo}{host}:{port}/{db}"
    query = urlencode({"ssl_cert_reqs": "required", "ssl_ca_certs": str(tls.ca)})
    return f"rediss://{userinfo}{host}:{port}/{db}?{query}"


def redact_url(url: str) -> str:
    """``url`` with any password replaced by ``***``: broker URLs carry credentials, logs must not."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<unparseable url>"
    if parts.password is None:
        return url
    user = parts.username or ""
    host = parts.hostname or ""
    if parts.port is not None:
        host = f"{host}:{parts.port}"
    return urlunsplit(parts._replace(netloc=f"{user}:***@{host}"))


def redis_command(
    binary: Path,
    port: int,
    *,
    aclfile: Path | None = None,
    tls: RedisTls | None = None,
    persist: Path | None = None,
) -> list[str]:
    """``redis-server`` on 127.0.0.1:``port``; ``aclfile``: its users (:meth:`RedisAuth.write_acl`);
    ``tls``: TLS only on that port. Persistence is off (a broker, result store and cache whose contents
    may be lost: tasks expire, evidence is recomputed) unless ``persist`` names a folder: then an
    append-only file there, fsync'd every second, because the feedback streams live in it too
    (services/learning/feedback_redis.py) and a restart must not lose them."""
    listen = tls.server_args(port) if tls is not None else ["--port", str(port)]
    users = ["--aclfile", str(aclfile)] if aclfile is not None else []
    if persist is None:
        durability = ["--appendonly", "no"]
    else:
        durability = ["--appendonly", "yes", "--appendfsync", "everysec", "--dir", str(persist)]
    return [str(binary), "--bind", "127.0.0.1", *listen, "--save", "", *durability, *users]


def redis_server_binary() -> Path | None:
    """The ``redis-server`` to run, or ``None`` when it is not installed."""
    found = shutil.which("redis-server")
    if found:
        return Path(found)
    debian = Path("/usr/bin/redis-server")  # PATH may be minimal under sudo or cron
    return debian if debian.exists() else None


class RedisServer(OwnedProcess):
    """``redis-server`` on 127.0.0.1, persistence off unless ``persist``; restartable on the same port (the tests
    restart it to check that clients reconnect)."""

    def __init__(
        self,
        work: Path,
        port: int | None = None,
        binary: Path | None = None,
        *,
        auth: RedisAuth | None = None,
        tls: RedisTls | None = None,
        persist: bool = False,
    ) -> None:
        self.work = work
        self.persist = persist  # an append-only file in ``work``: what was written survives a restart
        self.port = port or free_port()
        self.binary = binary
        self.auth = auth
        self.tls = tls
        self.proc: subprocess.Popen[bytes] | None = None
        work.mkdir(parents=True, exist_ok=True)

    @property
    def log_path(self) -> Path:
        return self.work / "redis.log"

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def url(self, db: int = 0, role: str | None = None) -> str:
        """``db``'s URL as ``role`` (with :attr:`auth`: default its first role)."""
        if self.auth is not None and role is None:
            role = next(iter(self.auth.passwords))
        return redis_url(self.port, db, role=role, auth=self.auth, tls=self.tls)

    def client(self, db: int = 0, role: str | None = None) -> redis.Redis:
        return redis.Redis.from_url(self.url(db, role), socket_connect_timeout=1, socket_timeout=2)

    def command(self, binary: Path) -> list[str]:
        acl = self.auth.write_acl(self.work / "users.acl") if self.auth is not None else None
        if self.persist:
            return redis_command(binary, self.port, aclfile=acl, tls=self.tls, persist=self.work)
        return [*redis_command(binary, self.port, aclfile=acl, tls=self.tls), "--dir", str(self.work)]

    def start(self, timeout_s: float = 10.0) -> RedisServer:
        """Start the server and return once it answers PING; raise ``RampartError`` (with the log's
        tail) if it cannot. Whatever happens meanwhile, including Ctrl-C, leaves no process behind."""
        binary = self.binary or redis_server_binary()
        if binary is None or not binary.exists():
            raise RampartError(
                ErrorCode.FAILED_PRECONDITION, f"redis-server is not installed; install it: {INSTALL_HINT}"
            )
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(  # noqa: S603  # argument list of a resolved binary, no shell
                self.command(binary),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        try:
            self._wait_ready(timeout_s)
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_ready(self, timeout_s: float) -> None:
        assert self.proc is not None
        client = self.client()
        try:
            end = time.monotonic() + timeout_s
            while True:
                with contextlib.suppress(redis.RedisError):  # not listening yet
                    if client.ping():
                        return
                if self.proc.poll() is not None or time.monotonic() > end:
                    raise RampartError(
                        ErrorCode.UNAVAILABLE,
                        f"redis-server on port {self.port} did not answer PING:\n{self.tail_log()}",
                        port=self.port,
                    )
                time.sleep(0.02)
        finally:
            client.close()

    def tail_log(self, chars: int = 2000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return "(no log)"
