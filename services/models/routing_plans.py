"""Writes the route-plans artifact: ``plans.json``, ``manifest.json`` and ``MODEL_CARD.md``.

``rampart tune routing --out DIR`` calls :func:`write_plans` with the table it chose; the shipped one is
``services/models/artifacts/routing`` (read by :mod:`services.orchestrator.routing.config`, whose
``routing.plans`` default to it; ``routing.plans_dir`` points at another). The manifest says what the
values were fitted on and how (data, command, date) and what they scored (figures); the card says the
same for a reader.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from services.models.artifact_files import figure_table, manifest_fields, shown, write_artifact
from services.orchestrator.routing.config import (
    LEVELS,
    PLANS_FILE,
    PLANS_FORMAT,
    RoutePlan,
    load_plans,
    read_plans,
)

MODEL_ID = "rampart-route-plans"


def write_plans(
    out_dir: Path,
    plans: Mapping[str, RoutePlan | Mapping[str, Any]],
    *,
    created: str,
    command: str,
    data: Mapping[str, Any],
    figures: Mapping[str, Mapping[str, Any]],
    extra: Mapping[str, Any] | None = None,
    model_id: str = MODEL_ID,
) -> Path:
    """Write the artifact to ``out_dir`` and read it back (plans the settings would refuse fail here,
    not at the next start-up). ``plans``: one per level in :data:`LEVELS`, every field written out so
    a later change of a :class:`RoutePlan` default does not change them; ``figures``: metric rows by
    name; ``extra``: anything else worth keeping (provenance)."""
    missing, unknown = set(LEVELS) - set(plans), set(plans) - set(LEVELS)
    if missing or unknown:
        raise ValueError(
            f"route plans hold exactly {list(LEVELS)}: missing {sorted(missing)}, unknown {sorted(unknown)}"
        )
    table = {level: RoutePlan.model_validate(plans[level]).model_dump() for level in LEVELS}
    artifact = {"format": PLANS_FORMAT, "plans": table}
    manifest = {
        **manifest_fields(
            model_id=model_id, created=created, command=command, data=data, figures=figures, extra=extra
        ),
        **artifact,
    }
    write_artifact(out_dir, PLANS_FILE, artifact, manifest, model_card(manifest))
    read_plans.cache_clear()  # the same path may have held other plans in this process
    load_plans(out_dir / PLANS_FILE)
    return out_dir


def model_card(manifest: Mapping[str, Any]) -> str:
    plans = manifest["plans"]
    fields = list(RoutePlan.model_fields)
    lines = [
        f"# Model card: {manifest['model_id']}",
        "",
        f"Built {manifest['created']} by `{manifest['command']}`.",
        "",
        "## What it is",
        "The retrieval plan of each query complexity the router gives (docs/routing.md,",
        "docs/orchestration.md): fusion weights, context size, per-retriever depth, KG hops and chain",
        "steps, after HyPA's table. `routing.plans` defaults to it; `RAMPART_ROUTING__PLANS_DIR` points at",
        "another, and `RAMPART_ROUTING__PLANS` set explicitly wins over either.",
        "",
        "## Data (dev data only)",
        *(f"- {name}: {shown(value)}" for name, value in manifest["data"].items()),
        *(f"- {name}: {shown(manifest[name])}" for name in ("provenance", "note") if name in manifest),
        "",
        "## Values",
        "| level | " + " | ".join(f"`{f}`" for f in fields) + " |",
        "|---|" + "---:|" * len(fields),
        *(f"| {level} | " + " | ".join(shown(plans[level][f]) for f in fields) + " |" for level in LEVELS),
        "",
        "What each field does: "
        + "; ".join(f"`{f}`: {RoutePlan.model_fields[f].description}" for f in fields)
        + ".",
        "",
        "## Figures",
        *figure_table(manifest["figures"]),
        "",
        "## Refitting",
        "`rampart tune routing --out DIR` grid-searches the BM25 : dense split per complexity on dev qrels",
        "(first stage) and writes this artifact to DIR; then set `RAMPART_ROUTING__PLANS_DIR=DIR`",
        '(docs/routing.md, "Per-route fusion weights"). Check the routed pipeline on a held-out set',
        "before shipping it here.",
        "",
    ]
    return "\n".join(lines)
