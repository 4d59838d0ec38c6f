"""Labelled queries for the router, built from the dev data (``rampart train router``).

Labels (docs/routing.md):

- HotpotQA-500 questions → COMPLEX. Complexity: *comparison* → MEDIUM, otherwise (bridge) → HIGH.
  The file has no type field, so comparison is derived: the gold answer is yes/no ("Are X and Y both
  …?"), or the answer is named in the question and the question offers an alternative with "or"
  ("Who is older, X or Y?"). An answer merely mentioned in a bridge question ("… the book by historian
  James Burke?") is not a comparison because no "or" offers it as an option.
- NQ-open oracle questions → SIMPLE / LOW.
- Follow-ups derived from both, with the source question as the last history turn → CONVERSATIONAL,
  complexity of the source: a pronoun in place of the entity ("When was he born?") or an ellipsis
  ("What about the second one?", "And in 1990?").
- Counter-examples so that history alone does not mean Conversational: the source question after an
  unrelated or a related turn (its own label), and follow-ups that restate the entity ("When was
  Shirley Temple born?" → SIMPLE / LOW).

Splits: HotpotQA uses ``services.evaluation.splits`` (train half for fitting, heldout half for the
report); NQ the same salted hash of ``nq:<question>``. Every derived query inherits its source's split,
so no held-out question leaks into training through a follow-up. Casing and the trailing "?" are
randomised for every query (NQ is lower-case without "?", HotpotQA is not), so neither can stand in for
the label. Everything is seeded: the same seed gives the same queries.
"""

from __future__ import annotations

import gzip
import json
import random
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from services.common.errors import ErrorCode, RampartError
from services.evaluation.splits import query_split_of
from services.orchestrator.plan import Complexity, QueryType

Split = Literal["train", "heldout"]

HOTPOT_DIR = "hotpotqa_dev500"
NQ_FILE = Path("nq_open_oracle") / "nq-open-oracle.jsonl.gz"


@dataclass(frozen=True)
class SourceQuestion:
    """A question from the dev data with its label and the entities a follow-up can refer to."""

    id: str
    question: str
    answer: str
    entities: tuple[str, ...]
    complexity: Complexity
    type: QueryType
    source: str
    split: Split


@dataclass(frozen=True)
class LabelledQuery:
    """One training/evaluation example: a query, the turns before it, and its two labels."""

    query: str
    history: tuple[str, ...]
    type: QueryType
    complexity: Complexity
    source: str  # hotpotqa | nq | synthetic
    kind: str  # original | original+unrelated | original+related | pronoun | ellipsis | restated
    split: Split
    source_id: str


# (subject/object/possessive slot) templates: {s} = he/she/it, {o} = him/her/it, {p} = his/her/its.
# The restated form puts the entity in the slot and is self-contained (SIMPLE / LOW).
PRONOUN_TEMPLATES: tuple[str, ...] = (
    "When was {s} born?",
    "Where is {s} from?",
    "What else is {s} known for?",
    "When was {s} founded?",
    "Who founded {o}?",
    "Tell me more about {o}.",
    "What is {p} most famous work?",
    "How old is {s}?",
    "Where is {s} located?",
    "What awards did {s} win?",
    "Why is {s} important?",
    "Is {s} still active?",
    "Who owns {o} now?",
    "What happened to {o} later?",
    "Can you summarise {p} history?",
    "What was {p} first release?",
    "Who was {s} married to?",
    "How big is {s}?",
    "What language is spoken in {o}?",
    "When did {s} die?",
)
_PRONOUNS = (("he", "him", "his"), ("she", "her", "her"), ("it", "it", "its"))

