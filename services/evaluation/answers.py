"""Answer-string recall (issue 5): does the gold answer appear in the answer, and in the verified
context it was drawn from? Runs the adaptive orchestrator, the code ``/v1/answer`` serves with.

Sets: HotpotQA-500 (its ``heldout`` query half by default) and NQ-open oracle (corpus = the gold
passages; its ``heldout`` half by the same salted split). Matching is SQuAD-style: lower case, no
punctuation or articles, white space collapsed; a hit is any gold alias as a substring.
"""

from __future__ import annotations

import json
import re
import string
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path

from services.common.errors import ErrorCode, RampartError
from services.common.settings import RampartSettings
from services.evaluation.beir import BeirDataset, load_beir
from services.evaluation.metrics import latency_summary
from services.evaluation.runner import EVAL_PRINCIPAL
from services.evaluation.splits import QuerySplit, select_queries
from services.orchestrator.orchestrator import Ask, Orchestrator

Progress = Callable[[str, int, int], None]
SETS = ("hotpotqa", "nq")
_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT = str.maketrans("", "", string.punctuation)


def normalise(text: str) -> str:
    return " ".join(_ARTICLES.sub(" ", text.lower().translate(_PUNCT)).split())


def contains(text: str, answers: Sequence[str]) -> bool:
    hay = normalise(text)
    return any(n and n in hay for n in (normalise(a) for a in answers))


def answer_set(
    name: str, settings: RampartSettings, split: QuerySplit
) -> tuple[BeirDataset, dict[str, list[str]]]:
    """The questions of ``name`` in ``split`` with their gold answers (``split=all`` keeps every one)."""
    data = settings.eval_data_dir
    if name == "hotpotqa":
        root = data / "hotpotqa_dev500"
        if not (root / "answers.jsonl").is_file():
            raise _missing(root / "answers.jsonl")
        full = load_beir(root / "beir", "test")
        answers = {}
        for line in (root / "answers.jsonl").read_text(encoding="utf-8").splitlines():
            row = json.loads(line)
            answers[row["_id"]] = [str(a) for a in row.get("answers", [])]
    elif name == "nq":
        from services.models.reranker_data import nq_as_beir

        full, answers = nq_as_beir(data, settings.data_dir / "train-cache")
    else:
        raise RampartError(
            ErrorCode.INVALID_ARGUMENT, f"unknown answer set {name!r}; choose from {', '.join(SETS)}"
        )
    keep = set(select_queries(full.queries, split))
    queries = {q: t for q, t in full.queries.items() if q in keep and answers.get(q)}
    ds = BeirDataset(
        name=full.name,
        split=f"{full.split}-{split}",
        path=full.path,
        corpus=full.corpus,
        queries=queries,
        qrels=full.qrels,
    )
    return ds, answers


def evaluate_answers(
    orchestrator: Orchestrator,
    dataset: BeirDataset,
    answers: dict[str, list[str]],
    *,
    limit: int | None = None,
    progress: Progress | None = None,
) -> dict[str, object]:
    """Summary figures plus per-question rows (for the JSON report)."""
    ids = list(dataset.queries)[: limit or None]
    rows: list[dict[str, object]] = []
    latencies: list[float] = []
    for i, qid in enumerate(ids, start=1):
        t0 = time.perf_counter()
        done = orchestrator.run(
            Ask(query=dataset.queries[qid], top_k=10, answer=True, history=()), EVAL_PRINCIPAL
        )
        latencies.append((time.perf_counter() - t0) * 1000)
        gold = answers[qid]
        context = " ".join(p.text for p in done.context)
        rows.append(
            {
                "id": qid,
                "answer_hit": contains(done.answer.text if done.answer else "", gold),
                "context_hit": contains(context, gold),
                "route": done.route.type.value,
                "complexity": done.route.complexity.value,
                "grade": done.corrective.grade.value if done.corrective else None,
                "calls": done.calls,
                "method": done.answer.method if done.answer else "none",
                "degraded": done.outcome.degraded,
            }
        )
        if progress and (i % 10 == 0 or i == len(ids)):
            progress(dataset.name, i, len(ids))
    n = max(len(rows), 1)
    summary: dict[str, object] = {
        "questions": len(rows),
        "answer_recall": sum(bool(r["answer_hit"]) for r in rows) / n,
        "context_recall": sum(bool(r["context_hit"]) for r in rows) / n,
        "calls_per_query": sum(int(str(r["calls"])) for r in rows) / n,
        "routes": dict(Counter(str(r["route"]) for r in rows)),
        "grades": dict(Counter(str(r["grade"]) for r in rows)),
        "methods": dict(Counter(str(r["method"]) for r in rows)),
        **latency_summary(latencies),
    }
    return {"summary": summary, "rows": rows}


def _missing(path: Path) -> RampartError:
    return RampartError(
        ErrorCode.NOT_FOUND,
        f"{path} not found; point RAMPART_EVAL_DATA_DIR at the folder holding hotpotqa_dev500 and nq_open_oracle",
    )


def run_answer_eval(
    name: str,
    settings: RampartSettings,
    *,
    split: QuerySplit = "heldout",
    limit: int | None = None,
    progress: Progress | None = None,
) -> dict[str, object]:
    """Index the set (cached under ``<data_dir>/eval-cache``) and score the answers of the full
    adaptive pipeline on it: the runtime's, as ``rampart serve`` builds it."""
    from services.evaluation.runner import eval_runtime
    from services.retrieval.embedder import build_embedder

    dataset, answers = answer_set(name, settings, split)
    with eval_runtime(
        dataset,
        settings,
        settings.data_dir / "eval-cache",
        embedder=build_embedder(settings.embedding, settings.models_dir),
        progress=progress,
    ) as (runtime, _):
        report = evaluate_answers(runtime.orchestrator, dataset, answers, limit=limit, progress=progress)
    report["set"] = name
    report["split"] = split
    return report
