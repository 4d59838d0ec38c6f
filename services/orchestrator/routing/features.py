"""The query router's features: cheap surface cues plus the MiniLM embedding of the query.

The cues are the ones a person uses to tell a follow-up ("When was he born?", "And in 1990?") from a
self-contained question, and a one-fact question from a multi-hop one (relative clauses, conjunctions,
comparatives, several named entities). They are deliberately about English question form, not about
one dataset, so the router keeps working on other multi-hop sets. Casing and the trailing "?" vary by
source (NQ-open is lower-cased without "?"), so the labelled data randomises both and no cue depends
on the first letter's case.

Work is bounded whatever the input: the query is cut to ``MAX_QUERY_CHARS``, and of the history only
the last turn and the (capped) number of turns are read.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from services.common.errors import invalid
from services.common.words import terms, words
from services.retrieval.embedder import Embedder

Vector = npt.NDArray[np.float32]

MAX_QUERY_CHARS = 1000  # longer inputs are cut: features and embedding look at the start only
MAX_HISTORY_TURNS = 50  # the turn count feature saturates here


def _set(spaced: str) -> frozenset[str]:
    return frozenset(spaced.split())


_WH = ("what", "who", "when", "where", "which", "why", "how")
_AUX = _set("is are was were do does did can could has have had will would should shall may might am")
_PRONOUNS = _set("he she it they him her his hers its their theirs them himself herself itself")
_DEMONSTRATIVES = re.compile(
    r"\b(?:this|that|these|those)\s+(?:one|ones|guy|person|place|film|movie|book|band|team|city|country|"
    r"company|album|song|show|year|time)\b|\bthe\s+(?:first|second|third|last|other|latter|former|same)"
    r"(?:\s+(?:one|ones))?\b|\b(?:the latter|the former|both of them|either of them|that|this|those|these|"
    r"there|then)\s*+[?.!]?\s*+$",  # possessive: no give-back between the two runs of white space
)
_LEADING = re.compile(
    r"^\s*(?:and|also|but|so|then|or|what about|how about|and what about|what else|anything else|"
    r"same for|same question)\b",
    re.IGNORECASE,
)
_CONJUNCTIONS = _set("and or both either neither nor but while whereas")
_COMPARATIVES = _set("""more less most least older younger oldest youngest earlier later earliest latest first last larger
    smaller largest smallest bigger biggest longer shorter longest shortest higher lower highest lowest
    same different than before after further farther closer""")
_RELATIVES = _set("who whom whose which that where when")
# possessive white space: "\s+(?:of|…)?\s*" split a run of spaces every way before failing (quadratic)
_ENTITY = re.compile(
    r"(?<![.?!]\s)(?<!^)\b[A-Z][\w'’.-]*+(?:\s++(?:(?:of|the|de|and|&)\s*+)?[A-Z][\w'’.-]*+)*"
)
_QUOTED = re.compile(r"[\"“”][^\"“”]{1,80}[\"“”]")
_NUMBER = re.compile(r"\b\d[\d,.]*\b")

CHEAP_FEATURES: tuple[str, ...] = (
    "log_words",
    "short",
    "question_mark",
    *(f"wh_{w}" for w in _WH),
    "wh_aux",
    "wh_other",
    "wh_inside",
    "pronouns",
    "pronoun_unresolved",
    "demonstratives",
    "leading_connective",
    "entities",
    "numbers",
    "conjunctions",
    "comparatives",
    "relatives",
    "possessives",
    "of_phrases",
    "log_content_terms",
    "history_present",
    "log_history_turns",
    "overlap_last_turn",
    "sim_last_turn",  # filled by feature_matrix (needs the embeddings)
)
SIM_INDEX = CHEAP_FEATURES.index("sim_last_turn")


def clip(query: str) -> str:
    """The part of a query the router reads (bounded work on 10,000-character inputs)."""
    return query[:MAX_QUERY_CHARS].strip()


def cheap_features(query: str, history: Sequence[str]) -> Vector:
    """The surface cues of ``query`` given ``history`` (``sim_last_turn`` left at 0)."""
    q = clip(query)
    toks = words(q)
    n = len(toks)
    first = toks[0] if toks else ""
    f = dict.fromkeys(CHEAP_FEATURES, 0.0)
    f["log_words"] = math.log1p(n)
    f["short"] = float(n <= 4)
    f["question_mark"] = float(q.endswith("?"))
    if first in _WH:
        f[f"wh_{first}"] = 1.0
    elif first in _AUX:
        f["wh_aux"] = 1.0
    else:
        f["wh_other"] = 1.0
    f["wh_inside"] = float(any(t in _WH for t in toks[1:]) and first not in _WH and first not in _AUX)
    pronoun_at = [i for i, t in enumerate(toks) if t in _PRONOUNS]
    f["pronouns"] = float(len(pronoun_at))
    if pronoun_at:
        # No antecedent in the query itself: at most one content word precedes the first pronoun
        # ("When was he born?", "What else is she known for?"), unlike "Where did Obama's wife study
        # and when did she graduate?".
        f["pronoun_unresolved"] = float(len(terms(" ".join(toks[: pronoun_at[0]]))) <= 1)
    f["demonstratives"] = float(len(_DEMONSTRATIVES.findall(q.lower())))
    f["leading_connective"] = float(bool(_LEADING.match(q)))
    f["entities"] = float(len(_ENTITY.findall(q)) + len(_QUOTED.findall(q)))
    f["numbers"] = float(len(_NUMBER.findall(q)))
    f["conjunctions"] = float(sum(t in _CONJUNCTIONS for t in toks))
    f["comparatives"] = float(sum(t in _COMPARATIVES for t in toks))
    f["relatives"] = float(sum(t in _RELATIVES for t in toks[1:]))
    f["possessives"] = float(len(re.findall(r"\w['’]s\b", q)))
    f["of_phrases"] = float(sum(t == "of" for t in toks))
    q_terms = set(terms(q))
    f["log_content_terms"] = math.log1p(len(q_terms))
    if history:
        f["history_present"] = 1.0
        f["log_history_turns"] = math.log1p(min(len(history), MAX_HISTORY_TURNS))
        last_terms = set(terms(clip(history[-1])))
        f["overlap_last_turn"] = len(q_terms & last_terms) / len(q_terms) if q_terms else 0.0
    return np.asarray([f[name] for name in CHEAP_FEATURES], dtype=np.float32)


def feature_matrix(
    embedder: Embedder, queries: Sequence[str], histories: Sequence[Sequence[str]]
) -> tuple[Vector, Vector, Vector]:
    """``(cheap, query_embeddings, last_turn_embeddings)`` for a batch, with one embedding call.

    Rows without history get a zero last-turn embedding and ``sim_last_turn`` = 0.
    """
    if len(queries) != len(histories):
        raise invalid(f"{len(queries)} queries but {len(histories)} histories; give one history per query")
    cheap = np.stack([cheap_features(q, h) for q, h in zip(queries, histories, strict=True)])
    texts = [clip(q) or "?" for q in queries]
    with_history = [i for i, h in enumerate(histories) if h]
    texts += [clip(histories[i][-1]) or "?" for i in with_history]
    vectors = embedder.embed(texts).astype(np.float32) if texts else np.zeros((0, embedder.dim), np.float32)
    q_emb = vectors[: len(queries)]
    last_emb = np.zeros_like(q_emb)
    if with_history:
        last_emb[with_history] = vectors[len(queries) :]
        cheap[with_history, SIM_INDEX] = np.einsum("ij,ij->i", q_emb[with_history], last_emb[with_history])
    return cheap, q_emb, last_emb
