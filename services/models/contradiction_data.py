"""Training pairs for the fact-check contradiction classifier (claim vs evidence: SUPPORT / CONTRADICT / NEI).

Built from SciFact claims ``train`` only (``test`` has no public labels, and ``dev`` is what the
classifier is reported on). The premise is evidence text, the hypothesis the claim:

- ``scifact``: the sentences of one gold evidence set, joined with spaces, with its gold label.
- ``scifact:nei_cited``: claims without evidence — 1–2 consecutive sentences of a cited abstract.
- ``scifact:nei_sentence``: claims with evidence — one non-evidence sentence of an evidence abstract
  (same topic, no verdict: the hard NEI case the stage meets in production).

SciFact has about half as many CONTRADICT as SUPPORT pairs, so :func:`synthetic_contradictions`
adds CONTRADICT pairs made by editing the premise of a SUPPORT pair (``synthetic:number``,
``synthetic:negation``, ``synthetic:entity``). Every random choice comes from a seed and the pair
it concerns, so the same seed gives the same data whatever the order of the input.
"""

from __future__ import annotations

import json
import random
import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from enum import StrEnum
from pathlib import Path
from typing import Any

from services.common.errors import ErrorCode, RampartError
from services.common.words import STOP_WORDS

TRAIN_SPLITS = ("train", "dev")
SYNTHETIC_KINDS = ("number", "negation", "entity")


class Label(StrEnum):
    SUPPORT = "SUPPORT"
    CONTRADICT = "CONTRADICT"
    NEI = "NEI"


@dataclass(frozen=True)
class NliPair:
    premise: str
    hypothesis: str
    label: Label
    source: str


def _rng(seed: int, *parts: object) -> random.Random:
    """A generator per (seed, item): string seeds hash with SHA-512, so this is stable across runs."""
    return random.Random(":".join([str(seed), *map(str, parts)]))


def _missing(path: Path) -> RampartError:
    return RampartError(
        ErrorCode.FAILED_PRECONDITION,
        f"SciFact claims file not found at {path}; pass the scifact_claims folder "
        "(claims_<split>.jsonl and corpus.jsonl)",
        path=str(path),
    )


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        raise _missing(path)
    try:
        with path.open(encoding="utf-8") as fh:
            return [json.loads(line) for line in fh if line.strip()]
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise RampartError(
            ErrorCode.FAILED_PRECONDITION, f"{path} is not JSON lines ({exc})", path=str(path)
        ) from None


def _join(sentences: Sequence[str]) -> str:
    return " ".join(s.strip() for s in sentences if s.strip())


def load_claim_pairs(claims_dir: Path, split: str, *, seed: int) -> list[NliPair]:
    """NLI pairs of one labelled split, in file order; NEI sentence picks depend only on ``seed``."""
    if split == "test":
        raise RampartError(
            ErrorCode.INVALID_ARGUMENT,
            "SciFact claims_test has no public labels and must never be trained on; use split='train' "
            "(or 'dev' for validation)",
            split=split,
        )
    if split not in TRAIN_SPLITS:
        raise RampartError(
            ErrorCode.INVALID_ARGUMENT,
            f"unknown SciFact split {split!r}; choose from {', '.join(TRAIN_SPLITS)}",
            split=split,
        )
    rows = _read_jsonl(claims_dir / f"claims_{split}.jsonl")
    corpus_path = claims_dir / "corpus.jsonl"
    corpus = _Abstracts(
        corpus_path,
        {str(d["doc_id"]): [str(s) for s in d.get("abstract", [])] for d in _read_jsonl(corpus_path)},
    )
    pairs: list[NliPair] = []
    for row in rows:
        cid, claim = row["id"], str(row["claim"]).strip()
        rng = _rng(seed, "nei", cid)
        evidence: dict[str, list[dict[str, Any]]] = {
            str(k): v for k, v in (row.get("evidence") or {}).items()
        }
        if evidence:
            pairs += _evidence_pairs(cid, claim, evidence, corpus, rng)
            continue
        cited = [corpus.of(cid, str(d)) for d in row.get("cited_doc_ids", [])]
        nei = _nei_cited_pair(claim, [sents for sents in cited if sents], rng)
        if nei is not None:
            pairs.append(nei)
    return pairs


