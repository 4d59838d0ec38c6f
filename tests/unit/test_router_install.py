"""`rampart models build` and the router: the shipped one is installed and marked, a router the user
trained and installed is kept, --force restores the shipped one."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from services.common.errors import RampartError
from services.models.build import SHIPPED_ROUTER, install_shipped_router
from services.orchestrator.routing.router import RouterWeights


def test_install_keep_and_force(tmp_path: Path) -> None:
    dest = tmp_path / "router"
    said: list[str] = []
    install_shipped_router(dest, progress=said.append)
    assert json.loads((dest / "manifest.json").read_text())["shipped"] is True
    assert (dest / "weights.npz").read_bytes() == (SHIPPED_ROUTER / "weights.npz").read_bytes()
    install_shipped_router(dest, progress=said.append)
    assert "up to date" in said[-1]

    # the user's own router (no "shipped" mark, other weights) survives a rebuild
    mine = RouterWeights.load(SHIPPED_ROUTER)
    manifest = {k: v for k, v in mine.manifest.items() if k != "shipped"} | {"model_id": "mine"}
    shutil.rmtree(dest)
    RouterWeights(
        mine.mean + 1.0, mine.scale, mine.embedding_scale, mine.type_head, mine.complexity_head, manifest
    ).save(dest)
    install_shipped_router(dest, progress=said.append)
    assert "keeping the installed mine" in said[-1]
    assert not np.allclose(RouterWeights.load(dest).mean, mine.mean)
    install_shipped_router(dest, force=True)
    assert np.allclose(RouterWeights.load(dest).mean, mine.mean)


def test_unreadable_router_names_the_fix(tmp_path: Path) -> None:
    (tmp_path / "manifest.json").write_text("{}")
    (tmp_path / "weights.npz").write_bytes(b"not a zip")
    with pytest.raises(RampartError, match="rampart models build --force"):
        RouterWeights.load(tmp_path)
