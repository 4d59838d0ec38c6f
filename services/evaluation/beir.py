"""Load BEIR-format evaluation folders (corpus, queries, qrels) with clear errors.

A BEIR folder looks like::

    <dataset>/
      corpus.jsonl        {"_id": str, "title": str, "text": str, "metadata": {...}?} per line
      queries.jsonl       {"_id": str, "text": str} per line
      qrels/<split>.tsv   header "query-id<TAB>corpus-id<TAB>score", then one judgement per line

:func:`load_beir` reads one split into memory; :func:`iter_corpus` streams documents for corpora too
big to hold twice (e.g. while indexing). :func:`corpus_content_hash` (also ``BeirDataset.content_hash``)
is the sha256 of ``corpus.jsonl``'s bytes, memoised on the file's stat, so index caches can be keyed on
it for free after the first call.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from services.common.errors import invalid
from services.evaluation.splits import QuerySplit, select_queries

if TYPE_CHECKING:
    from services.common.settings import RampartSettings

log = logging.getLogger(__name__)

CORPUS_FILE = "corpus.jsonl"
QUERIES_FILE = "queries.jsonl"
QRELS_DIR = "qrels"

EXPECTED_LAYOUT = (
    "expected BEIR layout: <dir>/corpus.jsonl ({_id, title, text, metadata?} per line), "
    "<dir>/queries.jsonl ({_id, text} per line), <dir>/qrels/<split>.tsv "
    "(header 'query-id\\tcorpus-id\\tscore')"
)
_QRELS_HEADER = ("query-id", "corpus-id", "score")
_HASH_CHUNK = 1 << 20
_MAX_LISTED = 5


@dataclass(frozen=True, slots=True)
class BeirDoc:
    """One corpus document. ``metadata`` is whatever the line carried (``{}`` if absent)."""

    doc_id: str
    title: str
    text: str
    metadata: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, eq=False)
class BeirDataset:
    """One split of a BEIR dataset, fully in memory.

    ``queries`` holds only the queries judged in ``qrels`` for this split (in queries.jsonl order);
    ``qrels`` maps query id -> corpus id -> graded relevance (0 = judged not relevant).
    """

    name: str
    split: str
    path: Path
    corpus: dict[str, BeirDoc]
    queries: dict[str, str]
    qrels: dict[str, dict[str, int]]

    @property
    def corpus_path(self) -> Path:
        return self.path / CORPUS_FILE

    def content_hash(self) -> str:
        """sha256 hex digest of ``corpus.jsonl`` bytes; memoised per file stat, so cheap to repeat."""
        return corpus_content_hash(self.path)

    def half(self, query_split: QuerySplit) -> BeirDataset:
        """This split restricted to a fixed query half (``services.evaluation.splits``); ``all`` is itself.
        The split's name says which half (``test/train``)."""
        if query_split == "all":
            return self
        keep = set(select_queries(self.queries, query_split))
        return replace(
            self,
            split=f"{self.split}/{query_split}",
            queries={q: t for q, t in self.queries.items() if q in keep},
            qrels={q: r for q, r in self.qrels.items() if q in keep},
        )

    def sample(self, limit: int | None) -> BeirDataset:
        """At most ``limit`` queries, the first in a salted hash order of their ids (so the same ones
        whatever the file order, and a fair draw when the file is sorted by topic); ``None`` keeps all."""
        if limit is None or limit >= len(self.queries):
            return self
        keep = set(sorted(self.queries, key=hash_order)[:limit])
        return replace(
            self,
            queries={q: t for q, t in self.queries.items() if q in keep},
            qrels={q: r for q, r in self.qrels.items() if q in keep},
        )


def hash_order(item_id: str) -> str:
    """A sort key that shuffles ids reproducibly (a salted sha256): samples drawn by it do not depend
    on how a file happens to be ordered."""
    return hashlib.sha256(f"rampart-sample-v1:{item_id}".encode()).hexdigest()


# ---------------------------------------------------------------------------------------------------
# Public API
# ---------------------------------------------------------------------------------------------------


