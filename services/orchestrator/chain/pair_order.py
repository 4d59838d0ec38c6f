"""Evidence pairs: which two of the verified results answer a two-hop question together.

A Complex question needs two passages ("What government position was held by the woman who portrayed
Corliss Archer …" needs the film's page *and* Shirley Temple's). The chain and its title rules put
both in the top ten almost always, but the top two are chosen one passage at a time. This stage
scores every *pair* of the first ``chain.pair_depth`` verified documents and puts the best pair first, then
the rest by how likely each is to belong to the answering pair. The score is a conditional logit over
the pairs of one question (``softmax(w · f)``), fitted by ``rampart train pairs`` on the HotpotQA-500
train half; the features (``PAIR_FEATURES``) say nothing about HotpotQA in particular:

- ``lrank_hi`` / ``lrank_lo``: log(1 + rank) of the better- and the worse-ranked document;
- ``p_hi`` / ``p_lo``: the cross-encoder's probability for the question, higher and lower of the two;
- ``links``: how many of the two name the other by title (``services.common.titles``), not counting
  titles the question itself names (every page retrieved for that name mentions it);
- ``qnamed``: how many of the two have titles the question names;
- ``cov_union`` / ``cov_gain``: share of the question's content terms the two hold together, and what
  the pair adds over the better of the two alone (complementary passages, not two copies of one);
- ``soft_links``: the larger, over the two directions, of the share of one's title terms (content
  terms as ``cov_*`` reads them, without the trailing parenthetical and the question's terms) the
  other's text holds: a page names its bridge loosely as often as by its exact title ("2014 FIFA
  World Cup" as "in 2014 … FIFA World Cup", "Boston, Lincolnshire" as "the Boston district of
  Lincolnshire").

Usage::

    model = PairModel.load(path)          # weights.json from `rampart train pairs`
    hits = order_pairs(question, hits, logits, model)

Serving is a few hundred multiply-adds in numpy; the weights are JSON (no pickle).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from itertools import combinations
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from services.common.errors import ErrorCode, RampartError
from services.common.titles import clean_title, names, spelled
from services.common.types import ScoredChunk
from services.common.words import terms
from services.rerank.stage import RerankStage

Array = npt.NDArray[np.float64]

PAIR_DEPTH = 20  # default of chain.pair_depth: documents whose pairs are scored (190 pairs)
PAIR_FEATURES = (
    "lrank_hi",
    "lrank_lo",
    "p_hi",
    "p_lo",
    "links",
    "qnamed",
    "cov_union",
    "cov_gain",
    "soft_links",
)
# Promoted documents come from the first ten, so a low route's top ten keeps its documents (promoting
# from the first 20 gave HotpotQA forced Simple 0.945 against 0.934 at @5, offline, but cost SciFact
# train recall@10; docs/chain.md)
PROMOTE_DEPTH = 10
FORMAT = "rampart-pairs-v1"
WEIGHTS_FILE = "weights.json"
CARD_FILE = "MODEL_CARD.md"
SHIPPED_PAIRS = Path(__file__).resolve().parents[2] / "models" / "artifacts" / "pairs"


@dataclass(frozen=True)
class PairDoc:
    """One document of the head: its title, text and the cross-encoder's logit for the question."""

    title: str
    text: str
    logit: float | None

    @property
    def full_text(self) -> str:
        """Title and text, as ``subqueries.passage_text`` reads a passage (the title is its subject)."""
        t = self.title
        return f"{t}\n{self.text}" if t and t not in self.text[: len(t) + 5] else self.text


def _prob(logit: float | None) -> float:
    if logit is None or not math.isfinite(logit):
        return 0.0
    return 1.0 / (1.0 + math.exp(-max(-50.0, min(50.0, logit))))


