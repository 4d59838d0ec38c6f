"""The trained contradiction classifier at serving time: does this evidence SUPPORT, CONTRADICT or say
nothing about (NEI) this claim?

Number and negation alignment (``detectors/claims.py``) cannot see "the answer is X" against "the
answer is Y"; this model reads the pair. It is the int8 ONNX export of ``rampart train contradiction``
(shipped under ``services/models/artifacts/contradiction``, installed by ``rampart models build``),
scored with :class:`~services.rerank.pair_scorer.PairScorer` — tokenizers + onnxruntime, no torch — in
batches of up to :data:`BATCH_SIZE` pairs per session call. Dynamic int8 quantises activations per
batch, so a pair's probabilities move slightly (measured: see the model card) with the pairs batched
beside it; verdicts should not hinge on the third decimal.

Inputs are never fatal: empty strings, binary junk and lone surrogates are scored like any text, and
very long texts are cut before tokenising (``pair_scorer.MAX_CHARS_PER_TOKEN`` characters per model
token; the tokenizer then truncates the pair longest-first to the model's length).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from services.common.errors import invalid
from services.factcheck.config import FactCheckSettings
from services.rerank.onnx_reranker import TOKENIZER_FILE, load_manifest, unusable
from services.rerank.pair_scorer import MAX_POSITIONS, PairScorer

LABELS = ("SUPPORT", "CONTRADICT", "NEI")
SUPPORT, CONTRADICT, NEI = range(3)  # column indices of :meth:`ContradictionModel.predict`
BATCH_SIZE = 32
_WHAT = "contradiction classifier"
_FIX = "run `rampart models build` (or set RAMPART_FACTCHECK__USE_CONTRADICTION_MODEL=false)"


class ContradictionModel:
    """``predict([(evidence, claim), ...])`` → probabilities ``(n, 3)`` in :data:`LABELS` order."""

    def __init__(self, scorer: PairScorer, model_id: str, columns: Sequence[int]) -> None:
        self._scorer = scorer
        self._model_id = model_id
        self._columns = list(columns)  # model output column of each of LABELS

    @classmethod
    def from_dir(cls, path: Path, *, variant: str = "int8", threads: int = 0) -> ContradictionModel:
        """Load an exported classifier folder (manifest.json, tokenizer.json, model*.onnx)."""
        path = Path(path)
        manifest = load_manifest(path, what=_WHAT, fix=_FIX)
        labels = [str(x).upper() for x in manifest.get("labels") or []]
        if sorted(labels) != sorted(LABELS):
            raise unusable(
                path, f"has outputs {labels or 'unnamed'}, not {', '.join(LABELS)}", what=_WHAT, fix=_FIX
            )
        info = manifest["variants"].get(variant)
        if not isinstance(info, dict) or not (path / str(info.get("file", ""))).is_file():
            have = ", ".join(sorted(manifest["variants"])) or "none"
            raise unusable(
                path, f"has no {variant!r} variant (has: {have}); load one it has", what=_WHAT, fix=_FIX
            )
        length = int(manifest.get("max_length", 256))
        if not 8 <= length <= MAX_POSITIONS:
            raise unusable(
                path, f"records max_length {length}, outside [8, {MAX_POSITIONS}]", what=_WHAT, fix=_FIX
            )
        try:
            scorer = PairScorer.load(
                str(path / info["file"]),
                str(path / TOKENIZER_FILE),
                max_length=length,
                batch_size=BATCH_SIZE,
                threads=threads,
            )
        except Exception as exc:  # onnxruntime/tokenizers raise untyped errors on bad files
            raise unusable(path, f"cannot be loaded ({exc})", what=_WHAT, fix=_FIX) from exc
        if scorer.outputs != len(LABELS):
            raise unusable(path, f"gives {scorer.outputs} outputs per pair, not 3", what=_WHAT, fix=_FIX)
        model_id = f"{manifest.get('model_id', path.name)}@{str(info.get('sha256', ''))[:12]}:{variant}"
        return cls(scorer, model_id, [labels.index(name) for name in LABELS])

    @property
    def model_id(self) -> str:
        """Identity of the weights and variant (for caches keyed by what produced a score)."""
        return self._model_id

    @property
    def max_length(self) -> int:
        return self._scorer.max_length

    def predict(self, pairs: Sequence[tuple[str, str]]) -> np.ndarray:
        """float32 ``(len(pairs), 3)`` probabilities (SUPPORT, CONTRADICT, NEI), rows summing to 1.

        Each pair is ``(evidence, claim)``: the passage first, the statement judged against it second.
        """
        if isinstance(pairs, str | bytes):
            raise invalid("contradiction pairs must be a list of (evidence, claim) tuples, not one string")
        checked: list[tuple[str, str]] = []
        for i, pair in enumerate(pairs):
            if not (
                isinstance(pair, tuple | list) and len(pair) == 2 and all(isinstance(t, str) for t in pair)
            ):
                raise invalid(
                    f"contradiction pair {i} must be an (evidence, claim) tuple of two strings, got "
                    f"{type(pair).__name__}; decode bytes to text first",
                    field="pairs",
                )
            checked.append((pair[0], pair[1]))
        logits = self._scorer.logits_pairs(checked)[:, self._columns].astype(np.float64)
        logits -= logits.max(axis=1, keepdims=True)
        probs = np.exp(logits)
        probs /= probs.sum(axis=1, keepdims=True)
        return probs.astype(np.float32)

    def check_ready(self) -> None:
        """Raise unless the model answers (start-up and readiness checks)."""
        self.predict([("ready", "ready")])

    def __repr__(self) -> str:
        return f"ContradictionModel(model_id={self._model_id!r})"


def build_contradiction_model(settings: FactCheckSettings, models_dir: Path) -> ContradictionModel | None:
    """The configured classifier (int8, in-process), or ``None`` when
    ``factcheck.use_contradiction_model`` is off (``models_dir``: where ``rampart models build``
    installed it, unless ``factcheck.contradiction_model_dir`` names the folder)."""
    if not settings.use_contradiction_model:
        return None
    return ContradictionModel.from_dir(settings.resolve_contradiction_model_dir(models_dir))
