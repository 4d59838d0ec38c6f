"""``rampart triton …``: build the model repository and run a local tritonserver with it."""

from __future__ import annotations

import signal
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from services.cli.ui import console, fail, load_settings
from services.common.errors import ErrorCode, RampartError
from services.common.service_auth import is_loopback

if TYPE_CHECKING:
    from services.common.settings import RampartSettings
    from services.rerank.triton_server import TritonServer, TritonServerTls

triton_app = typer.Typer(help="NVIDIA Triton: model repository and a local server.", no_args_is_help=True)

# the thread layout of the scorer inside each instance (docs/reranking.md, "Cost on CPU")
Threads = Annotated[
    int | None,
    typer.Option(min=0, max=64, help="onnxruntime threads per call; 0 = all cores (default: rerank.threads)"),
]
Parallel = Annotated[
    int | None,
    typer.Option(min=0, max=64, help="onnxruntime calls at once per instance (default: rerank.parallel)"),
]


@triton_app.command("repo")
def triton_repo(
    out_dir: Annotated[Path, typer.Option("--out", help="Repository folder to (re)write")] = Path(
        ".rampart/triton/repository"
    ),
    instances: Annotated[
        int | None,
        typer.Option(min=1, help="Model instances (instance_group count; default 2 on CPU, 1 on GPU)"),
    ] = None,
    threads: Threads = None,
    parallel: Parallel = None,
    gpu: Annotated[bool, typer.Option(help="KIND_GPU instances (onnxruntime CUDA provider)")] = False,
    max_length: Annotated[int | None, typer.Option(min=16, max=512, help="Default: the model's")] = None,
) -> None:
    """Write a runnable model repository from the template and the built reranker."""
    from services.rerank.triton_repository import materialize

    settings = load_settings()
    try:
        repo = materialize(
            settings.reranker_model_dir(),
            out_dir,
            variant=settings.rerank.variant,
            max_length=max_length or settings.rerank.max_length,
            instances=instances,
            threads=settings.rerank.threads if threads is None else threads,
            parallel=settings.rerank.parallel if parallel is None else parallel,
            kind="KIND_GPU" if gpu else "KIND_CPU",
        )
    except RampartError as exc:
        raise fail(exc) from exc
    console.print(f"[green]repository[/green] {repo}")


def grpc_tls(cert: Path | None, key: Path | None, ca: Path | None) -> TritonServerTls | None:
    """The TLS of `triton serve`'s gRPC port; half a pair, or a CA without a certificate, is refused
    here rather than by tritonserver's start-up log."""
    from services.rerank.triton_server import TritonServerTls

    if cert is None and key is None and ca is None:
        return None
    if cert is None or key is None:
        raise typer.BadParameter(
            f"--grpc-cert ({cert}) and --grpc-key ({key}) go together; give both, or neither for plaintext"
        )
    for given in (cert, key, ca):
        if given is not None and not given.is_file():
            raise typer.BadParameter(f"{given} is not a file; `rampart certs dev --names triton` makes a set")
    return TritonServerTls(cert, key, ca)


def caller_key(settings: RampartSettings, address: str) -> str | None:
    """``rerank.triton.key`` checked for Triton's flag syntax; none is refused off loopback, where the
    HTTP port (no TLS) would answer anyone."""
    from services.rerank.triton_key import check_key

    key = settings.rerank.triton.key
    try:
        if key is not None:
            return check_key(key.get_secret_value())
        if not is_loopback(address):
            raise RampartError(
                ErrorCode.FAILED_PRECONDITION,
                f"tritonserver would listen on {address!r}, reachable from other hosts, and answer anyone "
                "(its HTTP port has no TLS): set RAMPART_RERANK__TRITON__KEY (its callers send it too), or "
                "bind 127.0.0.1",
            )
    except RampartError as exc:
        raise fail(exc) from exc
    return None


@triton_app.command("serve")
def triton_serve(
    grpc_port: Annotated[int, typer.Option(help="gRPC port (rerank.triton.url)")] = 8001,
    http_port: Annotated[int, typer.Option(help="HTTP port (health: /v2/health/ready)")] = 8000,
    metrics_port: Annotated[int, typer.Option(help="Prometheus metrics port")] = 8002,
    address: Annotated[
        str, typer.Option(help="Address of every listener, metrics included (0.0.0.0 exposes them all)")
    ] = "127.0.0.1",
    instances: Annotated[int | None, typer.Option(min=1, help="Model instances (default 2 on CPU)")] = None,
    threads: Threads = None,
    parallel: Parallel = None,
    grpc_cert: Annotated[
        Path | None, typer.Option(help="PEM certificate: gRPC over TLS (with --grpc-key; rerank.triton.tls)")
    ] = None,
    grpc_key: Annotated[Path | None, typer.Option(help="PEM key of --grpc-cert")] = None,
    grpc_ca: Annotated[
        Path | None,
        typer.Option(help="PEM CA: mutual TLS, clients need a certificate of it (with --grpc-cert)"),
    ] = None,
) -> None:
    """Run tritonserver on --address (127.0.0.1) with the project's repository until interrupted (needs
    `make triton`); --grpc-cert/--grpc-key (and --grpc-ca) put its gRPC port on (mutual) TLS, and
    RAMPART_RERANK__TRITON__KEY makes every API but health require the key (required off loopback)."""
    from services.rerank.triton_repository import materialize
    from services.rerank.triton_server import TritonServer

    tls = grpc_tls(grpc_cert, grpc_key, grpc_ca)

    settings = load_settings()
    key = caller_key(settings, address)
    work = settings.data_dir / "triton"
    try:
        repo = materialize(
            settings.reranker_model_dir(),
            work / "repository",
            variant=settings.rerank.variant,
            max_length=settings.rerank.max_length,
            instances=instances,
            threads=settings.rerank.threads if threads is None else threads,
            parallel=settings.rerank.parallel if parallel is None else parallel,
        )
    except RampartError as exc:
        raise fail(exc) from exc
    server = TritonServer(
        venv=settings.rerank.triton.venv,
        repository=repo,
        work_dir=work,
        grpc_port=grpc_port,
        http_port=http_port,
        metrics_port=metrics_port,
        address=address,
        tls=tls,
        caller_key=key,
        die_with_parent=True,  # supervisord SIGKILLs this launcher in `rampart bench faults`
    )
    run_in_foreground(server)


def run_in_foreground(server: TritonServer) -> None:
    """Start ``server`` and keep it until SIGINT/SIGTERM or its exit; always stop it."""
    # Handlers first: tritonserver runs in its own session, so a SIGTERM (supervisord stopping the
    # stack) that killed this process during the start-up wait would leave it running, orphaned.
    stop, starting = threading.Event(), threading.Event()
    starting.set()

    def on_signal(*_: object) -> None:
        stop.set()
        if starting.is_set():  # raise once, only to leave the start-up wait; later signals just stop
            starting.clear()
            raise _StoppedDuringStartError

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, on_signal)
    try:
        try:
            server.start()
            starting.clear()  # a signal before this line still lands in the except below
            console.print(f"[green]triton ready[/green] grpc {server.grpc_url}, log {server.log_path}")
        except RampartError as exc:
            raise fail(exc) from exc
        except _StoppedDuringStartError:
            console.print("stopped during start-up")
            return
        while not stop.is_set() and server.proc is not None and server.proc.poll() is None:
            stop.wait(1.0)
    finally:
        starting.clear()
        server.stop()
    console.print("triton stopped")


class _StoppedDuringStartError(Exception):
    """Raised by the signal handler to leave ``TritonServer.start``'s readiness wait."""