def load_beir(path: Path, split: str = "test", *, name: str | None = None) -> BeirDataset:
    """Load ``split`` of the BEIR folder at ``path``.

    ``name`` defaults to the folder name, or to its parent's name when the folder is literally called
    ``beir`` (``.../hotpotqa_dev500/beir`` -> ``hotpotqa_dev500``).

    Raises ``RampartError(INVALID_ARGUMENT)`` for: a missing folder or file (naming which, and the
    expected layout), an unknown split (listing the available ones), a malformed JSON / TSV line (file
    and line number), duplicate ids, an empty split, and qrels that reference query ids absent from
    queries.jsonl. Qrels that reference documents missing from the corpus are only logged: they still
    count in recall denominators, exactly as in BEIR's own evaluation.
    """
    root = Path(path)
    _check_layout(root)
    qrels_path = _split_path(root, split)

    qrels = _read_qrels(qrels_path)
    all_queries = _read_queries(root / QUERIES_FILE)
    unknown = [qid for qid in qrels if qid not in all_queries]
    if unknown:
        raise invalid(
            f"{qrels_path} references {len(unknown)} query id(s) not present in "
            f"{root / QUERIES_FILE}: {_sample(unknown)}; the qrels and queries files do not belong "
            "together (or queries.jsonl is truncated)",
            path=str(qrels_path),
            unknown_query_ids=unknown[:_MAX_LISTED],
            count=len(unknown),
        )
    queries = {qid: text for qid, text in all_queries.items() if qid in qrels}

    corpus: dict[str, BeirDoc] = {}
    corpus_file = root / CORPUS_FILE
    for lineno, doc in _iter_corpus_file(corpus_file):
        if doc.doc_id in corpus:
            raise invalid(
                f"{corpus_file}:{lineno}: duplicate document _id {doc.doc_id!r}; ids must be unique",
                path=str(corpus_file),
                line=lineno,
                doc_id=doc.doc_id,
            )
        corpus[doc.doc_id] = doc

    dangling = sum(1 for judged in qrels.values() for doc_id in judged if doc_id not in corpus)
    if dangling:
        log.warning(
            "%s: %d judgement(s) reference documents missing from %s; they stay in the qrels",
            qrels_path,
            dangling,
            corpus_file,
        )

    return BeirDataset(
        name=name or _default_name(root),
        split=split,
        path=root,
        corpus=corpus,
        queries=queries,
        qrels=qrels,
    )


def iter_corpus(path: Path) -> Iterator[BeirDoc]:
    """Stream documents from a BEIR folder (or directly from a ``corpus.jsonl`` file), one at a time.

    Validation and error messages are the same as :func:`load_beir`'s; duplicates are not detected
    here (that would need the whole id set in memory).
    """
    p = Path(path)
    corpus_file = p / CORPUS_FILE if p.is_dir() else p
    if not corpus_file.is_file():
        raise invalid(
            f"corpus file not found: {corpus_file}; {EXPECTED_LAYOUT}",
            path=str(corpus_file),
        )
    for _, doc in _iter_corpus_file(corpus_file):
        yield doc


def available_splits(path: Path) -> list[str]:
    """Split names that have a ``qrels/<split>.tsv`` file, sorted."""
    qrels_dir = Path(path) / QRELS_DIR
    if not qrels_dir.is_dir():
        return []
    return sorted(p.stem for p in qrels_dir.glob("*.tsv") if p.is_file())


_hash_cache: dict[tuple[str, int, int, int], str] = {}
_hash_lock = threading.Lock()


