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
from services.models.reranker_train import (
    CHECKPOINT_DIR,
    STATE_FILE,
    load_base,
    load_optimiser_state,
    optimiser_step,
    save_checkpoint,
    seed_run,
)
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
    seed_run(cfg.seed, cfg.threads, torch)
    out = Path(cfg.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer_src = Tokenizer.from_file(str(tokenizer_file))
    tokenizer = configure_tokenizer(Tokenizer.from_str(tokenizer_src.to_str()), cfg.max_length)
    train_enc, dev_enc = _encode(tokenizer, pairs), _encode(tokenizer, dev)
    targets = [LABELS.index(p.label.value) for p in pairs]
    dev_gold = [LABELS.index(p.label.value) for p in dev]
    per_epoch = math.ceil(len(pairs) / cfg.batch_size)

    run = _start(cfg, out, torch, transformers, per_epoch=per_epoch, dev_enc=dev_enc, dev_gold=dev_gold)
    weights = class_weights(pairs)
    step, stopped_by, seconds = run.train_steps(train_enc, targets, weights, progress)
    best_metrics = _install_best(run, out / "hf")
    tokenizer_src.save(str(out / "hf" / "tokenizer.json"))
    tail = run.losses[-50:] or [math.nan]
    return NliTrainResult(
        steps=step,
        pairs_seen=run.seen,
        seconds=round(seconds, 1),
        stopped_by=stopped_by,
        train_pairs=len(pairs),
        dev_pairs=len(dev),
        class_weights={name: round(w, 4) for name, w in zip(LABELS, weights, strict=True)},
        best_epoch=best_metrics.get("epoch"),
        dev=best_metrics.get("report", {}),
        history=run.history,
        final_loss=sum(tail) / len(tail),
        losses=run.losses,
    )


@dataclass
class _NliRun:
    """A training run between its first (or resumed) step and its last: what a checkpoint holds, and
    where the best validated model is kept."""

    cfg: NliTrainConfig
    ckpt: Path
    best_dir: Path
    per_epoch: int  # steps per epoch: validation runs at each multiple
    dev_enc: Sequence[Any]
    dev_gold: Sequence[int]
    torch: Any
    transformers: Any
    model: Any
    optimizer: Any
    scheduler: Any
    start_step: int = 0
    losses: list[float] = field(default_factory=list)
    history: list[dict[str, float]] = field(default_factory=list)  # per validation: epoch, loss, macro_f1
    earlier_s: float = 0.0  # training time spent before a resume, so the card reports the whole run
    seen: int = 0  # training pairs read, resumes included

    def train_steps(
        self,
        train_enc: Sequence[Any],
        targets: Sequence[int],
        weights: list[float],
        progress: Progress | None,
    ) -> tuple[int, str, float]:
        """Steps up to ``epochs`` or until ``max_minutes`` is spent, validating after every epoch and
        checkpointing as it goes; returns the last step, what stopped the run and the seconds trained."""
        cfg, torch = self.cfg, self.torch
        total = cfg.epochs * self.per_epoch
        loss_fn = torch.nn.CrossEntropyLoss(weight=torch.tensor(weights, dtype=torch.float32))
        stream = _stream([len(e.ids) for e in train_enc], cfg)
        for _ in range(self.start_step):  # replay the data order up to the checkpoint (no model calls)
            next(stream)
        t0 = time.monotonic()
        step, stopped_by = self.start_step, "epochs"
        while step < total:
            if (time.monotonic() - t0) / 60 > cfg.max_minutes:
                stopped_by = "max_minutes"
                break
            batch = next(stream)
            feeds = {k: torch.from_numpy(v) for k, v in pad_batch([train_enc[i] for i in batch]).items()}
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=cfg.bf16):
                logits = self.model(**feeds).logits.float()
            loss = loss_fn(logits, torch.tensor([targets[i] for i in batch]))
            optimiser_step(loss, self.model, self.optimizer, self.scheduler, torch)
            step += 1
            self.seen += len(batch)
            self.losses.append(float(loss.item()))
            if progress:
                progress(step, total, {"loss": sum(self.losses[-50:]) / len(self.losses[-50:])})
            if step % self.per_epoch == 0:
                self.validate(step)
            if step % cfg.checkpoint_every == 0 or step == total:
                self.checkpoint(step, self.earlier_s + time.monotonic() - t0)

        seconds = self.earlier_s + time.monotonic() - t0
        if step % self.per_epoch and (not self.history or self.history[-1]["step"] != step):
            # cut short mid-epoch: the last weights get their chance too
            self.validate(step)
        if step > self.start_step:
            self.checkpoint(step, seconds)
        return step, stopped_by, seconds

    def validate(self, step: int) -> None:
        """Score dev now; keep the model in ``best_dir`` if it beats every earlier validation."""
        if not self.dev_enc:
            return
        predicted = predict_torch(self.model, self.dev_enc, self.torch, bf16=self.cfg.bf16)
        report = classification_report(self.dev_gold, predicted, LABELS)
        tail = self.losses[-self.per_epoch :] or [math.nan]
        self.history.append(
            {
                "epoch": round(step / self.per_epoch, 3),
                "step": step,
                "train_loss": round(sum(tail) / len(tail), 4),
                "macro_f1": report["macro_f1"],
                "accuracy": report["accuracy"],
            }
        )
        if report["macro_f1"] >= max(h["macro_f1"] for h in self.history):
            tmp = self.best_dir.with_name(self.best_dir.name + ".tmp")
            shutil.rmtree(tmp, ignore_errors=True)
            with quiet_loading(self.transformers):
                self.model.save_pretrained(str(tmp))
            (tmp / METRICS_FILE).write_text(
                json.dumps({"epoch": self.history[-1]["epoch"], "report": report}), encoding="utf-8"
            )
            swap_dir(tmp, self.best_dir)

    def checkpoint(self, step: int, seconds: float) -> None:
        state = {
            "step": step,
            "losses": self.losses,
            "seconds": seconds,
            "history": self.history,
            "pairs_seen": self.seen,
        }
        save_checkpoint(
            self.model, self.optimizer, self.scheduler, self.ckpt, state, self.torch, self.transformers
        )


