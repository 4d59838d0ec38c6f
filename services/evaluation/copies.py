"""Legitimate copies: a clean corpus in which some documents were pasted into new ones.

Enterprise corpora repeat themselves on purpose: a leave policy pasted into three handbooks, a runbook
section copied into a wiki page, a contract clause in every contract. A user searching for the policy
should find it wherever it lives, and a defence that withholds such copies as a planted campaign
(several documents saying nearly the same) withholds what the user asked for. This generator makes
that situation measurable on any BEIR corpus: a seeded share of the documents the split judges is
pasted, verbatim, into one or two new documents with new ids and titles, and each copy is judged as
relevant as its original. A copy row of ``rampart eval general`` then shows what the defence costs on
copies, beside the same corpus without them.

The copies are whole-document pastes, as people make them; what a copy is *not* is the attack the
planted-copies rule was written for: several paraphrases written around one question
(docs/factcheck.md, rule 1).
"""

from __future__ import annotations

import json
import random
from pathlib import Path

from services.common.errors import invalid
from services.evaluation.beir import (
    CORPUS_FILE,
    QRELS_DIR,
    QUERIES_FILE,
    BeirDataset,
    iter_corpus,
    load_beir,
)

#: Where a pasted copy lives: the new document's title names it, as a handbook's appendix would.
SPLIT = "copies"  # the written qrels hold the given queries only, whatever split or half they came from
HOLDERS = ("Handbook appendix", "Wiki page", "Policy binder", "Onboarding pack", "Reference sheet")


def with_copies(dataset: BeirDataset, out_dir: Path, *, share: float = 0.3, seed: int = 0) -> BeirDataset:
    """``dataset`` plus copies, written as a BEIR folder under ``out_dir`` (reused when already there)
    and loaded with the same queries (split ``copies``). ``share`` of the judged-relevant documents (chosen by
    ``seed``) get one or two copies each, ids ``<id>@copy<n>``; every qrel of an original is repeated
    for its copies."""
    if not 0.0 < share <= 1.0:
        raise invalid(f"copy share {share} must be within (0, 1]; 0.3 pastes 30% of the judged documents")
    relevant = sorted({d for judged in dataset.qrels.values() for d, g in judged.items() if g > 0})
    rng = random.Random(f"{seed}:{dataset.name}")
    chosen = {d: 1 + (rng.random() < 0.5) for d in rng.sample(relevant, max(1, round(share * len(relevant))))}
    folder = out_dir / (
        f"{dataset.name}-{dataset.split.replace('/', '-')}-{len(dataset.queries)}-copies-{share:g}-{seed}-"
        f"{dataset.content_hash()[:12]}"
    )
    if not (folder / QRELS_DIR / f"{SPLIT}.tsv").is_file():
        _write(dataset, folder, chosen)
    return load_beir(folder, SPLIT, name=f"{dataset.name}+copies")


def _write(dataset: BeirDataset, folder: Path, chosen: dict[str, int]) -> None:
    """The copied corpus, the queries and the extended qrels, the qrels file last (it marks a
    complete folder)."""
    (folder / QRELS_DIR).mkdir(parents=True, exist_ok=True)
    lines: list[str] = []
    holder = 0
    for doc in iter_corpus(dataset.path):
        lines.append(json.dumps({"_id": doc.doc_id, "title": doc.title, "text": doc.text}))
        for n in range(chosen.get(doc.doc_id, 0)):
            holder += 1
            name = HOLDERS[holder % len(HOLDERS)]
            title = f"{name} {holder}" + (f": {doc.title}" if doc.title else "")
            lines.append(json.dumps({"_id": f"{doc.doc_id}@copy{n + 1}", "title": title, "text": doc.text}))
    (folder / CORPUS_FILE).write_text("\n".join(lines) + "\n", encoding="utf-8")
    (folder / QUERIES_FILE).write_text(
        "".join(json.dumps({"_id": q, "text": t}) + "\n" for q, t in dataset.queries.items()),
        encoding="utf-8",
    )
    rows = ["query-id\tcorpus-id\tscore"]
    for q, judged in dataset.qrels.items():
        for d, g in judged.items():
            rows.append(f"{q}\t{d}\t{g}")
            rows += [f"{q}\t{d}@copy{n + 1}\t{g}" for n in range(chosen.get(d, 0))]
    tmp = folder / QRELS_DIR / f"{SPLIT}.tsv.tmp"
    tmp.write_text("\n".join(rows) + "\n", encoding="utf-8")
    tmp.replace(folder / QRELS_DIR / f"{SPLIT}.tsv")
