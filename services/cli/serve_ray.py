"""``rampart serve-ray``: the orchestrator as a Ray Serve application, until interrupted.

Ray is imported only here, inside the command: it is the optional ``serve`` extra, and the embedded
default never needs it.
"""

from __future__ import annotations

import json
from typing import Annotated

import typer

from services.cli.ui import fail, load_settings, print_error
from services.common.errors import RampartError, invalid


def serve_ray(
    host: Annotated[
        str | None, typer.Option(help="Serve HTTP bind address (default serve.host: 127.0.0.1)")
    ] = None,
    port: Annotated[int | None, typer.Option(help="Serve HTTP port (default serve.port: 8090)")] = None,
    ray_address: Annotated[
        str | None, typer.Option(help="Join this Ray cluster instead of starting a local one")
    ] = None,
    tunables: Annotated[
        str | None,
        typer.Option(help="Initial live tunables as JSON, e.g. '{\"rerank_depth\": 20}' (docs/ray-serve.md)"),
    ] = None,
) -> None:
    """Serve the orchestrator on Ray Serve (distributed mode); the gateway calls POST /v1/search."""
    try:
        from services.orchestrator.serving import serve_app
        from services.orchestrator.serving.serve_config import LiveTunables
    except ImportError as exc:
        print_error(f"{exc}; install the serve extra: pip install -e '.[serve]'")
        raise typer.Exit(code=2) from exc

    settings = load_settings()
    overrides = {k: v for k, v in {"host": host, "port": port, "ray_address": ray_address}.items() if v}
    try:
        if overrides:
            serve = settings.serve.model_validate({**settings.serve.model_dump(), **overrides})
            settings = settings.model_copy(update={"serve": serve})
        chosen = LiveTunables.parse(_json(tunables)) if tunables else None
        serve_app.serve_forever(settings, chosen)
    except ValueError as exc:
        print_error(f"{exc}")
        raise typer.Exit(code=2) from exc
    except RampartError as exc:
        raise fail(exc) from exc


def _json(text: str) -> object:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise invalid(f"--tunables is not JSON ({exc.msg} at {exc.pos}): {text[:80]!r}") from exc
