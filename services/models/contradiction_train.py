"""Fine-tune a 3-way cross-encoder on claim/evidence pairs (``rampart train contradiction``).

Input ``[CLS] evidence [SEP] claim [SEP]`` (premise first, as NLI models read it; longest-first
truncation cuts the evidence, never the short claim first), output one logit per label in
:data:`LABELS` order. The encoder is the packaged MiniLM-L6 bi-encoder; the head (``head``) is either
a linear layer on the mean-pooled pair (``mean``, :mod:`services.models.pair_classifier`: the pooling
the bi-encoder was trained for) or Hugging Face's ``[CLS]`` head (``cls``).

The loss is cross-entropy weighted by inverse class frequency (the synthetic contradictions are capped,
so the classes are not balanced by construction). Batches are drawn in length buckets (shuffled, then
sorted within chunks of 32 batches) so padding stays small. Runs are deterministic for a seed, bounded
by ``epochs`` and a wall-clock ``max_minutes``, checkpointed every ``checkpoint_every`` steps and
resumable; after every epoch (and when time runs out) the model is scored on SciFact ``dev`` and the
best by macro-F1 is what the run keeps (``out_dir/best``, then ``out_dir/hf``).
"""

from __future__ import annotations

import json
import math
import random
import shutil
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from services.common.errors import ErrorCode, RampartError
from services.common.fs import swap_dir
from services.models.build_deps import import_build_deps, quiet_loading
from services.models.contradiction_data import Label, NliPair
from services.models.pair_classifier import is_pair_classifier, load_pair_classifier
from services.models.reranker_train import CHECKPOINT_DIR, STATE_FILE, load_base, save_checkpoint
from services.rerank.pair_scorer import configure_tokenizer, length_batches, pad_batch

LABELS: tuple[str, ...] = tuple(label.value for label in Label)  # SUPPORT, CONTRADICT, NEI
HEADS = ("mean", "cls")
BEST_DIR = "best"
METRICS_FILE = "rampart_dev_metrics.json"
Progress = Callable[[int, int, dict[str, float]], None]


@dataclass
class NliTrainConfig:
    base: str  # folder of the encoder to start from
    out_dir: Path
    epochs: int = 6
    max_minutes: float = 35.0
    batch_size: int = 16
    max_length: int = 256
    lr: float = 4e-5
    head_lr: float = 1e-3  # the new head moves with a larger step than the pretrained encoder
    warmup: float = 0.1
    seed: int = 13
    head: str = "mean"  # "mean" (mean-pooled pair) | "cls" (Hugging Face head on [CLS])
    checkpoint_every: int = 50
    bf16: bool = True
    threads: int = 0


@dataclass
class NliTrainResult:
    steps: int
    pairs_seen: int
    seconds: float
    stopped_by: str  # "epochs" | "max_minutes"
    train_pairs: int
    dev_pairs: int
    class_weights: dict[str, float]
    best_epoch: float | None  # epochs completed when the kept model was scored (fractional if cut short)
    dev: dict[str, Any]  # report of the kept model (bf16 torch, as validated)
    history: list[dict[str, float]] = field(default_factory=list)  # per validation: epoch, loss, macro_f1
    final_loss: float = math.nan
    losses: list[float] = field(default_factory=list)


def classification_report(gold: Sequence[int], pred: Sequence[int], labels: Sequence[str]) -> dict[str, Any]:
    """Accuracy, macro-F1, per-class precision/recall/F1/support and the confusion matrix (rows gold,
    columns predicted, both in ``labels`` order). An empty class scores 0, never divides by zero."""
    k = len(labels)
    confusion = [[0] * k for _ in range(k)]
    for g, p in zip(gold, pred, strict=True):
        confusion[g][p] += 1
    per_class: dict[str, dict[str, float]] = {}
    for i, name in enumerate(labels):
        tp = confusion[i][i]
        predicted = sum(confusion[r][i] for r in range(k))
        support = sum(confusion[i])
        precision = tp / predicted if predicted else 0.0
        recall = tp / support if support else 0.0
        f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
        per_class[name] = {
            "precision": round(precision, 4),
            "recall": round(recall, 4),
            "f1": round(f1, 4),
            "support": support,
        }
    n = len(gold)
    return {
        "pairs": n,
        "accuracy": round(sum(confusion[i][i] for i in range(k)) / n, 4) if n else 0.0,
        "macro_f1": round(sum(c["f1"] for c in per_class.values()) / k, 4),
        "per_class": per_class,
        "confusion": {labels[i]: dict(zip(labels, confusion[i], strict=True)) for i in range(k)},
    }


def class_weights(pairs: Sequence[NliPair]) -> list[float]:
    """Inverse-frequency weights ``n / (k · n_c)`` in :data:`LABELS` order (1 for an absent class)."""
    counts = [sum(1 for p in pairs if p.label.value == name) for name in LABELS]
    return [len(pairs) / (len(LABELS) * c) if c else 1.0 for c in counts]


