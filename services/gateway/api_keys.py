"""API keys: ``rk_<id>_<secret>``; only an HMAC-SHA256 of the secret is stored, never the key.

Keys are 256-bit random tokens, so a fast keyed hash is the right tool (a slow password hash buys
nothing against brute force of 2^256 and costs every request). The optional pepper
(``RAMPART_KEY_PEPPER``) keeps a stolen key file useless on its own. Lookup is by the public id;
comparison is constant-time.

Keys expire (``not_after``) and rotate without downtime: :meth:`ApiKeyStore.rotate` makes a new key for
the same principal and lets the old one live on for an overlap (default a day) while clients switch,
so a principal may hold several active keys at once. A key may also carry its connector's ``source``
namespace and ``trust`` (what the fact-check believes of its documents): both are the key's, never
the request body's (docs/security.md, "Write ACL and provenance").
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import BaseModel, Field

from services.common.errors import ErrorCode, RampartError
from services.common.types import Principal

if TYPE_CHECKING:
    from services.common.settings import RampartSettings

PREFIX = "rk_"
SCOPES = ("search", "ingest", "admin")


TRUST_LEVELS = ("", "untrusted")


class KeyRecord(BaseModel):
    id: str
    hash: str
    principal: Principal
    label: str = ""
    created_at: float = Field(default_factory=time.time)
    revoked: bool = False
    not_after: float | None = Field(default=None, description="Unix time the key stops working (None: never)")
    replaced_by: str | None = Field(default=None, description="Id of the key that rotated this one out")
    source: str | None = Field(
        default=None, description="The connector's source namespace: documents it writes must lie under it"
    )
    trust: str = Field(
        default="", description="'untrusted': its documents face the fact-check's stricter bar"
    )

    def expired(self, now: float | None = None) -> bool:
        return self.not_after is not None and (now if now is not None else time.time()) >= self.not_after


class KeyFile(BaseModel):
    keys: list[KeyRecord] = Field(default_factory=list)


def _digest(secret: str, pepper: bytes) -> str:
    return hmac.new(pepper, secret.encode(), hashlib.sha256).hexdigest()


class ApiKeyStore:
    """A JSON file of hashed keys, re-read when it changes on disk (``rampart keys`` edits it)."""

    @classmethod
    def from_settings(cls, settings: RampartSettings) -> ApiKeyStore:
        """The store every process of one deployment shares: ``api_keys_path()`` and ``key_pepper``."""
        pepper = settings.key_pepper.get_secret_value() if settings.key_pepper else None
        return cls(settings.api_keys_path(), pepper=pepper)

    def __init__(self, path: Path, *, pepper: str | None = None) -> None:
        self.path = path
        self._pepper = (pepper or "rampart-api-key").encode()
        self._lock = threading.Lock()
        self._mtime: tuple[int, int, int] | None = None
        self._by_id: dict[str, KeyRecord] = {}

    def _load(self) -> None:
        try:
            st = self.path.stat()
        except FileNotFoundError:
            self._by_id, self._mtime = {}, None
            return
        mtime = (st.st_mtime_ns, st.st_size, st.st_ino)  # atomic replace changes the inode
        if mtime == self._mtime:
            return
        data = KeyFile.model_validate_json(self.path.read_text(encoding="utf-8"))
        self._by_id = {k.id: k for k in data.keys}
        self._mtime = mtime

    def _save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        data = KeyFile(keys=list(self._by_id.values()))
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(json.dumps(data.model_dump(mode="json"), indent=2))
        tmp.replace(self.path)
        self._mtime = None

    def create(
        self,
        principal: Principal,
        *,
        label: str = "",
        not_after: float | None = None,
        source: str | None = None,
        trust: str = "",
    ) -> tuple[str, KeyRecord]:
        """Make a key; the returned string is shown once and never stored.

        ``store.create(Principal(tenant="acme", user="wiki-sync", scopes=["ingest"]),
        source="https://wiki.acme.example/", trust="untrusted", not_after=time.time() + 90 * 86400)``
        """
        for scope in principal.scopes:
            if scope not in SCOPES:
                raise RampartError(
                    ErrorCode.INVALID_ARGUMENT, f"unknown scope {scope!r}; use one of {', '.join(SCOPES)}"
                )
        if trust not in TRUST_LEVELS:
            raise RampartError(
                ErrorCode.INVALID_ARGUMENT, f"unknown trust {trust!r}; use 'untrusted' or leave it empty"
            )
        if not_after is not None and not_after <= time.time():
            raise RampartError(
                ErrorCode.INVALID_ARGUMENT,
                f"expiry {_when(not_after)} is in the past; give a positive number of days",
            )
        key_id = secrets.token_hex(6)
        secret = secrets.token_urlsafe(32)
        record = KeyRecord(
            id=key_id,
            hash=_digest(secret, self._pepper),
            principal=principal,
            label=label,
            not_after=not_after,
            source=source or None,
            trust=trust,
        )
        with self._lock:
            self._load()
            self._by_id[key_id] = record
            self._save()
        return f"{PREFIX}{key_id}_{secret}", record

    def rotate(self, key_id: str, *, overlap_s: float = 86400.0) -> tuple[str, KeyRecord]:
        """A new key for ``key_id``'s principal (same label, source, trust and lifetime); the old one
        keeps working for ``overlap_s`` seconds (clients switch meanwhile), then expires.
        ``overlap_s=0`` ends it at once (a leaked key)."""
        now = time.time()
        with self._lock:
            self._load()
            old = self._by_id.get(key_id)
        if old is None or old.revoked or old.expired(now):
            raise RampartError(
                ErrorCode.NOT_FOUND,
                f"no active key {key_id!r} to rotate; see `rampart keys list` (create a new one instead)",
            )
        lifetime = None if old.not_after is None else max(old.not_after - old.created_at, 1.0)
        key, new = self.create(
            old.principal,
            label=old.label,
            not_after=None if lifetime is None else now + lifetime,
            source=old.source,
            trust=old.trust,
        )
        with self._lock:
            self._load()
            rec = self._by_id[key_id]
            end = now + max(overlap_s, 0.0)
            rec.not_after = end if rec.not_after is None else min(rec.not_after, end)
            rec.replaced_by = new.id
            self._save()
        return key, new

    def revoke(self, key_id: str) -> bool:
        with self._lock:
            self._load()
            rec = self._by_id.get(key_id)
            if rec is None:
                return False
            rec.revoked = True
            self._save()
            return True

    def list(self) -> list[KeyRecord]:
        with self._lock:
            self._load()
            return list(self._by_id.values())

    def authenticate(self, key: str | None) -> tuple[str, Principal]:
        """``(key id, principal)`` for a valid key; raises UNAUTHENTICATED otherwise."""
        rec = self.authenticate_record(key)
        return rec.id, rec.principal

    def authenticate_record(self, key: str | None) -> KeyRecord:
        """The record of a valid, unexpired, unrevoked key; raises UNAUTHENTICATED otherwise."""
        if not key:
            raise RampartError(
                ErrorCode.UNAUTHENTICATED,
                "missing API key; send it as 'Authorization: Bearer rk_…' (create one with `rampart keys create`)",
            )
        parts = key[len(PREFIX) :].split("_", 1) if key.startswith(PREFIX) else []
        if len(parts) != 2:
            raise RampartError(ErrorCode.UNAUTHENTICATED, "malformed API key; expected rk_<id>_<secret>")
        key_id, secret = parts
        with self._lock:
            self._load()
            rec = self._by_id.get(key_id)
        expected = rec.hash if rec is not None else _digest("x", self._pepper)
        ok = hmac.compare_digest(expected, _digest(secret, self._pepper))
        if rec is None or not ok or rec.revoked:
            raise RampartError(ErrorCode.UNAUTHENTICATED, "invalid or revoked API key")
        if rec.expired():
            hint = f"use its replacement {rec.replaced_by}" if rec.replaced_by else "create a new one"
            raise RampartError(
                ErrorCode.UNAUTHENTICATED,
                f"API key {key_id} expired at {_when(rec.not_after)}; {hint} (`rampart keys rotate`)",
            )
        return rec


def _when(t: float | None) -> str:
    return "never" if t is None else time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(t))
