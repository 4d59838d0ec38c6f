from __future__ import annotations

import stat
import time
from pathlib import Path

import pytest

from services.common.errors import ErrorCode, RampartError
from services.common.types import Principal
from services.gateway.api_keys import ApiKeyStore

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


def test_principal_acl_tokens() -> None:
    assert WHO.acl_tokens() == ["g:*", "g:eng", "u:alice"]
    assert WHO.can("search") and not WHO.can("ingest")
    assert Principal(tenant="t", user="u", scopes=["admin"]).can("ingest")


def test_an_expired_key_is_refused_and_names_its_replacement(tmp_path: Path) -> None:
    """Expiry and rotation: a key past its ``not_after`` is refused; after a rotation the old key works
    for the overlap only, then is refused naming the new one, which keeps working."""
    store = ApiKeyStore(tmp_path / "keys.json")
    who = Principal(tenant="acme", user="ci")
    with pytest.raises(RampartError, match="in the past"):
        store.create(who, not_after=time.time() - 1)  # refused at creation, naming the fix
    lapsed, _ = store.create(who, not_after=time.time() + 0.2)
    time.sleep(0.3)
    with pytest.raises(RampartError) as err:
        store.authenticate(lapsed)
    assert err.value.code is ErrorCode.UNAUTHENTICATED and "expired" in err.value.message
    old, rec = store.create(who, not_after=time.time() + 3600)
    new, new_rec = store.rotate(rec.id, overlap_s=0.3)
    assert store.authenticate(old)[0] == rec.id  # the overlap: both work
    assert store.authenticate(new)[0] == new_rec.id
    time.sleep(0.4)
    with pytest.raises(RampartError) as err:
        store.authenticate(old)
    assert err.value.code is ErrorCode.UNAUTHENTICATED and new_rec.id in err.value.message
    assert store.authenticate(new)[1] == who  # the replacement keeps the principal
    with pytest.raises(RampartError, match="no active key"):
        store.rotate(rec.id)  # an expired key cannot be rotated again
