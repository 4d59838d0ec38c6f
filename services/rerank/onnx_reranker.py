"""The embedded :class:`~services.rerank.reranker.Reranker`: an exported cross-encoder on onnxruntime.

Reads a folder written by :func:`services.models.reranker_export.export_reranker` (or the shipped
artifact copied by ``rampart models build``). Scoring is :class:`~services.rerank.pair_scorer.PairScorer`,
the same code the Triton model runs. onnxruntime sessions are thread-safe and the tokenizer is only
read after load, so concurrent :meth:`score` calls are safe.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from services.common.errors import ErrorCode, RampartError
from services.rerank.pair_scorer import MAX_POSITIONS, PairScorer
from services.rerank.reranker import check_pairs

MANIFEST_FILE = "manifest.json"
TOKENIZER_FILE = "tokenizer.json"


RERANKER_FIX = "run `rampart models build` (or set RAMPART_RERANK__BACKEND=none)"


def unusable(path: Path, why: str, *, what: str = "reranker model", fix: str = RERANKER_FIX) -> RampartError:
    """The error for an exported model folder that cannot serve: what is wrong and how to fix it."""
    return RampartError(ErrorCode.FAILED_PRECONDITION, f"{what} at {path} {why}; {fix}", path=str(path))


def load_manifest(path: Path, *, what: str = "reranker model", fix: str = RERANKER_FIX) -> dict[str, Any]:
    """The folder's manifest.json, checked to list variants (errors say ``what`` and ``fix``)."""
    try:
        manifest = json.loads((path / MANIFEST_FILE).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise unusable(path, "is missing (no manifest.json)", what=what, fix=fix) from None
    except (OSError, ValueError) as exc:
        raise unusable(path, f"has an unreadable manifest ({exc})", what=what, fix=fix) from exc
    if not isinstance(manifest, dict) or not isinstance(manifest.get("variants"), dict):
        raise unusable(path, "has a manifest without variants", what=what, fix=fix)
    return manifest


class OnnxReranker:
    def __init__(self, scorer: PairScorer, model_id: str, first_stage_weight: float | None = None) -> None:
        self._scorer = scorer
        self._model_id = model_id
        self._first_stage_weight = first_stage_weight

    @classmethod
    def from_dir(
        cls,
        path: Path,
        *,
        variant: str = "int8",
        max_length: int | None = None,
        batch_size: int = 1,
        threads: int = 1,
        parallel: int = 0,
        providers: Sequence[str] = ("CPUExecutionProvider",),
    ) -> OnnxReranker:
        path = Path(path)
        manifest = load_manifest(path)
        info = manifest["variants"].get(variant)
        if not isinstance(info, dict) or not (path / str(info.get("file", ""))).is_file():
            have = ", ".join(sorted(manifest["variants"])) or "none"
            raise unusable(path, f"has no {variant!r} variant (has: {have}); set RAMPART_RERANK__VARIANT")
        trained = int(manifest.get("max_length", 256))
        length = max_length or trained
        if not 8 <= length <= MAX_POSITIONS:
            raise RampartError(
                ErrorCode.INVALID_ARGUMENT,
                f"reranker max_length must be in [8, {MAX_POSITIONS}], got {length}",
            )
        try:
            scorer = PairScorer.load(
                str(path / info["file"]),
                str(path / TOKENIZER_FILE),
                max_length=length,
                batch_size=batch_size,
                threads=threads,
                parallel=parallel,
                providers=providers,
            )
        except Exception as exc:  # onnxruntime/tokenizers raise untyped errors on bad files
            raise unusable(path, f"cannot be loaded ({exc})") from exc
        model_id = f"{manifest.get('model_id', path.name)}@{str(info.get('sha256', ''))[:12]}:{variant}"
        if length != trained:
            model_id += f"+len{length}"
        weight = manifest.get("first_stage_weight")
        return cls(scorer, model_id, float(weight) if weight is not None else None)

    @property
    def model_id(self) -> str:
        return self._model_id

    @property
    def first_stage_weight(self) -> float | None:
        return self._first_stage_weight

    @property
    def max_length(self) -> int:
        return self._scorer.max_length

    def score(self, query: str, passages: Sequence[str]) -> list[float]:
        items = check_pairs(query, passages)
        return [float(x) for x in self._scorer.score(query, items)]

    def check_ready(self) -> None:
        self._scorer.score("ready", ["ready"])

    def close(self) -> None:
        self._scorer.close()

    def __repr__(self) -> str:
        return f"OnnxReranker(model_id={self._model_id!r})"