def corpus_content_hash(path: Path) -> str:
    """sha256 hex digest of the corpus file bytes (folder or ``corpus.jsonl`` path), streamed in 1 MiB
    chunks. Memoised on (resolved path, size, mtime_ns, inode): repeated calls cost one ``stat``."""
    p = Path(path)
    corpus_file = p / CORPUS_FILE if p.is_dir() else p
    try:
        st = corpus_file.stat()
    except FileNotFoundError:
        raise invalid(f"corpus file not found: {corpus_file}; {EXPECTED_LAYOUT}", path=str(p)) from None
    key = (str(corpus_file.resolve()), st.st_size, st.st_mtime_ns, st.st_ino)
    with _hash_lock:
        cached = _hash_cache.get(key)
    if cached is not None:
        return cached
    digest = hashlib.sha256()
    with corpus_file.open("rb") as fh:
        while chunk := fh.read(_HASH_CHUNK):
            digest.update(chunk)
    value = digest.hexdigest()
    with _hash_lock:
        _hash_cache[key] = value
    return value


# ---------------------------------------------------------------------------------------------------
# Internals
# ---------------------------------------------------------------------------------------------------


def _default_name(root: Path) -> str:
    resolved = root.resolve()
    if resolved.name.lower() == "beir" and resolved.parent.name:
        return resolved.parent.name
    return resolved.name


def _sample(items: list[str]) -> str:
    shown = ", ".join(repr(i) for i in items[:_MAX_LISTED])
    return shown + (f", … (+{len(items) - _MAX_LISTED} more)" if len(items) > _MAX_LISTED else "")


def _check_layout(root: Path) -> None:
    if not root.is_dir():
        raise invalid(
            f"BEIR dataset folder not found (or not a directory): {root}; {EXPECTED_LAYOUT}",
            path=str(root),
        )
    missing = [
        rel
        for rel, ok in (
            (CORPUS_FILE, (root / CORPUS_FILE).is_file()),
            (QUERIES_FILE, (root / QUERIES_FILE).is_file()),
            (f"{QRELS_DIR}/<split>.tsv", bool(available_splits(root))),
        )
        if not ok
    ]
    if missing:
        raise invalid(
            f"{root} is not a BEIR dataset folder: missing {', '.join(missing)}; {EXPECTED_LAYOUT}",
            path=str(root),
            missing=missing,
        )


def _split_path(root: Path, split: str) -> Path:
    splits = available_splits(root)
    if split not in splits:
        raise invalid(
            f"unknown split {split!r} for {root}: available splits are {', '.join(splits)} "
            f"(from {root / QRELS_DIR}/*.tsv)",
            path=str(root),
            split=split,
            available=splits,
        )
    return root / QRELS_DIR / f"{split}.tsv"