def pair_features(question: str, docs: Sequence[PairDoc]) -> tuple[Array, list[tuple[int, int]]]:
    """Features (one row per pair, columns ``PAIR_FEATURES``) of every pair of ``docs`` (in rank
    order), and the pairs as index tuples ``(i, j)``, ``i < j``."""
    asked = spelled(question)
    wanted = set(terms(question))
    n = max(len(wanted), 1)
    held = [set(terms(d.full_text)) & wanted for d in docs]
    said = [spelled(d.text) for d in docs]
    named = [names(asked, d.title) for d in docs]
    probs = [_prob(d.logit) for d in docs]
    title_terms = [[t for t in terms(clean_title(d.title)) if t not in wanted] for d in docs]
    text_terms = [set(terms(d.text)) for d in docs]
    pairs = list(combinations(range(len(docs)), 2))
    rows = []
    for i, j in pairs:
        links = float(names(said[i], docs[j].title) and not named[j]) + float(
            names(said[j], docs[i].title) and not named[i]
        )
        union = len(held[i] | held[j]) / n
        best = max(len(held[i]), len(held[j])) / n
        rows.append(
            [
                math.log1p(i),
                math.log1p(j),
                max(probs[i], probs[j]),
                min(probs[i], probs[j]),
                links,
                float(named[i]) + float(named[j]),
                union,
                union - best,
                max(_held(title_terms[j], text_terms[i]), _held(title_terms[i], text_terms[j])),
            ]
        )
    return np.asarray(rows, dtype=np.float64).reshape(-1, len(PAIR_FEATURES)), pairs


def _held(title: Sequence[str], text: set[str]) -> float:
    """Share of ``title``'s terms ``text`` holds (0 for a title with none left)."""
    return sum(w in text for w in title) / len(title) if title else 0.0


@dataclass(frozen=True)
class PairModel:
    """Weights of the conditional logit over standardised features (``(f - mean) / scale``)."""

    weights: Array
    mean: Array
    scale: Array
    manifest: dict[str, Any] = field(default_factory=dict)

    def scores(self, x: Array) -> Array:
        return np.asarray(((x - self.mean) / self.scale) @ self.weights, dtype=np.float64)

    def save(self, out_dir: Path, manifest: Mapping[str, Any]) -> Path:
        out_dir.mkdir(parents=True, exist_ok=True)
        body = {
            **manifest,
            "format": FORMAT,
            "features": list(PAIR_FEATURES),
            "weights": [round(float(v), 6) for v in self.weights],
            "mean": [round(float(v), 6) for v in self.mean],
            "scale": [round(float(v), 6) for v in self.scale],
        }
        path = out_dir / WEIGHTS_FILE
        path.write_text(json.dumps(body, indent=2) + "\n", encoding="utf-8")
        return path

    @classmethod
    def load(cls, model_dir: Path) -> PairModel:
        """Read ``weights.json``; a missing, foreign or stale file is an error naming the fix."""
        path = model_dir / WEIGHTS_FILE
        fix = (
            "run `rampart train pairs --out <dir>` and point RAMPART_CHAIN__PAIR_MODEL_DIR at it, or "
            "set RAMPART_CHAIN__PAIR_ORDER=false"
        )
        try:
            body = json.loads(path.read_text(encoding="utf-8"))
            model = cls(
                weights=np.asarray(body["weights"], dtype=np.float64),
                mean=np.asarray(body["mean"], dtype=np.float64),
                scale=np.asarray(body["scale"], dtype=np.float64),
                manifest={k: v for k, v in body.items() if k not in ("weights", "mean", "scale")},
            )
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise RampartError(
                ErrorCode.FAILED_PRECONDITION,
                f"no readable pair model at {path} ({exc}); {fix}",
                path=str(path),
            ) from exc
        shape_ok = all(len(a) == len(PAIR_FEATURES) for a in (model.weights, model.mean, model.scale))
        if (
            body.get("format") != FORMAT
            or list(body.get("features", [])) != list(PAIR_FEATURES)
            or not shape_ok
        ):
            raise RampartError(
                ErrorCode.FAILED_PRECONDITION,
                f"pair model at {path} has format {body.get('format')!r} and features "
                f"{body.get('features')!r}; this release reads {FORMAT} with {list(PAIR_FEATURES)}: {fix}",
                path=str(path),
            )
        if not np.all(np.isfinite(model.weights)) or not np.all(model.scale > 0):
            raise RampartError(ErrorCode.FAILED_PRECONDITION, f"pair model at {path} is corrupt; {fix}")
        return model


def doc_heads(hits: Sequence[ScoredChunk], depth: int = PAIR_DEPTH) -> list[int]:
    """Index of each distinct document's best chunk, in ranking order, for the first ``depth`` documents."""
    seen: set[str] = set()
    out: list[int] = []
    for i, hit in enumerate(hits):
        if hit.chunk.doc_id not in seen:
            seen.add(hit.chunk.doc_id)
            out.append(i)
            if len(out) >= depth:
                break
    return out


