"""The sample corpus (``samples/``) as a BEIR folder: the enterprise-shaped row of ``rampart eval general``.

Policies, runbooks, a product FAQ and specification, memos and contracts, in every format the ingest
parses (Markdown, text, HTML, PDF, DOCX), from two tenants. Issue 34 asks for the defence to be
measured on such a corpus beside the public sets: none of those look like an enterprise's documents.
The documents are parsed by the ingest's own parsers (what a deployment would index) and the judged
queries are ``samples/judged-queries.json``, written by hand from the documents' text. The folder is
rebuilt when the samples or the judgements change (a hash of both names it), so the row never reads a
stale copy.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from services.common.errors import invalid
from services.common.types import Acl
from services.ingest.files import discover, load
from services.ingest.parsing import parse_bytes

JUDGED = "judged-queries.json"
SAMPLES_DIR = Path(__file__).resolve().parents[2] / "samples"


def samples_as_beir(samples: Path, cache: Path) -> Path:
    """``samples`` (one folder per tenant, plus :data:`JUDGED`) written as a BEIR folder under
    ``cache`` (split ``test``); returns that folder. Document ids are paths under ``samples``."""
    judged_path = samples / JUDGED
    if not judged_path.is_file():
        raise invalid(
            f"{judged_path} not found; the samples row needs the judged queries shipped in samples/"
        )
    files = sorted((base, f) for base, f in discover([samples]) if f.parent != samples)  # tenants' only
    if not files:
        raise invalid(f"no documents under {samples}; the samples row reads its tenant folders")
    h = hashlib.sha256(judged_path.read_bytes())
    for _, path in files:
        h.update(path.relative_to(samples).as_posix().encode())
        h.update(path.read_bytes())
        sidecar = path.with_name(path.name + ".meta.json")
        if sidecar.exists():
            h.update(sidecar.read_bytes())
    out = cache / f"samples-{h.hexdigest()[:12]}"
    if (out / "qrels" / "test.tsv").exists():
        return out
    corpus = [_corpus_line(samples, path) for _, path in files]
    judged = json.loads(judged_path.read_text(encoding="utf-8"))["queries"]
    ids = {line["_id"] for line in corpus}
    unknown = sorted({d for q in judged for d in q["relevant"]} - ids)
    if unknown:
        raise invalid(f"{judged_path} judges documents that are not in {samples}: {unknown}; fix the ids")
    (out / "qrels").mkdir(parents=True, exist_ok=True)
    (out / "corpus.jsonl").write_text("".join(json.dumps(line) + "\n" for line in corpus), encoding="utf-8")
    (out / "queries.jsonl").write_text(
        "".join(json.dumps({"_id": q["id"], "text": q["text"]}) + "\n" for q in judged), encoding="utf-8"
    )
    rows = [f"{q['id']}\t{doc}\t{grade}" for q in judged for doc, grade in q["relevant"].items()]
    (out / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n" + "\n".join(rows) + "\n")
    return out


def _corpus_line(samples: Path, path: Path) -> dict[str, str]:
    """One document as a corpus line: the title the sidecar or the parser gives, the parsed text."""
    loaded = load(samples, path, tenant=path.relative_to(samples).parts[0], default_acl=Acl(groups=["*"]))
    if loaded.document is None:
        raise invalid(f"cannot load {path}: {loaded.error}")
    parsed = parse_bytes(path.read_bytes(), filename=path.name)
    title = loaded.document.title or parsed.title
    return {"_id": path.relative_to(samples).as_posix(), "title": title, "text": parsed.text}
