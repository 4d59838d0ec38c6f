"""Ray's token authentication for the orchestrator's cluster (``serve.ray_auth``; docs/security.md).

Ray (2.52 and later; 2.60 installed) checks a static token on its GCS, raylets, dashboard and job API
when ``RAY_AUTH_MODE=token``: without it, whoever reaches those ports runs code in the cluster. The
token comes from ``RAY_AUTH_TOKEN``, else the file ``RAY_AUTH_TOKEN_PATH``, else ``~/.ray/auth_token``,
which Ray writes with the process umask (world-readable under the usual 022). So before Ray starts:
the mode is set explicitly (Ray 2.60 turns token auth on by itself for a new local cluster when the
mode is unset, with that readable file), and the token file, ours or Ray's default, is mode 600,
created so when it does not exist yet (a new local cluster; one joined must bring its own token).
"""

from __future__ import annotations

import logging
import os
import secrets
from pathlib import Path

from services.common.errors import ErrorCode, RampartError
from services.common.settings import RampartSettings

log = logging.getLogger(__name__)

MODE, TOKEN, TOKEN_PATH = "RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH"


def token_file() -> Path:
    """Where Ray reads its token from when ``RAY_AUTH_TOKEN`` is unset."""
    given = os.environ.get(TOKEN_PATH)
    return Path(given) if given else Path.home() / ".ray" / "auth_token"


def prepare_ray_auth(settings: RampartSettings) -> bool:
    """Set Ray's auth mode for this process and the Ray processes it starts (an explicit
    ``RAY_AUTH_MODE`` wins over ``serve.ray_auth``), and make the token file private; returns
    whether token auth is on. Call before ``ray.init``."""
    mode = os.environ.setdefault(MODE, "token" if settings.serve.ray_auth else "disabled").lower()
    if mode == "token" and not os.environ.get(TOKEN):
        _private_token_file(token_file(), create=not settings.serve.ray_address)
    _reload_ray_config()
    return mode == "token"


def _private_token_file(path: Path, *, create: bool) -> None:
    if not path.exists():
        if not create:
            raise RampartError(
                ErrorCode.FAILED_PRECONDITION,
                f"serve.ray_address joins a cluster with token auth, but there is no token at {path}; set "
                f"{TOKEN} or {TOKEN_PATH} to the cluster's token (or RAMPART_SERVE__RAY_AUTH=false for a "
                "cluster without it)",
            )
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_hex(32))
        return
    if path.stat().st_mode & 0o077:
        log.warning("Ray's token file %s was readable by others; made it mode 600", path)
        path.chmod(0o600)


def _reload_ray_config() -> None:
    """Ray reads its mode and token once, at import: make this process see what was just set (what
    Ray's own ``_enable_token_auth`` does)."""
    from ray._raylet import AuthenticationTokenLoader, Config  # type: ignore[attr-defined]

    Config.initialize("")
    AuthenticationTokenLoader.instance().reset_cache()
