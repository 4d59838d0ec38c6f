"""The model card written next to a trained query router: data, counts, command, settings, metrics."""

from __future__ import annotations

from typing import Any


def render_router_card(manifest: dict[str, Any]) -> str:
    """Markdown from the manifest ``rampart train router`` writes (so card and manifest agree)."""
    lines = [
        f"# Model card: {manifest.get('model_id')}",
        "",
        f"Built {manifest.get('created')} by",
        "",
        "```sh",
        str(manifest.get("command")),
        "```",
        "",
        *_what_it_is(manifest),
        *_training_data(manifest),
        "",
        "## Settings",
        "| setting | value |",
        "|---|---|",
        *(f"| {key} | {value} |" for key, value in manifest.get("config", {}).items()),
        "",
        "## Held-out figures",
        *_heldout_figures(manifest),
        "",
        "## Files",
        "- `weights.npz`, `manifest.json`, `MODEL_CARD.md`",
        "",
    ]
    return "\n".join(lines)


def _what_it_is(manifest: dict[str, Any]) -> list[str]:
    return [
        "## What it is",
        "The query router of the adaptive orchestrator (`services/orchestrator/routing/router.py`): two multinomial",
        "logistic regressions, one for AdaptiveRAG's query type (simple / conversational / complex) and one",
        "for HyPA's complexity (low / medium / high). Inputs: "
        f"{len(manifest.get('cheap_features', []))} cheap cues (standardised) and the",
        f"{manifest.get('embedding_dim')}-d query embedding of `{manifest.get('embedder_id')}` "
        f"(x {manifest.get('embedding_scale')}).",
        "Weights are numpy arrays (`weights.npz`, loaded without pickle); serving needs no scikit-learn.",
        "",
    ]


def _training_data(manifest: dict[str, Any]) -> list[str]:
    train = manifest.get("counts", {}).get("train", {})
    heldout = manifest.get("counts", {}).get("heldout", {})
    lines = [
        "## Training data (`services/models/router_data.py`; docs/routing.md)",
        "- HotpotQA-500 `train` half → complex (comparison → medium, bridge → high); NQ-open oracle",
        "  questions of the `train` hash half → simple/low; follow-ups derived from both (pronoun or",
        "  ellipsis, source question as the last turn) → conversational with the source's complexity;",
        "  counter-examples: the source after an unrelated/related turn, follow-ups restating the entity.",
        "- The HotpotQA `heldout` half and the NQ held-out half (and everything derived from them) are",
        "  used only for the figures below.",
        "",
        "| label | train | held-out |",
        "|---|---|---|",
    ]
    for key in ("type", "complexity", "kind"):
        names = sorted(set(train.get(key, {})) | set(heldout.get(key, {})))
        for name in names:
            lines.append(
                f"| {key}: {name} | {train.get(key, {}).get(name, 0)} | {heldout.get(key, {}).get(name, 0)} |"
            )
    return lines


def _heldout_figures(manifest: dict[str, Any]) -> list[str]:
    metrics = manifest.get("heldout_metrics", {})
    if not metrics:
        return ["Not measured (trained without a held-out part)."]
    lines = [
        f"{metrics.get('queries')} held-out queries, min_confidence {manifest.get('min_confidence')} "
        f"({metrics.get('low_confidence_fallbacks')} fell back to conversational).",
        "",
        "| figure | value |",
        "|---|---|",
        f"| type accuracy | {metrics['type']['accuracy']:.4f} |",
        f"| complexity accuracy | {metrics['complexity']['accuracy']:.4f} |",
    ]
    for head in ("type", "complexity"):
        for name, d in metrics[head]["per_class"].items():
            lines.append(
                f"| {head} {name}: precision / recall | {d['precision']:.3f} / {d['recall']:.3f} "
                f"({d['support']}) |"
            )
    for key in ("latency_ms_p50", "latency_ms_p95"):
        if key in metrics:
            lines.append(
                f"| classify {key} (single query, embedding included, measured while training) | "
                f"{metrics[key]} |"
            )
    for head in ("type", "complexity"):
        confusion = metrics[head]["confusion"]
        names = list(confusion)
        lines += [
            "",
            f"Confusion ({head}; rows gold, columns predicted):",
            "",
            "| gold \\ predicted | " + " | ".join(names) + " |",
            "|---" * (len(names) + 1) + "|",
        ]
        for gold, row in confusion.items():
            lines.append(f"| {gold} | " + " | ".join(str(row[n]) for n in names) + " |")
    return lines