@dataclass(frozen=True)
class _Abstracts:
    """The SciFact corpus: each document's abstract as sentences."""

    path: Path
    by_doc: dict[str, list[str]]

    def of(self, claim_id: object, doc_id: str) -> list[str]:
        """The abstract ``claim_id`` cites; a missing one is a broken download, named with the fix."""
        if doc_id not in self.by_doc:
            raise RampartError(
                ErrorCode.FAILED_PRECONDITION,
                f"claim {claim_id!r} cites document {doc_id} missing from {self.path}",
                path=str(self.path),
            )
        return self.by_doc[doc_id]


def _nei_cited_pair(claim: str, abstracts: list[list[str]], rng: random.Random) -> NliPair | None:
    """NEI for a claim without evidence: 1-2 consecutive sentences of one of the abstracts it cites."""
    if not abstracts:
        return None
    sents = rng.choice(abstracts)
    k = min(len(sents), rng.choice((1, 2)))
    start = rng.randrange(len(sents) - k + 1)
    premise = _join(sents[start : start + k])
    return NliPair(premise, claim, Label.NEI, "scifact:nei_cited") if premise else None


def _evidence_pairs(
    cid: object,
    claim: str,
    evidence: dict[str, list[dict[str, Any]]],
    corpus: _Abstracts,
    rng: random.Random,
) -> list[NliPair]:
    """One pair per distinct gold evidence set (its label), then one NEI: a sentence of an evidence
    abstract that is in none of that document's evidence sets."""
    pairs: list[NliPair] = []
    seen: set[str] = set()
    others: list[tuple[str, int]] = []  # (doc, sentence) in no evidence set of that doc
    for doc_id, sets in evidence.items():
        sents = corpus.of(cid, doc_id)
        used: set[int] = set()
        for ev in sets:
            idx = sorted({int(i) for i in ev["sentences"]})
            if any(i < 0 or i >= len(sents) for i in idx):
                raise RampartError(
                    ErrorCode.FAILED_PRECONDITION,
                    f"claim {cid!r}: evidence sentence {idx} out of range for document {doc_id} "
                    f"({len(sents)} sentences) in {corpus.path}",
                    path=str(corpus.path),
                )
            used.update(idx)
            premise = _join([sents[i] for i in idx])
            if premise and premise not in seen:
                seen.add(premise)
                pairs.append(NliPair(premise, claim, Label(ev["label"]), "scifact"))
        others += [(doc_id, i) for i in range(len(sents)) if i not in used and sents[i].strip()]
    if others:
        doc_id, i = rng.choice(others)
        pairs.append(NliPair(corpus.by_doc[doc_id][i].strip(), claim, Label.NEI, "scifact:nei_sentence"))
    return pairs


# ---------------------------------------------------------------------------------------------------
# Synthetic contradictions. Each editor returns the edited premise, or None when no edit applies.

Editor = Callable[[NliPair, random.Random], str | None]

# A number not glued to an identifier (IL-6, CD4, 4-PBA), with thousands separators and a percent sign.
_NUMBER = re.compile(
    r"(?<![\w.\-/])(?<![A-Za-z]\()(?<![Tt]ype )(\d{1,3}(?:,\d{3})+|\d+)(\.\d+)?(\s?%)?"
    r"(?!\w|\.\d|/\d|-\d|-(?!fold)[A-Za-z])"
)


def _num_key(m: re.Match[str]) -> str:
    return (m.group(1).replace(",", "") + (m.group(2) or "")).lstrip("0") or "0"