# Ellipsis follow-ups: meaningless without the previous turn. {e} = another entity, {y} = a year.
ELLIPSIS_TEMPLATES: tuple[str, ...] = (
    "What about the second one?",
    "And the other one?",
    "How about the first one?",
    "And in {y}?",
    "What about in {y}?",
    "What about {e}?",
    "And {e}?",
    "Same question for {e}.",
    "Why?",
    "How so?",
    "And before that?",
    "And after that?",
    "Which one is older?",
    "Is that true?",
    "Who else?",
    "Anything else?",
    "And where?",
    "And when exactly?",
    "What about its population?",
    "Are you sure about that?",
    "And the year after?",
    "Any other examples?",
    "How about {e}?",
    "Same for {e}?",
    "And {e}'s?",
    "Is that right?",
    "Really?",
    "Can you elaborate?",
    "Tell me more.",
    "Why is that?",
    "What year was that?",
    "Where was that?",
    "Which of them came first?",
    "And how many?",
    "Compare that with {e}.",
    "Only the first one, please.",
)


def hotpot_is_comparison(question: str, answer: str) -> bool:
    """The documented rule: a yes/no answer, or an answer the question offers as one option ("X or Y")."""
    a = _norm(answer)
    if a in ("yes", "no"):
        return True
    q = _norm(question)
    return bool(a) and f" {a} " in f" {q} " and " or " in f" {q} "


def _norm(text: str) -> str:
    return " ".join(re.sub(r"[^a-z0-9]+", " ", text.lower()).split())


def _clean_title(title: str) -> str:
    return re.sub(r"\s*\([^)]*\)\s*$", "", title).strip()


def _looks_like_name(text: str) -> bool:
    return bool(text) and text[0].isupper() and len(text.split()) <= 5 and not text[0].isdigit()


def load_hotpotqa(data_dir: Path) -> list[SourceQuestion]:
    """HotpotQA-500's questions (``answers.jsonl``) as COMPLEX sources with their split."""
    path = Path(data_dir) / HOTPOT_DIR / "answers.jsonl"
    out = []
    for row in _jsonl(path):
        answer = str(row["answers"][0]) if row.get("answers") else ""
        titles = [_clean_title(str(t)) for t in row.get("supporting_titles", [])]
        entities = tuple(dict.fromkeys([*titles, *([answer] if _looks_like_name(answer) else [])]))
        comparison = hotpot_is_comparison(str(row["question"]), answer)
        out.append(
            SourceQuestion(
                id=str(row["_id"]),
                question=str(row["question"]).strip(),
                answer=answer,
                entities=tuple(e for e in entities if e),
                complexity=Complexity.MEDIUM if comparison else Complexity.HIGH,
                type=QueryType.COMPLEX,
                source="hotpotqa",
                split=query_split_of(str(row["_id"])),
            )
        )
    return out


def load_nq(data_dir: Path, limit: int | None = None) -> list[SourceQuestion]:
    """NQ-open oracle questions as SIMPLE / LOW sources (entity: the gold passage's title)."""
    path = Path(data_dir) / NQ_FILE
    out = []
    for row in _jsonl(path):
        question = str(row["question"]).strip()
        answer = str(row["answers"][0]) if row.get("answers") else ""
        ctxs = row.get("ctxs") or [{}]
        title = _clean_title(str(ctxs[0].get("title", "")))
        entities = tuple(dict.fromkeys(e for e in (title, answer if _looks_like_name(answer) else "") if e))
        qid = f"nq:{question}"
        out.append(
            SourceQuestion(
                id=qid,
                question=question,
                answer=answer,
                entities=entities,
                complexity=Complexity.LOW,
                type=QueryType.SIMPLE,
                source="nq",
                split=query_split_of(qid),
            )
        )
        if limit is not None and len(out) >= limit:
            break
    return out


def _jsonl(path: Path) -> Iterator[dict[str, Any]]:
    if not path.is_file():
        raise RampartError(
            ErrorCode.NOT_FOUND,
            f"router training data {path} is missing; point RAMPART_EVAL_DATA_DIR (or --data) at the "
            "folder holding hotpotqa_dev500/ and nq_open_oracle/",
            path=str(path),
        )
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                yield json.loads(line)


