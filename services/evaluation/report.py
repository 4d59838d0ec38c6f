"""The evaluation report: one JSON file, a rich table, a markdown table and a bar chart.

Shape (``EvalReport.model_dump(mode="json")``)::

    {"dataset": "scifact", "split": "test", "num_queries": 300, "num_docs": 5183,
     "created_at": "2025-01-01T00:00:00Z", "command": "rampart eval ...",
     "pipelines": {"bm25": {"ndcg@10": 0.66, "recall@100": 0.91, "mrr@10": 0.63,
                            "latency_ms_p50": 3.1, "latency_ms_p95": 7.9, ...extra keys...}},
     "significance": [...], "corpus_sha256": "...", "notes": {...}}

Every pipeline needs the metric keys in ``REQUIRED_PIPELINE_KEYS``; extra keys (numbers, strings,
booleans) are kept. Tables and charts show every numeric key; "best" is the highest value, except for
keys that measure cost (``latency*``, ``*_ms``, ``*_seconds``, ``*_bytes``, ``calls_per_query``),
where it is the lowest.
"""

from __future__ import annotations

import math
import os
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from services.common.errors import invalid
from services.evaluation.significance import SignificanceResult

if TYPE_CHECKING:
    from rich.table import Table

QUALITY_KEYS: tuple[str, ...] = ("ndcg@10", "recall@100", "mrr@10")
LATENCY_KEYS: tuple[str, ...] = ("latency_ms_p50", "latency_ms_p95")
REQUIRED_PIPELINE_KEYS: tuple[str, ...] = QUALITY_KEYS + LATENCY_KEYS

PipelineValue = float | int | str | bool
_LOWER_IS_BETTER_SUFFIXES = ("_ms", "_s", "_seconds", "_bytes", "_mb", "calls_per_query")


def _now() -> datetime:
    return datetime.now(UTC).replace(microsecond=0)


class EvalReport(BaseModel):
    model_config = ConfigDict(extra="forbid")

    dataset: str = Field(min_length=1)
    split: str = Field(min_length=1)
    num_queries: int = Field(ge=0)
    num_docs: int = Field(ge=0)
    created_at: datetime = Field(default_factory=_now)
    command: str = ""
    pipelines: dict[str, dict[str, PipelineValue]] = Field(min_length=1)
    significance: list[SignificanceResult] = Field(default_factory=list)
    corpus_sha256: str | None = None
    notes: dict[str, Any] = Field(default_factory=dict)

    @field_validator("pipelines")
    @classmethod
    def _check_pipelines(
        cls, value: dict[str, dict[str, PipelineValue]]
    ) -> dict[str, dict[str, PipelineValue]]:
        for name, entry in value.items():
            if not name:
                raise ValueError("pipeline names must be non-empty")
            missing = [k for k in REQUIRED_PIPELINE_KEYS if k not in entry]
            if missing:
                raise ValueError(
                    f"pipeline {name!r} is missing {missing}; "
                    f"every pipeline needs {list(REQUIRED_PIPELINE_KEYS)}"
                )
            for key, v in entry.items():
                if _is_number(v) and not math.isfinite(float(v)):
                    raise ValueError(f"pipeline {name!r} key {key!r} is {v}; values must be finite")
            for key in REQUIRED_PIPELINE_KEYS:
                if not _is_number(entry[key]):
                    raise ValueError(f"pipeline {name!r} key {key!r} must be a number, got {entry[key]!r}")
        return value

    @field_validator("created_at")
    @classmethod
    def _aware(cls, value: datetime) -> datetime:
        return value if value.tzinfo is not None else value.replace(tzinfo=UTC)

    def numeric_keys(self) -> list[str]:
        """Numeric per-pipeline keys in display order: required keys first, then extras as first seen."""
        keys = list(REQUIRED_PIPELINE_KEYS)
        for entry in self.pipelines.values():
            for key, v in entry.items():
                if key not in keys and _is_number(v):
                    keys.append(key)
        return keys

    def best(self, key: str) -> float | None:
        """Best value of ``key`` over pipelines (max, or min for cost keys); None if nobody has it."""
        values = [float(e[key]) for e in self.pipelines.values() if key in e and _is_number(e[key])]
        if not values:
            return None
        return min(values) if lower_is_better(key) else max(values)


def lower_is_better(key: str) -> bool:
    k = key.lower()
    return k.startswith("latency") or k.endswith(_LOWER_IS_BETTER_SUFFIXES)


def _is_number(v: object) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def _all_in_unit_range(report: EvalReport, key: str) -> bool:
    values = [e[key] for e in report.pipelines.values() if key in e]
    return all(_is_number(v) and 0.0 <= float(v) <= 1.0 for v in values)


def _as_float(value: PipelineValue | None) -> float:
    return float(value) if value is not None and _is_number(value) else 0.0


def _fmt(key: str, value: PipelineValue | None) -> str:
    if value is None or not _is_number(value):
        return "–"
    if isinstance(value, int):
        return str(value)
    if lower_is_better(key):
        return f"{value:.1f}"
    return f"{value:.4f}"


def _is_best(report: EvalReport, key: str, value: PipelineValue | None) -> bool:
    if len(report.pipelines) < 2 or value is None or not _is_number(value):
        return False
    best = report.best(key)
    # Compare as displayed, so values that print the same are bolded together.
    return best is not None and _fmt(key, value) == _fmt(key, best)


# ---------------------------------------------------------------------------------------------------
# JSON
# ---------------------------------------------------------------------------------------------------


