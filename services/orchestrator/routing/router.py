"""The query router: AdaptiveRAG's type and HyPA's complexity for a query and its session history.

Two multinomial logistic regressions over the features of ``router_features`` (cheap cues + the
MiniLM query embedding), trained by ``rampart train router``. Inference is two matrix products in
numpy; the weights are a ``.npz`` read with ``allow_pickle=False`` (a pickle would execute code on
load) plus a JSON manifest.

Usage::

    # None when routing is disabled
    router = build_router(settings.routing, embedder, settings.models_dir)
    route = router.classify("When was she born?", ["Who wrote Frankenstein?"])
    route.type, route.complexity, route.confidence, route.reason

Complexity is about what the query needs, so for a follow-up it is read from the question it follows:
a confident CONVERSATIONAL route takes the last history turn's complexity (the follow-up itself, "And
in 1990?", says nothing about it); a low-confidence fallback takes the higher of the query's and the
last turn's (fetching more context is the safe side); every other route takes the query's own.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from services.common.errors import ErrorCode, RampartError
from services.orchestrator.plan import Complexity, QueryType, Route
from services.orchestrator.routing.config import RoutingSettings
from services.orchestrator.routing.features import CHEAP_FEATURES, cheap_features, feature_matrix
from services.retrieval.embedder import Embedder

Array = npt.NDArray[np.float32]

MANIFEST_FILE = "manifest.json"
WEIGHTS_FILE = "weights.npz"
CARD_FILE = "MODEL_CARD.md"
FORMAT = "rampart-router-v1"
_CX_ORDER = {Complexity.LOW: 0, Complexity.MEDIUM: 1, Complexity.HIGH: 2}


@dataclass(frozen=True)
class LinearHead:
    """``softmax(x @ coef.T + intercept)`` over ``classes``."""

    classes: tuple[str, ...]
    coef: Array
    intercept: Array

    def proba(self, x: Array) -> Array:
        logits = x @ self.coef.T + self.intercept
        logits -= logits.max(axis=1, keepdims=True)
        e = np.exp(logits)
        return np.asarray(e / e.sum(axis=1, keepdims=True), dtype=np.float32)


@dataclass(frozen=True)
class RouterWeights:
    """Everything a router needs besides the embedder: scaler, both heads, and the manifest."""

    mean: Array  # standardisation of the cheap features
    scale: Array
    embedding_scale: float  # the (unit-norm) embedding is multiplied by this before the heads
    type_head: LinearHead
    complexity_head: LinearHead
    manifest: dict[str, Any] = field(default_factory=dict)

    def inputs(self, cheap: Array, embeddings: Array) -> Array:
        return np.hstack([(cheap - self.mean) / self.scale, embeddings * self.embedding_scale]).astype(
            np.float32
        )

    def save(self, out_dir: Path) -> Path:
        """Write ``weights.npz`` and ``manifest.json`` (manifest last: its presence marks completeness)."""
        out_dir.mkdir(parents=True, exist_ok=True)
        np.savez(
            out_dir / WEIGHTS_FILE,
            mean=self.mean,
            scale=self.scale,
            type_coef=self.type_head.coef,
            type_intercept=self.type_head.intercept,
            complexity_coef=self.complexity_head.coef,
            complexity_intercept=self.complexity_head.intercept,
        )
        manifest = {
            **self.manifest,
            "format": FORMAT,
            "cheap_features": list(CHEAP_FEATURES),
            "embedding_scale": self.embedding_scale,
            "type_classes": list(self.type_head.classes),
            "complexity_classes": list(self.complexity_head.classes),
        }
        (out_dir / MANIFEST_FILE).write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
        return out_dir

    @classmethod
    def load(cls, model_dir: Path) -> RouterWeights:
        """Read a saved router; a missing or foreign folder is an error naming the fix."""
        manifest_path, weights_path = model_dir / MANIFEST_FILE, model_dir / WEIGHTS_FILE
        if not manifest_path.is_file() or not weights_path.is_file():
            raise RampartError(
                ErrorCode.FAILED_PRECONDITION,
                f"no query router at {model_dir} (needs {MANIFEST_FILE} and {WEIGHTS_FILE}); run "
                "`rampart models build` to install the shipped one, `rampart train router --install` to "
                "train one, or set RAMPART_ROUTING__ENABLED=false",
                path=str(model_dir),
            )
        try:
            manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
            with np.load(weights_path, allow_pickle=False) as z:
                arrays = {k: np.asarray(z[k], dtype=np.float32) for k in z.files}
            weights = cls(
                mean=arrays["mean"],
                scale=arrays["scale"],
                embedding_scale=float(manifest["embedding_scale"]),
                type_head=LinearHead(
                    tuple(manifest["type_classes"]), arrays["type_coef"], arrays["type_intercept"]
                ),
                complexity_head=LinearHead(
                    tuple(manifest["complexity_classes"]),
                    arrays["complexity_coef"],
                    arrays["complexity_intercept"],
                ),
                manifest=manifest,
            )
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise RampartError(
                ErrorCode.FAILED_PRECONDITION,
                f"query router at {model_dir} is unreadable ({exc}); run `rampart models build --force`",
                path=str(model_dir),
            ) from exc
        if manifest.get("format") != FORMAT or list(manifest.get("cheap_features", [])) != list(
            CHEAP_FEATURES
        ):
            raise RampartError(
                ErrorCode.FAILED_PRECONDITION,
                f"query router at {model_dir} was built for other features (format "
                f"{manifest.get('format')!r}); retrain with `rampart train router --install` or run "
                "`rampart models build --force`",
                path=str(model_dir),
            )
        if {QueryType(c) for c in weights.type_head.classes} != set(QueryType) or {
            Complexity(c) for c in weights.complexity_head.classes
        } != set(Complexity):
            raise RampartError(ErrorCode.FAILED_PRECONDITION, f"query router at {model_dir} lacks classes")
        return weights


class QueryRouter:
    """Classifies queries into a :class:`Route`; thread-safe (no mutable state)."""

    def __init__(self, weights: RouterWeights, embedder: Embedder, *, min_confidence: float = 0.6) -> None:
        expected = str(weights.manifest.get("embedder_id", ""))
        if expected and expected.split("+")[0] != embedder.model_id.split("+")[0]:
            raise RampartError(
                ErrorCode.FAILED_PRECONDITION,
                f"the query router was trained on embedder {expected!r} but {embedder.model_id!r} is "
                "configured; retrain it with `rampart train router --install`",
            )
        self._weights = weights
        self._embedder = embedder
        self._min_confidence = min_confidence

    @classmethod
    def from_dir(cls, model_dir: Path, embedder: Embedder, *, min_confidence: float = 0.6) -> QueryRouter:
        return cls(RouterWeights.load(model_dir), embedder, min_confidence=min_confidence)

    @property
    def model_id(self) -> str:
        return str(self._weights.manifest.get("model_id", "router"))

    @property
    def manifest(self) -> dict[str, Any]:
        """What the artifact says about itself (training config, counts, held-out figures)."""
        return dict(self._weights.manifest)

    def classify(self, query: str, history: Sequence[str] = ()) -> Route:
        """The route of one query given the earlier turns (oldest first)."""
        return self.classify_many([query], [history])[0]

    def classify_many(self, queries: Sequence[str], histories: Sequence[Sequence[str]]) -> list[Route]:
        """Routes for a batch, with one embedding call for all queries and last turns."""
        if not queries:
            return []
        w = self._weights
        cheap, q_emb, last_emb = feature_matrix(self._embedder, queries, histories)
        type_p = w.type_head.proba(w.inputs(cheap, q_emb))
        # Complexity reads a question alone: the query, and (for follow-ups) the last turn.
        q_cheap = np.stack([cheap_features(q, ()) for q in queries])
        q_cx = w.complexity_head.proba(w.inputs(q_cheap, q_emb))
        has_history = [bool(h) for h in histories]
        last_cx = np.zeros_like(q_cx)
        rows = [i for i, h in enumerate(has_history) if h]
        if rows:
            last_cheap = np.stack([cheap_features(histories[i][-1], ()) for i in rows])
            last_cx[rows] = w.complexity_head.proba(w.inputs(last_cheap, last_emb[rows]))
        return [
            self._route(type_p[i], q_cx[i], last_cx[i] if has_history[i] else None)
            for i in range(len(queries))
        ]

    def _route(self, type_p: Array, q_cx: Array, last_cx: Array | None) -> Route:
        w = self._weights
        type_scores = {c: round(float(p), 4) for c, p in zip(w.type_head.classes, type_p, strict=True)}
        best = int(np.argmax(type_p))
        confidence = float(type_p[best])
        qtype = QueryType(w.type_head.classes[best])
        cx_classes = w.complexity_head.classes
        if confidence < self._min_confidence:
            reason = (
                f"type confidence {confidence:.2f} < min_confidence {self._min_confidence:.2f} "
                f"(best guess {qtype.value}): routed as conversational"
            )
            qtype = QueryType.CONVERSATIONAL
            candidates = [q_cx] if last_cx is None else [q_cx, last_cx]
            chosen = max(candidates, key=lambda p: _CX_ORDER[Complexity(cx_classes[int(np.argmax(p))])])
            cx_from = "query" if chosen is q_cx else "higher of query and last turn"
        elif qtype == QueryType.CONVERSATIONAL and last_cx is not None:
            chosen, cx_from = last_cx, "last history turn"
            reason = f"classified {qtype.value} ({confidence:.2f})"
        else:
            chosen, cx_from = q_cx, "query"
            reason = f"classified {qtype.value} ({confidence:.2f})"
        complexity = Complexity(cx_classes[int(np.argmax(chosen))])
        return Route(
            type=qtype,
            complexity=complexity,
            confidence=round(confidence, 4),
            type_scores=type_scores,
            complexity_scores={c: round(float(p), 4) for c, p in zip(cx_classes, chosen, strict=True)},
            reason=f"{reason}; complexity {complexity.value} from the {cx_from}",
        )


def build_router(settings: RoutingSettings, embedder: Embedder, models_dir: Path) -> QueryRouter | None:
    """The configured router, or None when ``routing.enabled`` is false (``models_dir``: where
    ``rampart models build`` installed it, unless ``settings.model_dir`` names the folder).

    Raises FAILED_PRECONDITION naming ``rampart models build`` when the artifact is missing.
    """
    if not settings.enabled:
        return None
    return QueryRouter.from_dir(
        settings.resolve_model_dir(models_dir), embedder, min_confidence=settings.min_confidence
    )