def _encode(tokenizer: Any, pairs: Sequence[NliPair]) -> list[Any]:
    from services.rerank.pair_scorer import clean_text

    return list(
        tokenizer.encode_batch(
            [(clean_text(p.premise), clean_text(p.hypothesis)) for p in pairs], add_special_tokens=True
        )
    )


def epoch_batches(lengths: Sequence[int], batch_size: int, rng: random.Random) -> list[list[int]]:
    """One epoch of index batches: shuffled, sorted by length within chunks of 32 batches (little
    padding), then the batches shuffled (no length order across the epoch). Every index once."""
    order = list(range(len(lengths)))
    rng.shuffle(order)
    chunk = batch_size * 32
    batches: list[list[int]] = []
    for start in range(0, len(order), chunk):
        part = sorted(order[start : start + chunk], key=lambda i: lengths[i])
        batches += [part[j : j + batch_size] for j in range(0, len(part), batch_size)]
    rng.shuffle(batches)
    return batches


def _stream(lengths: Sequence[int], cfg: NliTrainConfig) -> Iterator[list[int]]:
    """Endless deterministic stream of batches; epoch ``e`` is shuffled with ``seed * 1000 + e``."""
    epoch = 0
    while True:
        yield from epoch_batches(lengths, cfg.batch_size, random.Random(cfg.seed * 1000 + epoch))
        epoch += 1


def predict_torch(
    model: Any, encodings: Sequence[Any], torch: Any, *, bf16: bool, batch_size: int = 64
) -> list[int]:
    """Argmax label index per encoding (length-sorted batches, input order kept)."""
    out = [0] * len(encodings)
    model.eval()
    with torch.no_grad():
        for batch in length_batches([len(e.ids) for e in encodings], batch_size):
            feeds = {k: torch.from_numpy(v) for k, v in pad_batch([encodings[i] for i in batch]).items()}
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
                logits = model(**feeds).logits.float()
            for i, row in zip(batch, logits.argmax(dim=-1).tolist(), strict=True):
                out[i] = int(row)
    model.train()
    return out


def _load(cfg: NliTrainConfig, source: Path | str, fresh: bool, transformers: Any) -> Any:
    if cfg.head == "mean":
        return load_pair_classifier(source, labels=list(LABELS) if fresh else None)
    return load_base(
        str(source),
        transformers,
        num_labels=len(LABELS),
        id2label=dict(enumerate(LABELS)),
        label2id={name: i for i, name in enumerate(LABELS)},
    )


