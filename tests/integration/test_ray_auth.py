"""Ray's token authentication as the orchestrator prepares it before ``ray.init`` (the stack and the
e2e suite start Ray with it on; docs/security.md)."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from services.common.errors import ErrorCode, RampartError
from services.common.settings import RampartSettings
from services.orchestrator.serving.ray_auth import MODE, TOKEN, TOKEN_PATH, prepare_ray_auth


@pytest.fixture()
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    for name in (MODE, TOKEN, TOKEN_PATH):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    return tmp_path / "home" / ".ray" / "auth_token"


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_on_by_default_with_a_private_token_file(clean_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert prepare_ray_auth(RampartSettings()) is True
    import os

    assert os.environ[MODE] == "token"
    assert mode(clean_env) == 0o600 and len(clean_env.read_text()) == 64
    token = clean_env.read_text()
    clean_env.chmod(0o644)  # as Ray writes it under the usual umask
    prepare_ray_auth(RampartSettings())
    assert mode(clean_env) == 0o600 and clean_env.read_text() == token  # narrowed, not replaced


def test_a_given_token_path_is_used(clean_env: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    path = tmp_path / "stack" / "ray-auth-token"
    monkeypatch.setenv(TOKEN_PATH, str(path))
    prepare_ray_auth(RampartSettings())
    assert mode(path) == 0o600 and not clean_env.exists()


def test_off_is_explicit(clean_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    assert prepare_ray_auth(RampartSettings(serve={"ray_auth": False})) is False  # type: ignore[arg-type]
    assert os.environ[MODE] == "disabled"  # else Ray 2.60 turns it on with a world-readable file
    assert not clean_env.exists()


def test_joining_a_cluster_needs_its_token(clean_env: Path) -> None:
    with pytest.raises(RampartError) as err:
        prepare_ray_auth(RampartSettings(serve={"ray_address": "ray://head:10001"}))  # type: ignore[arg-type]
    assert err.value.code is ErrorCode.FAILED_PRECONDITION and TOKEN_PATH in err.value.message