def _iter_json_lines(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield (1-based line number, object) for each non-blank line; errors name file and line."""
    with path.open("rb") as fh:
        for lineno, raw in enumerate(fh, start=1):
            if not raw.strip():
                continue
            try:
                obj = orjson.loads(raw)
            except orjson.JSONDecodeError as exc:
                raise invalid(
                    f"{path}:{lineno}: malformed JSON line ({exc}); each line must be one JSON object",
                    path=str(path),
                    line=lineno,
                ) from None
            if not isinstance(obj, dict):
                raise invalid(
                    f"{path}:{lineno}: expected a JSON object per line, got {type(obj).__name__}",
                    path=str(path),
                    line=lineno,
                )
            yield lineno, obj


def _field_str(obj: Mapping[str, Any], key: str, path: Path, lineno: int, *, required: bool) -> str:
    value = obj.get(key)
    if value is None:
        if required:
            raise invalid(
                f"{path}:{lineno}: missing required field {key!r}", path=str(path), line=lineno, field=key
            )
        return ""
    if key == "_id" and isinstance(value, int) and not isinstance(value, bool):
        return str(value)  # some exports write numeric ids; qrels ids are strings anyway
    if not isinstance(value, str):
        raise invalid(
            f"{path}:{lineno}: field {key!r} must be a string, got {type(value).__name__}",
            path=str(path),
            line=lineno,
            field=key,
        )
    if key == "_id" and not value:
        raise invalid(f"{path}:{lineno}: empty '_id'", path=str(path), line=lineno, field=key)
    return value


def _iter_corpus_file(path: Path) -> Iterator[tuple[int, BeirDoc]]:
    for lineno, obj in _iter_json_lines(path):
        metadata = obj.get("metadata")
        if metadata is None:
            metadata = {}
        elif not isinstance(metadata, dict):
            raise invalid(
                f"{path}:{lineno}: field 'metadata' must be an object, got {type(metadata).__name__}",
                path=str(path),
                line=lineno,
                field="metadata",
            )
        yield (
            lineno,
            BeirDoc(
                doc_id=_field_str(obj, "_id", path, lineno, required=True),
                title=_field_str(obj, "title", path, lineno, required=False),
                text=_field_str(obj, "text", path, lineno, required=True),
                metadata=metadata,
            ),
        )


def _read_queries(path: Path) -> dict[str, str]:
    queries: dict[str, str] = {}
    for lineno, obj in _iter_json_lines(path):
        qid = _field_str(obj, "_id", path, lineno, required=True)
        if qid in queries:
            raise invalid(
                f"{path}:{lineno}: duplicate query _id {qid!r}; ids must be unique",
                path=str(path),
                line=lineno,
                query_id=qid,
            )
        queries[qid] = _field_str(obj, "text", path, lineno, required=True)
    return queries


def _read_qrels(path: Path) -> dict[str, dict[str, int]]:
    qrels: dict[str, dict[str, int]] = {}
    with path.open(encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, start=1):
            line = line.rstrip("\r\n")
            if not line.strip():
                continue
            cols = line.split("\t")
            if lineno == 1 and tuple(c.strip().lower() for c in cols) == _QRELS_HEADER:
                continue
            if len(cols) != 3:
                raise invalid(
                    f"{path}:{lineno}: expected 3 tab-separated columns (query-id, corpus-id, score), "
                    f"got {len(cols)}",
                    path=str(path),
                    line=lineno,
                )
            qid, doc_id, score_text = (c.strip() for c in cols)
            try:
                score = int(score_text)
            except ValueError:
                raise invalid(
                    f"{path}:{lineno}: relevance score must be an integer, got {score_text!r}",
                    path=str(path),
                    line=lineno,
                ) from None
            if not qid or not doc_id:
                raise invalid(f"{path}:{lineno}: empty query-id or corpus-id", path=str(path), line=lineno)
            qrels.setdefault(qid, {})[doc_id] = score
    if not qrels:
        raise invalid(
            f"{path} has no judgements (only a header or blank lines); a split needs at least one "
            "'query-id\\tcorpus-id\\tscore' row",
            path=str(path),
        )
    return qrels


def resolve_dataset(path: Path, settings: RampartSettings) -> Path:
    """A path as given, else a name under RAMPART_EVAL_DATA_DIR; a ``beir/`` subfolder is used if present."""
    candidates = [path] if path.exists() else [settings.eval_data_dir / path]
    for c in candidates:
        if not (c / "corpus.jsonl").exists() and (c / "beir" / "corpus.jsonl").exists():
            return c / "beir"
    return candidates[0]


def write_beir(
    out: Path,
    corpus: Mapping[str, Mapping[str, str]],
    queries: list[dict[str, str]],
    qrels: list[tuple[str, str]],
    split: str,
) -> None:
    """Write a BEIR folder (corpus, queries, ``qrels/<split>.tsv`` with grade 1 each); the qrels file
    goes last, through a rename, so its presence says the folder is complete."""
    (out / "qrels").mkdir(parents=True, exist_ok=True)
    # json's spacing, not orjson's: the bytes decide the corpus hash, hence every cached index of it
    (out / "corpus.jsonl").write_text(
        "".join(json.dumps(d) + "\n" for d in corpus.values()), encoding="utf-8"
    )
    (out / "queries.jsonl").write_text("".join(json.dumps(q) + "\n" for q in queries), encoding="utf-8")
    tmp = out / "qrels" / f"{split}.tsv.tmp"
    tmp.write_text(
        "query-id\tcorpus-id\tscore\n" + "".join(f"{q}\t{d}\t1\n" for q, d in qrels), encoding="utf-8"
    )
    tmp.replace(out / "qrels" / f"{split}.tsv")