def _format_like(value: float, m: re.Match[str]) -> str:
    decimals = len(m.group(2) or "") - 1 if m.group(2) else 0
    text = f"{value:,.{decimals}f}" if "," in m.group(1) else f"{value:.{decimals}f}"
    return text + (m.group(3) or "")


def _changed_number(m: re.Match[str], rng: random.Random) -> str | None:
    """A plausible but clearly different value, in the original's format (30% -> 3%, 60%, 15% ...)."""
    value = float(m.group(1).replace(",", "") + (m.group(2) or ""))
    if m.group(2) is None and not m.group(3) and 1900 <= value <= 2099:  # a year: move it a few years
        candidates = [value + d for d in (-10, -5, -3, 3, 5, 10)]
    elif value == 0:
        candidates = [1.0, 5.0, 10.0]
    else:
        delta = max(value * 0.5, 1.0)
        candidates = [value * 2, value * 3, value * 10, value / 2, value / 10, value + delta, value - delta]
    original = m.group(0)
    options = []
    for c in candidates:
        if c < 0 or (m.group(3) and c > 100) or (value > 0 and float(_format_like(c, m).rstrip("%")) <= 0):
            continue
        text = _format_like(c, m)
        if text != original and float(text.rstrip("%").replace(",", "")) != value and text not in options:
            options.append(text)
    return rng.choice(options) if options else None


def _number_edit(pair: NliPair, rng: random.Random) -> str | None:
    """Change a number the claim also states, everywhere it occurs in the premise."""
    claim_numbers = {_num_key(m) for m in _NUMBER.finditer(pair.hypothesis)}
    matches = [m for m in _NUMBER.finditer(pair.premise) if _num_key(m) in claim_numbers]
    if not matches:
        return None
    target = _num_key(rng.choice(matches))
    new = _changed_number(next(m for m in matches if _num_key(m) == target), rng)
    if new is None:
        return None
    out, last = [], 0
    for m in matches:
        if _num_key(m) == target:
            out += [pair.premise[last : m.start()], new]
            last = m.end()
    return "".join([*out, pair.premise[last:]])


_ANTONYM_PAIRS = (
    ("increase", "decrease"),
    ("increases", "decreases"),
    ("increased", "decreased"),
    ("increasing", "decreasing"),
    ("reduces", "increases"),
    ("reduced", "increased"),
    ("reduce", "increase"),
    ("reducing", "increasing"),
    ("higher", "lower"),
    ("high", "low"),
    ("more", "less"),
    ("fewer", "more"),
    ("greater", "smaller"),
    ("larger", "smaller"),
    ("improves", "worsens"),
    ("improved", "worsened"),
    ("improve", "worsen"),
    ("enhances", "impairs"),
    ("enhanced", "impaired"),
    ("upregulates", "downregulates"),
    ("upregulated", "downregulated"),
    ("upregulation", "downregulation"),
    ("activates", "inhibits"),
    ("activated", "inhibited"),
    ("activation", "inhibition"),
    ("promotes", "inhibits"),
    ("promoted", "inhibited"),
    ("induces", "suppresses"),
    ("induced", "suppressed"),
    ("elevated", "reduced"),
    ("positive", "negative"),
    ("positively", "negatively"),
    ("beneficial", "harmful"),
    ("better", "worse"),
    ("longer", "shorter"),
    ("faster", "slower"),
    ("gain", "loss"),
    ("rise", "fall"),
)


def _antonyms() -> dict[str, str]:
    table: dict[str, str] = {}
    for a, b in _ANTONYM_PAIRS:
        table.setdefault(a, b)
        table.setdefault(b, a)
    return table