def write_json(report: EvalReport, path: Path) -> Path:
    """Write ``report`` as indented JSON (atomically: temp file + rename). Returns ``path``."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    data = report.model_dump_json(indent=2) + "\n"
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(data)
        Path(tmp).replace(target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target


def read_json(path: Path) -> EvalReport:
    """Load a report written by :func:`write_json`."""
    p = Path(path)
    try:
        raw = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise invalid(f"report file not found: {p}", path=str(p)) from None
    try:
        return EvalReport.model_validate_json(raw)
    except ValidationError as exc:
        raise invalid(f"{p} is not a valid evaluation report: {exc}", path=str(p)) from None


# ---------------------------------------------------------------------------------------------------
# Tables
# ---------------------------------------------------------------------------------------------------


def _title(report: EvalReport) -> str:
    return f"{report.dataset} ({report.split}) — {report.num_queries} queries, {report.num_docs} docs"


def render_table(report: EvalReport) -> Table:
    """A rich table, one row per pipeline, one column per numeric key; best value per column in bold."""
    from rich.table import Table

    table = Table(title=_title(report))
    keys = report.numeric_keys()
    table.add_column("pipeline", style="cyan", no_wrap=True)
    for key in keys:
        arrow = "↓" if lower_is_better(key) else "↑"
        table.add_column(f"{key} {arrow}", justify="right")
    for name, entry in report.pipelines.items():
        cells = [name]
        for key in keys:
            value = entry.get(key)
            text = _fmt(key, value)
            cells.append(f"[bold]{text}[/bold]" if _is_best(report, key, value) else text)
        table.add_row(*cells)
    return table


def markdown_table(report: EvalReport) -> str:
    """A GitHub-flavoured markdown table for docs/benchmarks.md; best value per column in **bold**."""
    keys = report.numeric_keys()
    header = ["pipeline", *keys]
    align = [":---", *("---:" for _ in keys)]
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join(align) + " |"]
    for name, entry in report.pipelines.items():
        cells = [_md_escape(name)]
        for key in keys:
            value = entry.get(key)
            text = _fmt(key, value)
            cells.append(f"**{text}**" if _is_best(report, key, value) else text)
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _md_escape(text: str) -> str:
    return text.replace("|", "\\|")


# ---------------------------------------------------------------------------------------------------
# Chart
# ---------------------------------------------------------------------------------------------------


def plot_bars(report: EvalReport, path_png: Path) -> Path:
    """Grouped bar chart: one group per metric, one bar per pipeline, values on the bars.

    Quality metrics (higher-is-better keys whose values all lie in 0..1) and latencies (``latency*`` /
    ``*_ms`` keys) get separate panels so neither scale hides the other; other numeric extras (e.g.
    ``index_seconds``) are left to the tables. Rendered with the Agg canvas under matplotlib's default
    style, with the PNG ``Software`` tag dropped, so the same report gives byte-identical files.
    """
    import matplotlib
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    target = Path(path_png)
    target.parent.mkdir(parents=True, exist_ok=True)
    keys = report.numeric_keys()
    quality = [k for k in keys if not lower_is_better(k) and _all_in_unit_range(report, k)]
    latency = [k for k in keys if k.lower().startswith("latency") or k.lower().endswith("_ms")]
    panels = [(quality, "score (higher is better)", True), (latency, "latency, ms (lower is better)", False)]
    panels = [p for p in panels if p[0]]
    names = list(report.pipelines)

    with matplotlib.rc_context(matplotlib.rcParamsDefault):
        widths = [max(len(p[0]), 1) for p in panels]
        fig = Figure(
            figsize=(2.0 + 1.6 * sum(widths) + 0.35 * len(names), 5.0), dpi=100, layout="constrained"
        )
        FigureCanvasAgg(fig)
        axes = fig.subplots(1, len(panels), squeeze=False, gridspec_kw={"width_ratios": widths})[0]
        cmap = matplotlib.colormaps["tab10"]
        bar_w = 0.8 / max(len(names), 1)
        for ax, (panel_keys, ylabel, unit_scale) in zip(axes, panels, strict=True):
            top = 0.0
            for i, name in enumerate(names):
                entry = report.pipelines[name]
                xs = [j + (i - (len(names) - 1) / 2) * bar_w for j in range(len(panel_keys))]
                vals = [_as_float(entry.get(k)) for k in panel_keys]
                top = max(top, *vals)
                bars = ax.bar(xs, vals, width=bar_w, label=name, color=cmap(i % 10))
                labels = [_fmt(k, entry.get(k)) for k in panel_keys]
                ax.bar_label(bars, labels=labels, padding=2, fontsize=7, rotation=90 if len(names) > 3 else 0)
            ax.set_xticks(range(len(panel_keys)))
            ax.set_xticklabels(panel_keys)
            ax.set_ylabel(ylabel)
            ax.set_ylim(0, 1.15 if unit_scale and top <= 1.0 else (top * 1.2 if top > 0 else 1.0))
            ax.grid(axis="y", alpha=0.3)
            ax.set_axisbelow(True)
        handles, labels = axes[0].get_legend_handles_labels()
        fig.legend(handles, labels, loc="outside lower center", ncols=min(len(names), 5), frameon=False)
        fig.suptitle(
            f"{report.dataset} / {report.split} — {report.num_queries} queries, {report.num_docs} docs"
        )
        fig.savefig(target, format="png", metadata={"Software": None})
    return target
