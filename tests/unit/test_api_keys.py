from __future__ import annotations

import stat
import time
from pathlib import Path

import pytest

from services.common.errors import ErrorCode, RampartError
from services.common.types import Principal
from services.gateway.api_keys import ApiKeyStore
from services.gateway.rate_limit import InMemoryLimiter, RedisLimiter

WHO = Principal(tenant="acme", user="alice", groups=["eng"], scopes=["search"])


def test_key_roundtrip_and_storage_is_hashed(tmp_path: Path) -> None:
    store = ApiKeyStore(tmp_path / "keys.json", pepper="pep")
    key, rec = store.create(WHO, label="t")
    key_id, principal = store.authenticate(key)
    assert key_id == rec.id and principal == WHO
    raw = (tmp_path / "keys.json").read_text()
    assert key.split("_", 2)[2] not in raw and "pep" not in raw
    assert stat.S_IMODE((tmp_path / "keys.json").stat().st_mode) == 0o600


@pytest.mark.parametrize("bad", [None, "", "rk_", "nonsense", "rk_abc", "rk_deadbeef0000_secret"])
def test_bad_keys_are_unauthenticated(tmp_path: Path, bad: str | None) -> None:
    store = ApiKeyStore(tmp_path / "keys.json")
    store.create(WHO)
    with pytest.raises(RampartError) as err:
        store.authenticate(bad)
    assert err.value.code is ErrorCode.UNAUTHENTICATED


def test_wrong_secret_revocation_and_pepper(tmp_path: Path) -> None:
    store = ApiKeyStore(tmp_path / "keys.json", pepper="one")
    key, rec = store.create(WHO)
    prefix = key.rsplit("_", 1)[0]
    with pytest.raises(RampartError):
        store.authenticate(prefix + "_wrong")
    with pytest.raises(RampartError):  # a different pepper invalidates every key
        ApiKeyStore(tmp_path / "keys.json", pepper="two").authenticate(key)
    assert store.revoke(rec.id) and not store.revoke("nope")
    with pytest.raises(RampartError, match="revoked"):
        store.authenticate(key)


def test_unknown_scope_is_refused(tmp_path: Path) -> None:
    with pytest.raises(RampartError, match="scope"):
        ApiKeyStore(tmp_path / "k.json").create(WHO.model_copy(update={"scopes": ["root"]}))


def test_store_sees_keys_added_by_another_process(tmp_path: Path) -> None:
    server_view = ApiKeyStore(tmp_path / "k.json")
    assert server_view.list() == []
    key, _ = ApiKeyStore(tmp_path / "k.json").create(WHO)  # e.g. `rampart keys create`
    assert server_view.authenticate(key)[1] == WHO


def test_rate_limiter_bucket() -> None:
    rl = InMemoryLimiter()
    assert rl.take("k", 1, 2)[0] and rl.take("k", 1, 2)[0]
    allowed, wait = rl.take("k", 1, 2)
    assert not allowed and wait > 0
    assert rl.take("other", 1, 2)[0]
    assert rl.take("k", 1, 0) == (True, 0.0)


def test_rate_limiter_weighs_cost_and_peeks() -> None:
    """An answer (cost 4) takes four searches' worth; cost 0 asks without taking."""
    rl = InMemoryLimiter()
    assert rl.take("k", 4, 6)[0]
    assert rl.take("k", 0, 6)[0] and rl.take("k", 0, 6)[0]  # peeking takes nothing: 2 left
    allowed, wait = rl.take("k", 4, 6)
    assert not allowed and 15 < wait <= 20  # 2 units short at 0.1 unit/s
    assert rl.take("k", 2, 6)[0]
    assert not rl.take("k", 0, 6)[0]  # empty: even a peek is refused


def test_key_expiry(tmp_path: Path) -> None:
    store = ApiKeyStore(tmp_path / "k.json")
    key, rec = store.create(WHO, not_after=time.time() + 0.3)
    assert store.authenticate(key)[0] == rec.id
    time.sleep(0.35)
    with pytest.raises(RampartError, match=f"API key {rec.id} expired at .*create a new one"):
        store.authenticate(key)
    with pytest.raises(RampartError, match="in the past"):
        store.create(WHO, not_after=time.time() - 1)


def test_rotation_keeps_the_old_key_for_the_overlap(tmp_path: Path) -> None:
    """Two active keys for one principal during the overlap; then only the new one."""
    store = ApiKeyStore(tmp_path / "k.json")
    old_key, old = store.create(WHO, label="ci", source="https://wiki.example/", trust="untrusted")
    new_key, new = store.rotate(old.id, overlap_s=0.3)
    assert new.principal == WHO and (new.label, new.source, new.trust) == (
        "ci",
        "https://wiki.example/",
        "untrusted",
    )
    assert store.authenticate(old_key)[0] == old.id and store.authenticate(new_key)[0] == new.id
    time.sleep(0.35)
    with pytest.raises(RampartError, match=f"use its replacement {new.id}"):
        store.authenticate(old_key)
    assert store.authenticate(new_key)[0] == new.id
    with pytest.raises(RampartError, match="no active key"):
        store.rotate(old.id)


def test_rotation_keeps_the_lifetime(tmp_path: Path) -> None:
    store = ApiKeyStore(tmp_path / "k.json")
    _, old = store.create(WHO, not_after=time.time() + 1000)
    _, new = store.rotate(old.id, overlap_s=0)
    assert new.not_after is not None and 990 < new.not_after - time.time() <= 1001
    assert store.list()[0].expired()


def test_unknown_trust_is_refused(tmp_path: Path) -> None:
    with pytest.raises(RampartError, match="unknown trust 'low'"):
        ApiKeyStore(tmp_path / "k.json").create(WHO, trust="low")


def test_principal_acl_tokens() -> None:
    assert WHO.acl_tokens() == ["g:*", "g:eng", "u:alice"]
    assert WHO.can("search") and not WHO.can("ingest")
    assert Principal(tenant="t", user="u", scopes=["admin"]).can("ingest")


def test_redis_password_never_reaches_a_message() -> None:
    """The limiter's errors name the Redis they could not reach, without its password (errors end up
    in logs and in 503 bodies)."""
    limiter = RedisLimiter("redis://gateway:hunter2@127.0.0.1:1/0", timeout_s=0.2)  # nothing listens on 1
    with pytest.raises(RampartError) as err:
        limiter.check()
    assert err.value.code is ErrorCode.UNAVAILABLE
    assert "redis://gateway:***@127.0.0.1:1/0" in err.value.message and "hunter2" not in err.value.message
