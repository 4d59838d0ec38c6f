"""Training groups for the cross-encoder: positives from training splits, hard negatives mined by Rampart.

Sources (training splits only; nothing from a test split reaches the model):

- ``scifact``: SciFact ``train`` qrels.
- ``hotpotqa``: the ``train`` half of HotpotQA-500 (:mod:`services.evaluation.splits`); the ``heldout``
  half is what the reranker is reported on. ``hotpotqa_half="heldout"`` swaps them for a *cross-fitted*
  reranker: its scores on the train half are out-of-fold, which is what a model stacked on the
  reranker (the evidence-pair model, ``rampart train pairs``) must be fitted on. Never report held-out
  figures with such a model.
- ``nq``: NQ-open oracle question / gold-passage pairs (the 2,655 gold passages form the corpus).
- ``twowiki``: the ``train`` half of 2WikiMultihopQA-164 (its ``heldout`` half is what
  ``rampart eval rerank-domains`` reports on).
- ``classic``: the human judgements of four classic test collections no evaluation uses (NPL, TIME,
  LISA, ADI, from ``rerank_train/classic_ir``); the corpus is every document those judgements and their
  BM25 negatives name. Cranfield, CISI, CACM and MED are never trained on: they are the classic domain's
  evaluation (``classic_ir_beir``).

``domain_halves`` (issue 38's recipes) trains SciFact and NQ on the ``train`` half of their queries
only, so that ``rampart eval rerank-domains`` can report every domain on queries no recipe saw.

Each corpus is indexed through the product's own ingest path (the cached eval index), and every
training query is run through the **hybrid** retriever, so the passages the model learns on are the
chunks it will rerank in production (header included). Two negative pools per query:

- ``hybrid``: the highest-ranked non-relevant chunks of the fused list (ranks 1-30, one per document)
  — what the reranker must push down at serving time.
- ``hac``: HAC-Retrieval's rule — among BM25's top 100 chunks, those whose dense (model) score is in the
  bottom 30% (high lexical overlap, low semantic match).

Negatives containing a gold answer string (NQ, HotpotQA) are dropped as probable false negatives.
Mined groups are cached as JSONL keyed by the index and the mining settings.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import re
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from services.common.errors import ErrorCode, RampartError
from services.common.settings import RampartSettings
from services.common.types import FusionMethod, ScoredChunk
from services.evaluation.beir import BeirDataset, load_beir, write_beir
from services.evaluation.runner import EVAL_PRINCIPAL, eval_runtime, index_cache_key
from services.evaluation.splits import QuerySplit, select_queries
from services.orchestrator.runtime import Variant
from services.retrieval.embedder import Embedder
from services.retrieval.hybrid import SearchParams
from services.retrieval.retriever import Retriever

SOURCES = ("scifact", "hotpotqa", "nq", "twowiki", "classic")
CLASSIC_TRAIN = ("npl", "time", "lisa", "adi")  # the classic collections no evaluation uses
MINING_DEPTH = 100  # chunks retrieved per training query
HYBRID_NEG_RANKS = 30  # hybrid negatives come from the first this-many non-relevant documents
HAC_BM25_TOP = 100  # HAC: BM25 top-k ...
HAC_DENSE_QUANTILE = 0.30  # ... whose dense score is in the bottom 30%
MINING_VERSION = 2
PRIOR_DEPTH = 30  # first-stage scores are min-max normalised over this many fused hits (= serving depth)

Progress = Callable[[str, int, int], None]


@dataclass
class MinedGroup:
    source: str
    qid: str
    query: str
    positives: list[str]
    hybrid_negatives: list[str] = field(default_factory=list)
    hac_negatives: list[str] = field(default_factory=list)
    # First-stage (fused) score of each text, min-max normalised over the top PRIOR_DEPTH hits and
    # clipped to [0, 1] — what the rerank stage sees at serving time. Parallel to the lists above.
    positive_priors: list[float] = field(default_factory=list)
    hybrid_priors: list[float] = field(default_factory=list)
    hac_priors: list[float] = field(default_factory=list)


def _missing(path: Path, what: str) -> RampartError:
    return RampartError(
        ErrorCode.FAILED_PRECONDITION,
        f"training data {what} not found at {path}; set RAMPART_EVAL_DATA_DIR to the folder holding "
        "scifact/, hotpotqa_dev500/ and nq_open_oracle/",
        path=str(path),
    )


def _norm(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip().lower()


def nq_as_beir(data_dir: Path, cache_dir: Path) -> tuple[BeirDataset, dict[str, list[str]]]:
    """NQ-open oracle as a BEIR folder (corpus = distinct gold passages) plus answers per query."""
    src = data_dir / "nq_open_oracle" / "nq-open-oracle.jsonl.gz"
    if not src.is_file():
        raise _missing(src, "NQ-open oracle")
    out = cache_dir / "nq_open_oracle" / "beir"
    answers: dict[str, list[str]] = {}
    corpus: dict[str, dict[str, str]] = {}
    queries: list[dict[str, str]] = []
    qrels: list[tuple[str, str]] = []
    with gzip.open(src, "rt", encoding="utf-8") as fh:
        for i, line in enumerate(fh):
            row = json.loads(line)
            gold = row["ctxs"][0]
            doc_id = "nq-" + hashlib.sha256((gold["title"] + "\n" + gold["text"]).encode()).hexdigest()[:16]
            corpus.setdefault(doc_id, {"_id": doc_id, "title": gold["title"], "text": gold["text"]})
            qid = f"nq{i:05d}"
            queries.append({"_id": qid, "text": row["question"]})
            qrels.append((qid, doc_id))
            answers[qid] = [str(a) for a in row.get("answers", [])]
    if not (out / "qrels" / "train.tsv").is_file():
        write_beir(out, corpus, queries, qrels, "train")
    return load_beir(out, "train", name="nq_open_oracle"), answers


def classic_as_beir(data_dir: Path, cache_dir: Path) -> BeirDataset:
    """The :data:`CLASSIC_TRAIN` collections' judgements as one BEIR folder (built once): each
    judged-relevant document a positive (grade 1), the corpus every document the pairs name."""
    src = data_dir / "rerank_train" / "classic_ir" / "pairs.jsonl"
    if not src.is_file():
        raise _missing(src, "classic IR training pairs")
    out = cache_dir / "classic_ir" / "beir"
    if not (out / "qrels" / "train.tsv").is_file():
        corpus: dict[str, dict[str, str]] = {}
        queries: list[dict[str, str]] = []
        qrels: list[tuple[str, str]] = []
        for line in src.read_text(encoding="utf-8").splitlines():
            row = json.loads(line)
            if row["query_id"].split("-q", 1)[0] not in CLASSIC_TRAIN:
                continue
            queries.append({"_id": row["query_id"], "text": row["query"]})
            for doc in [*row["pos"], *row["neg"]]:
                corpus.setdefault(doc["id"], {"_id": doc["id"], "title": doc["title"], "text": doc["text"]})
            qrels += [(row["query_id"], doc["id"]) for doc in row["pos"]]
        write_beir(out, corpus, queries, qrels, "train")
    return load_beir(out, "train", name="classic_ir")


def _answers(path: Path, keep: set[str], key: str) -> dict[str, list[str]]:
    """Gold answer strings per kept query from a JSONL file (``key``: the query id's field)."""
    answers: dict[str, list[str]] = {}
    if path.is_file():
        for line in path.read_text(encoding="utf-8").splitlines():
            row = json.loads(line)
            if row[key] in keep:
                answers[row[key]] = [str(a) for a in row.get("answers", [])]
    return answers


def load_source(
    source: str,
    settings: RampartSettings,
    cache_dir: Path,
    *,
    hotpotqa_half: QuerySplit = "train",
    domain_halves: bool = False,
) -> tuple[BeirDataset, dict[str, list[str]]]:
    """The training split of ``source`` as a BEIR dataset (queries restricted) + gold answers if known;
    HotpotQA's half is ``hotpotqa_half``, SciFact's and NQ's the ``train`` one under ``domain_halves``
    (see the module doc)."""
    data = settings.eval_data_dir
    mine: QuerySplit = "train" if domain_halves else "all"
    if source == "scifact":
        path = data / "scifact"
        if not (path / "qrels" / "train.tsv").is_file():
            raise _missing(path, "SciFact train qrels")
        return load_beir(path, "train").half(mine), {}
    if source == "twowiki":
        path = data / "2wikimultihopqa_dev164" / "beir"
        if not (path / "corpus.jsonl").is_file():
            raise _missing(path, "2WikiMultihopQA-164")
        ds = load_beir(path, "test").half("train")
        return ds, _answers(data / "2wikimultihopqa_dev164" / "answers.jsonl", set(ds.queries), "id")
    if source == "classic":
        return classic_as_beir(data, cache_dir), {}
    if source == "hotpotqa":
        path = data / "hotpotqa_dev500" / "beir"
        if not (path / "corpus.jsonl").is_file():
            raise _missing(path, "HotpotQA-500")
        full = load_beir(path, "test")
        keep = set(select_queries(full.queries, hotpotqa_half))
        ds = BeirDataset(
            name=full.name,
            split=f"{hotpotqa_half}-half",
            path=full.path,
            corpus=full.corpus,
            queries={q: t for q, t in full.queries.items() if q in keep},
            qrels={q: r for q, r in full.qrels.items() if q in keep},
        )
        return ds, _answers(data / "hotpotqa_dev500" / "answers.jsonl", keep, "_id")
    if source == "nq":
        nq, answers = nq_as_beir(data, cache_dir)
        return nq.half(mine), answers
    raise RampartError(
        ErrorCode.INVALID_ARGUMENT, f"unknown training source {source!r}; choose from {', '.join(SOURCES)}"
    )


def mine_groups(
    dataset: BeirDataset,
    retriever: Retriever,
    settings: RampartSettings,
    *,
    source: str,
    answers: dict[str, list[str]] | None = None,
    progress: Progress | None = None,
) -> list[MinedGroup]:
    """Run every query of ``dataset`` through the hybrid retriever and collect positives + negatives."""
    params = SearchParams.from_settings(
        settings.fusion,
        top_k=MINING_DEPTH,
        method=FusionMethod.MINMAX,
        candidates=max(settings.fusion.candidates, MINING_DEPTH),
        fill_missing=True,
    )
    groups: list[MinedGroup] = []
    total = len(dataset.queries)
    for i, (qid, query) in enumerate(dataset.queries.items(), start=1):
        relevant = {d for d, g in dataset.qrels.get(qid, {}).items() if g > 0}
        if not relevant:
            continue
        hits = retriever.search(query, EVAL_PRINCIPAL, params).hits
        group = _group_from_hits(
            source, qid, query, hits, relevant, dataset, answers.get(qid, []) if answers else []
        )
        if group.positives and (group.hybrid_negatives or group.hac_negatives):
            groups.append(group)
        if progress and (i % 50 == 0 or i == total):
            progress(f"mine {source}", i, total)
    return groups


def _group_from_hits(
    source: str,
    qid: str,
    query: str,
    hits: list[ScoredChunk],
    relevant: set[str],
    dataset: BeirDataset,
    answers: list[str],
) -> MinedGroup:
    gold = [_norm(a) for a in answers if len(a.strip()) >= 2]

    def plausible_negative(text: str) -> bool:
        """False for a probable false negative: a text containing a gold answer string."""
        low = _norm(text)
        return not any(a in low for a in gold)

    prior = _prior(hits)
    positives = _positives(hits, relevant, dataset, prior)
    hybrid_negs, hybrid_priors = _hybrid_negatives(hits, relevant, plausible_negative, prior)
    hac_negs, hac_priors = _hac_negatives(hits, relevant, plausible_negative, prior)
    return MinedGroup(
        source,
        qid,
        query,
        [t for t, _ in positives.values()],
        hybrid_negs,
        hac_negs,
        [p for _, p in positives.values()],
        hybrid_priors,
        hac_priors,
    )


def _prior(hits: list[ScoredChunk]) -> Callable[[ScoredChunk], float]:
    """A hit's fused score min-max normalised over the first PRIOR_DEPTH hits, clipped to [0, 1]: the
    first-stage score the rerank stage sees at serving time."""
    head = [h.fused for h in hits[:PRIOR_DEPTH]] or [0.0]
    lo, hi = min(head), max(head)

    def prior(h: ScoredChunk) -> float:
        return 1.0 if hi - lo <= 1e-12 else min(1.0, max(0.0, (h.fused - lo) / (hi - lo)))

    return prior


def _positives(
    hits: list[ScoredChunk], relevant: set[str], dataset: BeirDataset, prior: Callable[[ScoredChunk], float]
) -> dict[str, tuple[str, float]]:
    """(text, prior) per relevant document: its best retrieved chunk, else its title and opening."""
    positives: dict[str, tuple[str, float]] = {}
    for h in hits:  # best chunk of each relevant document
        if h.chunk.doc_id in relevant and h.chunk.doc_id not in positives:
            positives[h.chunk.doc_id] = (h.chunk.indexed_text, prior(h))
    for doc_id in sorted(relevant - positives.keys()):  # not retrieved: its title + opening
        doc = dataset.corpus.get(doc_id)
        if doc is not None:
            positives[doc_id] = (f"{doc.title}\n{' '.join(doc.text.split()[:200])}".strip(), 0.0)
    return positives


def _hybrid_negatives(
    hits: list[ScoredChunk],
    relevant: set[str],
    plausible: Callable[[str], bool],
    prior: Callable[[ScoredChunk], float],
) -> tuple[list[str], list[float]]:
    """The best chunk of each of the first HYBRID_NEG_RANKS non-relevant documents, with its prior."""
    texts: list[str] = []
    priors: list[float] = []
    seen: set[str] = set()
    for h in hits:
        d = h.chunk.doc_id
        if d in relevant or d in seen:
            continue
        seen.add(d)
        if len(seen) > HYBRID_NEG_RANKS:
            break
        if plausible(h.chunk.text):
            texts.append(h.chunk.indexed_text)
            priors.append(prior(h))
    return texts, priors


def _hac_negatives(
    hits: list[ScoredChunk],
    relevant: set[str],
    plausible: Callable[[str], bool],
    prior: Callable[[ScoredChunk], float],
) -> tuple[list[str], list[float]]:
    """HAC negatives: among BM25's top HAC_BM25_TOP hits, one chunk per non-relevant document whose
    dense score is in the bottom HAC_DENSE_QUANTILE (lexically close, semantically far)."""
    lexical = sorted(
        (h for h in hits if h.scores.get("bm25") is not None), key=lambda h: -(h.scores["bm25"] or 0.0)
    )
    lexical = lexical[:HAC_BM25_TOP]
    texts: list[str] = []
    priors: list[float] = []
    dense = sorted(h.scores.get("dense") or 0.0 for h in lexical)
    if not dense:
        return texts, priors
    cut = dense[max(0, int(len(dense) * HAC_DENSE_QUANTILE) - 1)]
    taken: set[str] = set()
    for h in lexical:
        d = h.chunk.doc_id
        if d in relevant or d in taken or (h.scores.get("dense") or 0.0) > cut:
            continue
        taken.add(d)
        if plausible(h.chunk.text):
            texts.append(h.chunk.indexed_text)
            priors.append(prior(h))
    return texts, priors


def mined_groups(
    settings: RampartSettings,
    embedder: Embedder,
    sources: Iterable[str],
    *,
    hotpotqa_half: QuerySplit = "train",
    domain_halves: bool = False,
    progress: Progress | None = None,
) -> list[MinedGroup]:
    """Mined groups for ``sources``, from cache when the index, the queries and the mining settings are
    unchanged."""
    cache = settings.data_dir / "train-cache"
    cache.mkdir(parents=True, exist_ok=True)
    out: list[MinedGroup] = []
    for source in sources:
        dataset, answers = load_source(
            source, settings, cache, hotpotqa_half=hotpotqa_half, domain_halves=domain_halves
        )
        key = hashlib.sha256(
            f"{index_cache_key(dataset, settings, embedder)}|{source}|{dataset.split}|{MINING_VERSION}|{MINING_DEPTH}|"
            f"{HYBRID_NEG_RANKS}|{HAC_BM25_TOP}|{HAC_DENSE_QUANTILE}|{PRIOR_DEPTH}|{settings.fusion.model_dump_json()}".encode()
        ).hexdigest()[:12]
        path = cache / f"mined-{source}-{key}.jsonl"
        if path.is_file():
            out += [MinedGroup(**json.loads(line)) for line in path.read_text(encoding="utf-8").splitlines()]
            if progress:
                progress(f"mine {source} (cached)", 1, 1)
            continue
        with eval_runtime(
            dataset,
            settings,
            settings.data_dir / "eval-cache",
            embedder=embedder,
            variant=Variant(rerank=False, factcheck=False),  # mining reads the first stage only
            progress=progress,
        ) as (runtime, _info):
            groups = mine_groups(
                dataset,
                runtime.search.retriever,
                settings,
                source=source,
                answers=answers,
                progress=progress,
            )
        tmp = path.with_suffix(".tmp")
        tmp.write_text("".join(json.dumps(asdict(g)) + "\n" for g in groups), encoding="utf-8")
        tmp.replace(path)
        out += groups
    return out