def build_labelled(sources: Sequence[SourceQuestion], seed: int = 13) -> list[LabelledQuery]:
    """Every source question, its follow-ups and its counter-examples, deterministically for ``seed``.

    Unrelated history turns are drawn from sources of the same split (no held-out text in training).
    """
    by_split: dict[str, list[SourceQuestion]] = {"train": [], "heldout": []}
    for s in sources:
        by_split[s.split].append(s)
    out: list[LabelledQuery] = []
    for src in sources:
        rng = random.Random(f"{seed}:{src.source}:{src.id}")
        pool = by_split[src.split]
        out.extend(_derive(src, pool, rng))
    return out


def _derive(src: SourceQuestion, pool: Sequence[SourceQuestion], rng: random.Random) -> list[LabelledQuery]:
    def row(query: str, history: Sequence[str], qtype: QueryType, cx: Complexity, kind: str) -> LabelledQuery:
        return LabelledQuery(
            query=_surface(query, rng),
            history=tuple(_surface(h, rng) for h in history),
            type=qtype,
            complexity=cx,
            source=src.source,
            kind=kind,
            split=src.split,
            source_id=src.id,
        )

    def other() -> SourceQuestion:
        for _ in range(5):
            cand = rng.choice(pool)
            if cand.id != src.id:
                return cand
        return cand

    rows = []
    entity = rng.choice(src.entities) if src.entities else ""
    template = rng.choice(PRONOUN_TEMPLATES)
    # The source question itself: alone, after an unrelated turn, or after a related (restated) turn.
    draw = rng.random()
    if draw < 0.6 or len(pool) < 2:
        rows.append(row(src.question, (), src.type, src.complexity, "original"))
    elif draw < 0.85 or not entity:
        rows.append(row(src.question, (other().question,), src.type, src.complexity, "original+unrelated"))
    else:
        related = _fill(rng.choice(PRONOUN_TEMPLATES), entity, rng)
        rows.append(row(src.question, (related,), src.type, src.complexity, "original+related"))
    # A follow-up that needs the source question.
    history: tuple[str, ...] = (src.question,)
    if rng.random() < 0.25 and len(pool) >= 2:
        history = (other().question, src.question)
    if entity and rng.random() < 0.6:
        rows.append(
            row(_fill(template, None, rng), history, QueryType.CONVERSATIONAL, src.complexity, "pronoun")
        )
    else:
        other_entities = (
            [e for e in src.entities if e != entity] or list(other().entities) or ["the other one"]
        )
        text = rng.choice(ELLIPSIS_TEMPLATES).format(e=rng.choice(other_entities), y=rng.randint(1950, 2020))
        rows.append(row(text, history, QueryType.CONVERSATIONAL, src.complexity, "ellipsis"))
    # A follow-up that restates the entity: self-contained, one fact.
    if entity and (src.type == QueryType.COMPLEX or rng.random() < 0.5):
        rows.append(row(_fill(template, entity, rng), history, QueryType.SIMPLE, Complexity.LOW, "restated"))
    return rows


def _fill(template: str, entity: str | None, rng: random.Random) -> str:
    if entity is None:
        s, o, p = rng.choice(_PRONOUNS)
        return template.format(s=s, o=o, p=p)
    return template.format(s=entity, o=entity, p=f"{entity}'s")


def _surface(text: str, rng: random.Random) -> str:
    """Half lower-cased without the final "?" (NQ's form), half capitalised with a final "?"."""
    text = text.strip()
    if rng.random() < 0.5:
        return text.lower().rstrip("?").rstrip()
    text = text[:1].upper() + text[1:]
    return text if text[-1:] in ".?!" else text + "?"


def load_labelled(data_dir: Path, *, seed: int = 13, nq_limit: int | None = None) -> list[LabelledQuery]:
    """All labelled queries from ``data_dir`` (the eval data folder), both splits."""
    sources = [*load_hotpotqa(data_dir), *load_nq(data_dir, nq_limit)]
    return build_labelled(sources, seed=seed)


def split_rows(rows: Sequence[LabelledQuery], split: Split) -> list[LabelledQuery]:
    return [r for r in rows if r.split == split]
