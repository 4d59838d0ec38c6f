"""``rampart models build`` and the installed reranker: a model an earlier release shipped is upgraded to
the current one; a model the user trained and installed is never touched (``force`` restores ours)."""

from __future__ import annotations

import json
from pathlib import Path

from services.models.build import SHIPPED_RERANKER, install_shipped_reranker
from services.models.embedder_export import sha256_file
from services.models.reranker_export import read_manifest


def fake_model(dest: Path, **manifest: object) -> None:
    """A complete-looking installed model (its file matches its recorded hash)."""
    dest.mkdir(parents=True)
    (dest / "model.int8.onnx").write_bytes(b"not the shipped weights")
    (dest / "tokenizer.json").write_text("{}")
    variants = {"int8": {"file": "model.int8.onnx", "sha256": sha256_file(dest / "model.int8.onnx")}}
    (dest / "manifest.json").write_text(json.dumps({"model_id": "mine", "variants": variants, **manifest}))


def shipped_hash() -> str:
    manifest = read_manifest(SHIPPED_RERANKER)
    assert manifest is not None
    return str(manifest["variants"]["int8"]["sha256"])


def installed_hash(dest: Path) -> str:
    manifest = read_manifest(dest)
    assert manifest is not None
    return str(manifest["variants"]["int8"]["sha256"])


def test_fresh_install_is_marked_as_shipped(tmp_path: Path) -> None:
    dest = install_shipped_reranker(tmp_path / "reranker")
    manifest = read_manifest(dest)
    assert manifest is not None and manifest["shipped"] is True
    assert installed_hash(dest) == shipped_hash()


def test_a_model_an_earlier_release_shipped_is_upgraded(tmp_path: Path) -> None:
    fake_model(tmp_path / "reranker", shipped=True)
    messages: list[str] = []
    install_shipped_reranker(tmp_path / "reranker", progress=messages.append)
    assert installed_hash(tmp_path / "reranker") == shipped_hash()
    assert any("replacing the earlier release" in m for m in messages)


def test_a_model_the_user_installed_is_kept_unless_forced(tmp_path: Path) -> None:
    fake_model(tmp_path / "reranker")
    messages: list[str] = []
    install_shipped_reranker(tmp_path / "reranker", progress=messages.append)
    assert installed_hash(tmp_path / "reranker") != shipped_hash()
    assert any("keeping the installed mine" in m for m in messages)
    install_shipped_reranker(tmp_path / "reranker", force=True)
    assert installed_hash(tmp_path / "reranker") == shipped_hash()