ANTONYMS = _antonyms()
_WORD = re.compile(r"[A-Za-z]+(?:-[A-Za-z]+)*")
_AUX = r"is|are|was|were|has|have|had|can|could|may|might|will|would|should|must|did|does|do"
_NEGATED = re.compile(rf"\b({_AUX})\s+not\b(?!\s+only)", re.IGNORECASE)
_CONTRACTED = re.compile(
    r"\b(is|are|was|were|has|have|had|could|would|should|did|does|do)n[’']t\b", re.IGNORECASE
)
_CANNOT = re.compile(r"\bcannot\b", re.IGNORECASE)
_NO_NOUN = re.compile(
    r"\bno\s+(?=(significant|difference|association|effect|change|evidence|increase|decrease|"
    r"correlation|relationship|impact|benefit|improvement|reduction)\b)",
    re.IGNORECASE,
)
# "was reduced" -> "was not reduced"; not before adverbs ("is also not", not "is not also"), negated
# adjectives (unlikely) or, after has/have/had, anything but a participle.
_AFFIRMED = re.compile(
    rf"\b(?:(?:{_AUX})\s+(?!not\b|n[’']t|\w+ly\b|also\b|still\b|often\b|always\b|already\b|un)"
    r"(?=[a-z])|(?:has|have|had)\s+(?=\w+(?:ed|en|wn)\b))",
    re.IGNORECASE,
)
_AUX_ONLY = re.compile(r"^(has|have|had)\s+$", re.IGNORECASE)
_SENTENCE_BREAK = re.compile(r"(?<=[.!?])\s+(?=[A-Z])")
_BARE_ASSOCIATED = re.compile(
    r"(?<!\bnot )(?<!\bbe )(?<!\bis )(?<!\bare )(?<!\bwas )(?<!\bwere )\bassociated with\b"
)
_VERB_3S = re.compile(
    r"(?<!\bthe )(?<!\ba )(?<!\bthese )(?<!\bsuch )(?<!\bno )(?<!\bsignificant )"
    r"\b(increases|decreases|reduces|improves|inhibits|induces|promotes|causes|affects|prevents|"
    r"predicts|regulates|activates|enhances|impairs|correlates|protects|requires|contributes|"
    r"mediates|suppresses|stimulates|blocks|leads)\b(?!\s+(?:in|of)\b)"
)


def _match_case(word: str, like: str) -> str:
    if like.isupper() and len(like) > 1:
        return word.upper()
    return word[:1].upper() + word[1:] if like[:1].isupper() else word


Span = tuple[int, int, str]


def _closest_sentence(spans: list[Span], premise: str, claim: str) -> list[Span]:
    """The spans in the premise sentence sharing most words with the claim: the one that supports it."""
    claim_words = {w.lower() for w in _WORD.findall(claim) if len(w) > 3}
    bounds = [0] + [m.end() for m in _SENTENCE_BREAK.finditer(premise)] + [len(premise) + 1]

    def overlap(span: Span) -> int:
        i = max(k for k in range(len(bounds) - 1) if bounds[k] <= span[0])
        words = {w.lower() for w in _WORD.findall(premise[bounds[i] : bounds[i + 1]])}
        return len(words & claim_words)

    best = max(overlap(s) for s in spans)
    return [s for s in spans if overlap(s) == best]


