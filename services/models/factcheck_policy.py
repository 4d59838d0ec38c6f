"""Writes the fact-check policy artifact: ``policy.json``, ``manifest.json`` and ``MODEL_CARD.md``.

``rampart tune factcheck --out DIR`` calls :func:`write_policy` with what it fitted; the shipped one is
``services/models/artifacts/factcheck`` (read by :mod:`services.factcheck.config`, whose fitted
settings default to it; ``factcheck.policy_dir`` points at another). The manifest says what the values
were fitted on and how (data, command, date) and what they scored (figures); the card says the same
for a reader.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from services.factcheck.config import FITTED, POLICY_FILE, POLICY_FORMAT, load_policy
from services.models.artifact_files import figure_table, manifest_fields, shown, write_artifact

MODEL_ID = "rampart-factcheck-policy"

# What each fitted value does, for the card (the settings' own descriptions: docs/configuration.md).
MEANING: dict[str, str] = {
    "calibration": "Platt scaling (a, b) of the reranker logit: P(relevant) = sigmoid(a * logit + b)",
    "relevance_threshold": "P(relevant) below which a passage may be IRRELEVANT",
    "coverage_threshold": "best sentence strip's share of the query terms below which no strip addresses "
    "the query",
    "conflict_threshold": "claim-conflict score between two passages that counts as a conflict",
    "duplicate_threshold": "embedding cosine within which passages of different documents are "
    "near-duplicates (the cluster detector's DBSCAN radius)",
    "duplicate_min_docs": "documents in a near-duplicate cluster that make it ADVERSARIAL",
    "context_depth": "results down to this rank read (not judged) as peers for the clusters",
    "copy_threshold": "claim-vector cosine at which another document's chunk is a near-copy",
    "copy_min_docs": "other documents with a near-copy that make a passage ADVERSARIAL (0 = off)",
    "copy_border_threshold": "cosine within which a passage joins a planted group through a core member "
    "(0 = off)",
    "copy_border_slack": "how far below the core's own near-copy cosine a border member may lie (1 = no "
    "such condition)",
    "claim_join_threshold": "cosine within which an unjudged passage is compared with a flagged group's "
    "shared claim (0 = off)",
    "claim_share": "share of a flagged group's claim words (weighted by rarity) a passage must use to join",
}


def write_policy(
    out_dir: Path,
    values: Mapping[str, Any],
    *,
    created: str,
    command: str,
    data: Mapping[str, Any],
    figures: Mapping[str, Mapping[str, Any]],
    extra: Mapping[str, Any] | None = None,
    model_id: str = MODEL_ID,
) -> Path:
    """Write the artifact to ``out_dir`` and read it back (a policy the settings would refuse fails
    here, not at the next start-up). ``values``: every name in :data:`FITTED`; ``figures``: metric
    rows by name (the chosen grid point's); ``extra``: anything else worth keeping (provenance)."""
    missing, unknown = set(FITTED) - set(values), set(values) - set(FITTED)
    if missing or unknown:
        raise ValueError(
            f"a fact-check policy holds exactly {list(FITTED)}: missing {sorted(missing)}, "
            f"unknown {sorted(unknown)}"
        )
    policy = {"format": POLICY_FORMAT, "values": {n: _plain(values[n]) for n in FITTED}}
    manifest = {
        **manifest_fields(
            model_id=model_id, created=created, command=command, data=data, figures=figures, extra=extra
        ),
        **policy,
    }
    write_artifact(out_dir, POLICY_FILE, policy, manifest, model_card(manifest))
    load_policy.cache_clear()  # the same path may have held another policy in this process
    load_policy(out_dir / POLICY_FILE)
    return out_dir


def _plain(value: Any) -> Any:
    """JSON's form of a setting's value: the calibration pair as a list."""
    return list(value) if isinstance(value, tuple | list) else value


def model_card(manifest: Mapping[str, Any]) -> str:
    values = manifest["values"]
    lines = [
        f"# Model card: {manifest['model_id']}",
        "",
        f"Built {manifest['created']} by `{manifest['command']}`.",
        "",
        "## What it is",
        "The fitted values of the four-verdict fact-check (`services/factcheck/`, docs/factcheck.md): the",
        "reranker's Platt calibration and the thresholds `rampart tune factcheck` grid-searches. The",
        "`factcheck.*` settings of the same names default to them; `RAMPART_FACTCHECK__POLICY_DIR` points",
        "at another policy, and a setting set explicitly wins over either.",
        "",
        "## Data (dev data only)",
        *(f"- {name}: {shown(value)}" for name, value in manifest["data"].items()),
        *(f"- {name}: {shown(manifest[name])}" for name in ("provenance", "note") if name in manifest),
        "",
        "## Values",
        "| setting | value | what it does |",
        "|---|---:|---|",
        *(f"| `factcheck.{n}` | {shown(values[n])} | {MEANING[n]} |" for n in FITTED),
        "",
        "## Figures",
        *figure_table(manifest["figures"]),
        "",
        "## Refitting",
        "`rampart tune factcheck --set CORPUS_DIR::ATTACKS_JSON[::train] ... --out DIR` collects the dev",
        "cases, fits the calibration, grid-searches the thresholds and writes this artifact to DIR; then",
        'set `RAMPART_FACTCHECK__POLICY_DIR=DIR` (docs/factcheck.md, "Tuning"). Report on a held-out',
        "set before shipping it here.",
        "",
    ]
    return "\n".join(lines)