def pair_docs(
    hits: Sequence[ScoredChunk], heads: Sequence[int], logits: Mapping[str, float]
) -> list[PairDoc]:
    """The head documents as :class:`PairDoc`, their logit read from ``logits`` (chunk id -> logit)."""
    return [
        PairDoc(hits[i].chunk.title, hits[i].chunk.text, logits.get(hits[i].chunk.chunk_id)) for i in heads
    ]


def question_logits(
    stage: RerankStage, question: str, hits: Sequence[ScoredChunk], heads: Sequence[int]
) -> dict[str, float] | None:
    """The cross-encoder's logit of each head chunk for ``question`` itself (a chain hop's hits carry
    their sub-query's), by chunk id; ``None`` when no reranker answers. Step 1 scored most of them for
    the question already, so the stage's score cache usually answers without the model."""
    if not stage.enabled:
        return None
    head = [hits[i] for i in heads]
    got = stage.apply(question, head, depth=len(head), mode="pure", weight=1.0)
    if got.degraded:
        return None
    out: dict[str, float] = {}
    for h in got.hits:
        logit = h.scores.get("rerank")
        if logit is not None:
            out[h.chunk.chunk_id] = logit
    return out


def pair_ranking(scores: Array, pairs: Sequence[tuple[int, int]], n: int) -> list[int]:
    """Document order from pair scores: the best pair (in its rank order), then the others by their
    probability of belonging to the answering pair (the sum of the softmax over the pairs holding them;
    ties keep rank order)."""
    marginal = _marginals(scores, pairs, n)
    i, j = pairs[int(np.argmax(scores))]
    rest = sorted((k for k in range(n) if k not in (i, j)), key=lambda k: (-marginal[k], k))
    return [i, j, *rest]


def promote_ranking(scores: Array, pairs: Sequence[tuple[int, int]], n: int, promote: int) -> list[int]:
    """Document order for a question read as single-fact: the first two stay (the reranker's answer),
    then the ``promote`` others of the first :data:`PROMOTE_DEPTH` most likely to belong to the
    answering pair, then the rest in rank order. A two-hop question the router misreads still gets its
    second page into the top five; a single-fact one keeps its top two and its top ten's documents."""
    marginal = _marginals(scores, pairs, n)
    moved = sorted(range(2, min(n, PROMOTE_DEPTH)), key=lambda k: (-marginal[k], k))[:promote]
    return [0, 1, *moved, *(k for k in range(2, n) if k not in moved)]


def _marginals(scores: Array, pairs: Sequence[tuple[int, int]], n: int) -> Array:
    """Each document's probability of belonging to the answering pair (softmax over the pairs)."""
    p = np.exp(scores - scores.max())
    p /= p.sum()
    marginal = np.zeros(n)
    for (i, j), pk in zip(pairs, p, strict=True):
        marginal[i] += pk
        marginal[j] += pk
    return marginal


def order_pairs(
    question: str,
    hits: Sequence[ScoredChunk],
    logits: Mapping[str, float],
    model: PairModel,
    depth: int = PAIR_DEPTH,
    promote: int | None = None,
) -> list[ScoredChunk]:
    """``hits`` with the first ``depth`` documents reordered by :func:`pair_ranking`, or by
    :func:`promote_ranking` when ``promote`` is given (each document's chunks move together, in their
    order; results past the head keep their place)."""
    heads = doc_heads(hits, depth)
    if len(heads) < 3:  # with two documents the pair is the whole head
        return list(hits)
    x, pairs = pair_features(question, pair_docs(hits, heads, logits))
    scores = model.scores(x)
    if promote is None:
        order = pair_ranking(scores, pairs, len(heads))
    else:
        order = promote_ranking(scores, pairs, len(heads), promote)
    head_docs = [hits[heads[k]].chunk.doc_id for k in order]
    in_head = set(head_docs)
    cut = max(i for i, h in enumerate(hits) if h.chunk.doc_id in in_head) + 1
    by_doc: dict[str, list[ScoredChunk]] = {}
    tail: list[ScoredChunk] = []
    for h in hits[:cut]:
        if h.chunk.doc_id in in_head:
            by_doc.setdefault(h.chunk.doc_id, []).append(h)
        else:  # a document past the head with a chunk above a head document's lower one
            tail.append(h)
    return [*(h for d in head_docs for h in by_doc[d]), *tail, *hits[cut:]]