def _negation_edit(pair: NliPair, rng: random.Random) -> str | None:
    """Flip the premise's polarity: swap a direction word the claim shares, else add/remove a "not"."""
    premise = pair.premise
    claim_words = {w.lower() for w in _WORD.findall(pair.hypothesis)}
    shared: list[Span] = []
    other: list[Span] = []
    for m in _WORD.finditer(premise):
        word = m.group(0)
        if word.lower() in ANTONYMS:
            span = (m.start(), m.end(), _match_case(ANTONYMS[word.lower()], word))
            (shared if word.lower() in claim_words else other).append(span)
    polarity: list[Span] = []
    polarity += [(m.start(), m.end(), m.group(1)) for m in _NEGATED.finditer(premise)]
    polarity += [(m.start(), m.end(), m.group(1)) for m in _CONTRACTED.finditer(premise)]
    polarity += [(m.start(), m.end(), _match_case("can", m.group(0))) for m in _CANNOT.finditer(premise)]
    for m in _NO_NOUN.finditer(premise):
        article = "an" if m.group(1)[0].lower() in "aeiou" else "a"
        polarity.append((m.start(), m.end(), _match_case(article, m.group(0)) + " "))
    if not polarity:  # only add a negation when the premise has none to remove
        polarity += [
            (m.end(), m.end(), "not ")
            for m in _AFFIRMED.finditer(premise)
            if not _AUX_ONLY.match(m.group(0)) or re.match(r"\w+(?:ed|en|wn)\b", premise[m.end() :])
        ]
        polarity += [(m.start(), m.start(), "not ") for m in _BARE_ASSOCIATED.finditer(premise)]
        for m in _VERB_3S.finditer(premise):
            polarity.append((m.start(), m.end(), "does not " + m.group(1)[:-1]))
    if shared:
        choices = shared
    elif polarity:
        choices = polarity
    elif other and claim_words & ANTONYMS.keys():
        choices = other
    else:
        return None
    start, end, text = rng.choice(_closest_sentence(choices, premise, pair.hypothesis))
    return premise[:start] + text + premise[end:]


# A symbol with its hyphenated parts (IL-6, COVID-19, NF-κB) but not a trailing word (Gli2-induced -> Gli2).
_TOKEN = re.compile(r"(?<![\w\-])[A-Za-z][^\W_]*(?:-(?![a-z]{3})[^\W_]+)*\+?(?!/)")
_ROMAN = re.compile(r"^[IVX]+$")
# Structured-abstract headings are capitals but not entities, and make the next word look mid-sentence.
_HEADINGS = frozenset(
    [
        "ABSTRACT",
        "AIM",
        "AIMS",
        "BACKGROUND",
        "CONCLUSION",
        "CONCLUSIONS",
        "CONTEXT",
        "DESIGN",
        "DISCUSSION",
        "FINDINGS",
        "FUNDING",
        "IMPORTANCE",
        "INTERPRETATION",
        "INTRODUCTION",
        "MAIN",
        "MEASURES",
        "MEASUREMENTS",
        "METHODS",
        "OBJECTIVE",
        "OBJECTIVES",
        "OUTCOME",
        "OUTCOMES",
        "PARTICIPANTS",
        "PATIENTS",
        "PURPOSE",
        "RATIONALE",
        "RESULTS",
        "SETTING",
        "SETTINGS",
        "SIGNIFICANCE",
        "STUDY",
        "SUMMARY",
    ]
)
# Function words that open sentences ("Although", "However") are never entities: the fact-check's
# stop words plus the connectives it does not need.
_CAPITALISED_STOP = STOP_WORDS | frozenset(
    ["although", "among", "however", "upon", "using", "whereas", "within"]
)


def _entity_kind(token: str, preceding: str) -> str | None:
    """Swaps stay within a kind (gene for gene, acronym for acronym) so the edit reads naturally."""
    letters = re.sub(r"[^A-Za-z]", "", token)
    has_upper = any(c.isupper() for c in token)
    if any(c.isdigit() for c in token) and (has_upper or re.match(r"^[a-z]{1,3}\d", token)):
        return "gene"  # BRCA1, IL-6, p53, COVID-19
    if re.match(r"^[a-z]{1,3}[A-Z]{2,}", token):
        return "gene"  # mTOR, hTERT, miRNA
    if letters.isupper() and len(letters) >= 2 and not _ROMAN.match(letters):
        return "acronym"  # TNF, DNA, UK
    if token in _HEADINGS:
        return None
    if (
        re.match(r"^[A-Z][a-z]{2,}$", token)
        and token.lower() not in _CAPITALISED_STOP
        and not re.search(r"(^|[.!?:;(]\s*|\b[A-Z]{4,}\s+)$", preceding)
    ):
        return "name"  # a capitalised word mid-sentence: Alzheimer, Parkinson, Drosophila
    return None


