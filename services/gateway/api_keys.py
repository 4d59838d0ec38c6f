"""API keys: ``rk_<id>_<secret>``; only an HMAC-SHA256 of the secret is stored, never the key.

Keys are 256-bit random tokens, so a fast keyed hash is the right tool (a slow password hash buys
nothing against brute force of 2^256 and costs every request). The optional pepper
(``RAMPART_KEY_PEPPER``) keeps a stolen key file useless on its own. Lookup is by the public id;
comparison is constant-time.
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


class KeyRecord(BaseModel):
    id: str
    hash: str
    principal: Principal
    label: str = ""
    created_at: float = Field(default_factory=time.time)
    revoked: bool = False


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

    def create(self, principal: Principal, *, label: str = "") -> tuple[str, KeyRecord]:
        """Make a key; the returned string is shown once and never stored."""
        for scope in principal.scopes:
            if scope not in SCOPES:
                raise RampartError(
                    ErrorCode.INVALID_ARGUMENT, f"unknown scope {scope!r}; use one of {', '.join(SCOPES)}"
                )
        key_id = secrets.token_hex(6)
        secret = secrets.token_urlsafe(32)
        record = KeyRecord(id=key_id, hash=_digest(secret, self._pepper), principal=principal, label=label)
        with self._lock:
            self._load()
            self._by_id[key_id] = record
            self._save()
        return f"{PREFIX}{key_id}_{secret}", record

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
        return key_id, rec.principal