def train(
    cfg: NliTrainConfig,
    pairs: Sequence[NliPair],
    dev: Sequence[NliPair],
    tokenizer_file: Path,
    *,
    progress: Progress | None = None,
) -> NliTrainResult:
    """Train, validate on ``dev`` after every epoch, keep the best; saves ``cfg.out_dir / 'hf'``."""
    torch, transformers = import_build_deps("training the contradiction classifier")
    from tokenizers import Tokenizer

    if cfg.head not in HEADS:
        raise RampartError(
            ErrorCode.INVALID_ARGUMENT, f"unknown head {cfg.head!r}; choose from {', '.join(HEADS)}"
        )
    if not pairs:
        raise RampartError(
            ErrorCode.FAILED_PRECONDITION,
            "no training pairs; check the SciFact claims folder (claims_train.jsonl, corpus.jsonl)",
        )
    random.seed(cfg.seed)
    torch.manual_seed(cfg.seed)
    if cfg.threads > 0:
        torch.set_num_threads(cfg.threads)
    out = Path(cfg.out_dir)
    ckpt, best_dir = out / CHECKPOINT_DIR, out / BEST_DIR
    out.mkdir(parents=True, exist_ok=True)
    tokenizer_src = Tokenizer.from_file(str(tokenizer_file))
    tokenizer = configure_tokenizer(Tokenizer.from_str(tokenizer_src.to_str()), cfg.max_length)
    train_enc, dev_enc = _encode(tokenizer, pairs), _encode(tokenizer, dev)
    targets = [LABELS.index(p.label.value) for p in pairs]
    dev_gold = [LABELS.index(p.label.value) for p in dev]
    per_epoch = math.ceil(len(pairs) / cfg.batch_size)
    total = cfg.epochs * per_epoch

    state_file = ckpt / STATE_FILE
    resumed = state_file.is_file()
    if resumed and (ckpt.is_dir() and is_pair_classifier(ckpt)) != (cfg.head == "mean"):
        raise RampartError(
            ErrorCode.FAILED_PRECONDITION,
            f"the checkpoint in {ckpt} has another head than --head {cfg.head}; resume with the same "
            "settings or delete the folder to start over",
        )
    model = _load(cfg, ckpt if resumed else cfg.base, not resumed, transformers)
    model.train()
    head = [p for n, p in model.named_parameters() if not n.startswith("bert.")]
    head_ids = {id(p) for p in head}
    optimizer = torch.optim.AdamW(
        [
            {"params": [p for p in model.parameters() if id(p) not in head_ids]},
            {"params": head, "lr": cfg.head_lr, "weight_decay": 0.0},
        ],
        lr=cfg.lr,
        weight_decay=0.01,
    )
    scheduler = transformers.get_linear_schedule_with_warmup(
        optimizer, max(1, int(cfg.warmup * total)), total
    )
    start_step, losses, history, earlier_s, seen = 0, [], [], 0.0, 0
    if resumed:
        saved = json.loads(state_file.read_text(encoding="utf-8"))
        start_step, losses, history = int(saved["step"]), list(saved["losses"]), list(saved["history"])
        earlier_s, seen = float(saved.get("seconds", 0.0)), int(saved.get("pairs_seen", 0))
        optimizer.load_state_dict(torch.load(ckpt / "optimizer.pt", weights_only=True))
        scheduler.load_state_dict(torch.load(ckpt / "scheduler.pt", weights_only=True))
    else:
        shutil.rmtree(best_dir, ignore_errors=True)  # an earlier run's best is not this run's
    weights = class_weights(pairs)
    loss_fn = torch.nn.CrossEntropyLoss(weight=torch.tensor(weights, dtype=torch.float32))

    def state(step: int, seconds: float) -> dict[str, Any]:
        return {"step": step, "losses": losses, "seconds": seconds, "history": history, "pairs_seen": seen}

    def validate(step: int) -> None:
        """Score dev now; keep the model in ``best_dir`` if it beats every earlier validation."""
        if not dev:
            return
        report = classification_report(dev_gold, predict_torch(model, dev_enc, torch, bf16=cfg.bf16), LABELS)
        tail = losses[-per_epoch:] or [math.nan]
        history.append(
            {
                "epoch": round(step / per_epoch, 3),
                "step": step,
                "train_loss": round(sum(tail) / len(tail), 4),
                "macro_f1": report["macro_f1"],
                "accuracy": report["accuracy"],
            }
        )
        if report["macro_f1"] >= max(h["macro_f1"] for h in history):
            tmp = best_dir.with_name(best_dir.name + ".tmp")
            shutil.rmtree(tmp, ignore_errors=True)
            with quiet_loading(transformers):
                model.save_pretrained(str(tmp))
            (tmp / METRICS_FILE).write_text(
                json.dumps({"epoch": history[-1]["epoch"], "report": report}), encoding="utf-8"
            )
            swap_dir(tmp, best_dir)

    stream = _stream([len(e.ids) for e in train_enc], cfg)
    for _ in range(start_step):  # replay the data order up to the checkpoint (no model calls)
        next(stream)
    t0 = time.monotonic()
    step, stopped_by = start_step, "epochs"
    while step < total:
        if (time.monotonic() - t0) / 60 > cfg.max_minutes:
            stopped_by = "max_minutes"
            break
        batch = next(stream)
        feeds = {k: torch.from_numpy(v) for k, v in pad_batch([train_enc[i] for i in batch]).items()}
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=cfg.bf16):
            logits = model(**feeds).logits.float()
        loss = loss_fn(logits, torch.tensor([targets[i] for i in batch]))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        step += 1
        seen += len(batch)
        losses.append(float(loss.item()))
        if progress:
            progress(step, total, {"loss": sum(losses[-50:]) / len(losses[-50:])})
        if step % per_epoch == 0:
            validate(step)
        if step % cfg.checkpoint_every == 0 or step == total:
            seconds = earlier_s + time.monotonic() - t0
            save_checkpoint(model, optimizer, scheduler, ckpt, state(step, seconds), torch, transformers)

    seconds = earlier_s + time.monotonic() - t0
    if step % per_epoch and (not history or history[-1]["step"] != step):
        validate(step)  # cut short mid-epoch: the last weights get their chance too
    if step > start_step:
        save_checkpoint(model, optimizer, scheduler, ckpt, state(step, seconds), torch, transformers)
    final = out / "hf"
    shutil.rmtree(final, ignore_errors=True)
    best_metrics: dict[str, Any] = {}
    if (best_dir / METRICS_FILE).is_file():
        shutil.copytree(best_dir, final)
        best_metrics = json.loads((best_dir / METRICS_FILE).read_text(encoding="utf-8"))
    else:  # no dev set: the last weights
        with quiet_loading(transformers):
            model.save_pretrained(str(final))
    tokenizer_src.save(str(final / "tokenizer.json"))
    tail = losses[-50:] or [math.nan]
    return NliTrainResult(
        steps=step,
        pairs_seen=seen,
        seconds=round(seconds, 1),
        stopped_by=stopped_by,
        train_pairs=len(pairs),
        dev_pairs=len(dev),
        class_weights={name: round(w, 4) for name, w in zip(LABELS, weights, strict=True)},
        best_epoch=best_metrics.get("epoch"),
        dev=best_metrics.get("report", {}),
        history=history,
        final_loss=sum(tail) / len(tail),
        losses=losses,
    )


def config_dict(cfg: NliTrainConfig) -> dict[str, Any]:
    d = asdict(cfg)
    d["out_dir"] = str(cfg.out_dir)
    return d