def _entities(text: str) -> dict[str, str]:
    """Entity-like tokens of ``text`` -> their kind; sentence-initial capitals are not entities."""
    found: dict[str, str] = {}
    for m in _TOKEN.finditer(text):
        kind = _entity_kind(m.group(0), text[max(0, m.start() - 16) : m.start()])
        if kind is not None:
            found.setdefault(m.group(0), kind)
    return found


def _whole(token: str) -> str:
    return rf"(?<![\w\-]){re.escape(token)}(?![\w+]|-(?![a-z]{{3}}))"


def _entity_editor(pairs: Sequence[NliPair]) -> Editor:
    """Swap an entity shared by claim and premise for one of the same kind from another pair's premise."""
    pool: dict[str, dict[str, set[str]]] = {"gene": {}, "acronym": {}, "name": {}}
    for pair in pairs:
        for token, kind in _entities(pair.premise).items():
            pool[kind].setdefault(token, set()).add(pair.premise)

    def edit(pair: NliPair, rng: random.Random) -> str | None:
        claim_tokens = {m.group(0) for m in _TOKEN.finditer(pair.hypothesis)}
        shared = sorted((t, k) for t, k in _entities(pair.premise).items() if t in claim_tokens)
        if not shared:
            return None
        token, kind = rng.choice(shared)
        lower_text = (pair.premise + " " + pair.hypothesis).lower()
        options = sorted(
            t
            for t, premises in pool[kind].items()
            if premises - {pair.premise} and not re.search(_whole(t.lower()), lower_text)
        )
        if not options:
            return None
        new = rng.choice(options)
        return re.sub(_whole(token), lambda _m: new, pair.premise)

    return edit


def _normalised(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip().casefold()


def synthetic_contradictions(
    pairs: Sequence[NliPair], *, seed: int, per_kind_limit: int | None = None
) -> list[NliPair]:
    """CONTRADICT pairs made by editing SUPPORT premises; at most one per (pair, kind), never a no-op.

    With ``per_kind_limit`` a seeded sample of that many is kept per kind (order preserved), so the
    synthetic share can be capped without biasing towards the first claims of the file.
    """
    support = [p for p in pairs if p.label is Label.SUPPORT]
    editors: dict[str, Editor] = {
        "number": _number_edit,
        "negation": _negation_edit,
        "entity": _entity_editor(support),
    }
    out: list[NliPair] = []
    for kind in SYNTHETIC_KINDS:
        made: list[NliPair] = []
        for pair in support:
            edited = editors[kind](pair, _rng(seed, kind, pair.hypothesis, pair.premise))
            if edited is None or _normalised(edited) == _normalised(pair.premise):
                continue
            made.append(replace(pair, premise=edited, label=Label.CONTRADICT, source=f"synthetic:{kind}"))
        if per_kind_limit is not None and len(made) > per_kind_limit:
            keep = sorted(_rng(seed, "limit", kind).sample(range(len(made)), max(0, per_kind_limit)))
            made = [made[i] for i in keep]
        out += made
    return out


def build_nli_dataset(
    claims_dir: Path, *, seed: int, synthetic: bool = True, per_kind_limit: int | None = None
) -> tuple[list[NliPair], dict[str, int]]:
    """SciFact ``train`` pairs (+ synthetic contradictions), shuffled with ``seed``, and their counts.

    Counts are keyed ``label:<LABEL>`` and ``source:<source>`` so a training log shows the mix.
    """
    pairs = load_claim_pairs(claims_dir, "train", seed=seed)
    if synthetic:
        pairs += synthetic_contradictions(pairs, seed=seed, per_kind_limit=per_kind_limit)
    random.Random(seed).shuffle(pairs)
    counts: Counter[str] = Counter()
    for p in pairs:
        counts[f"label:{p.label.value}"] += 1
        counts[f"source:{p.source}"] += 1
    return pairs, dict(sorted(counts.items()))