def _start(
    cfg: NliTrainConfig,
    out: Path,
    torch: Any,
    transformers: Any,
    *,
    per_epoch: int,
    dev_enc: Sequence[Any],
    dev_gold: Sequence[int],
) -> _NliRun:
    """The model, its optimiser and schedule: fresh from ``cfg.base`` (an earlier run's best dropped),
    or as the checkpoint left them."""
    ckpt, best_dir = out / CHECKPOINT_DIR, out / BEST_DIR
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
    run = _NliRun(
        cfg=cfg,
        ckpt=ckpt,
        best_dir=best_dir,
        per_epoch=per_epoch,
        dev_enc=dev_enc,
        dev_gold=dev_gold,
        torch=torch,
        transformers=transformers,
        model=model,
        optimizer=optimizer,
        scheduler=scheduler,
    )
    if resumed:
        saved = json.loads(state_file.read_text(encoding="utf-8"))
        run.start_step, run.losses, run.history = (
            int(saved["step"]),
            list(saved["losses"]),
            list(saved["history"]),
        )
        run.earlier_s, run.seen = float(saved.get("seconds", 0.0)), int(saved.get("pairs_seen", 0))
        load_optimiser_state(ckpt, optimizer, scheduler, torch)
    else:
        shutil.rmtree(best_dir, ignore_errors=True)  # an earlier run's best is not this run's
    return run


def _install_best(run: _NliRun, final: Path) -> dict[str, Any]:
    """Put the best validated model in ``final`` (the last weights when there was no dev set); returns
    its dev metrics (``{}`` without a dev set)."""
    shutil.rmtree(final, ignore_errors=True)
    if (run.best_dir / METRICS_FILE).is_file():
        shutil.copytree(run.best_dir, final)
        metrics: dict[str, Any] = json.loads((run.best_dir / METRICS_FILE).read_text(encoding="utf-8"))
        return metrics
    with quiet_loading(run.transformers):  # no dev set: the last weights
        run.model.save_pretrained(str(final))
    return {}


def config_dict(cfg: NliTrainConfig) -> dict[str, Any]:
    d = asdict(cfg)
    d["out_dir"] = str(cfg.out_dir)
    return d
