"""Training the local reward model with the pairwise loss -log sigmoid(r(y+) - r(y-)) (paper Eq. 4).

Stage 1 (`train_stage1`): from the initial preference pairs, to convergence, early-stopped on a
dev split, keeping the best epoch. `split_by_input` makes the splits: per component, whole inputs go
to train, dev (early stopping) or test (the reported alignment, never used to pick an epoch), so no
dev or test input was seen in training. A pair whose two outputs render to the same text for the
reward model is indistinguishable: r_k gives both sides one value whatever it learns, so such pairs
are counted and never trained on. Stage 2 (`adapt_stage2`, after an accepted update): a few steps on fresh pairs, each batch
mixed with replayed older pairs so the update adapts without forgetting.

Gap weighting (`gap_weighting: gap`) weights each pair's loss by its score gap: a pair separated by
a large expected-reward difference is a clear label, a near-tie is mostly Monte Carlo noise. The
default is `none`, the paper's unweighted loss: Lemma B.1's guarantee (the minimizer is an increasing
function of the expected reward) is stated for it, and epsilon already drops the noisiest pairs.
"""
from __future__ import annotations

import contextlib
import json
import logging
import math
import random
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields

import torch
import torch.nn.functional as F

from optimas_cli.errors import UserError
from optimas_cli.lrf.buffer import ReplayBuffer
from optimas_cli.lrf.metrics import summarize_correct
from optimas_cli.lrf.pairs import PreferencePair, by_component
from optimas_cli.memory import large_allocations_unmapped_on_free
from optimas_cli.progress import phase, track

log = logging.getLogger(__name__)


@dataclass
class TrainConfig:
    lr: float = 5e-5  # trainable backbone weights (all of them, the top layers, or the LoRA adapter)
    head_lr: float = 1e-3  # the per-component linear heads
    weight_decay: float = 0.01
    epochs: int = 10  # Stage 1 upper bound; early stopping usually ends sooner
    batch_size: int = 16  # pairs per step (2x texts through the backbone)
    patience: int = 2  # epochs without dev improvement before stopping
    dev_fraction: float = 0.2  # of each component's inputs: early stopping
    test_fraction: float = 0.2  # of each component's inputs: the reported alignment (Table 4)
    gap_weighting: str = "none"  # none | gap
    grad_clip: float = 1.0
    seed: int = 0
    stage2_steps: int = 10
    stage2_batch_size: int = 16
    stage2_lr: float | None = None  # None: same as lr

    @classmethod
    def from_mapping(cls, cfg: Mapping | None) -> TrainConfig:
        cfg = dict(cfg or {})
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(cfg) - known)
        if unknown:
            raise UserError(f"unknown LRF training setting(s) {unknown}", f"use only {sorted(known)}")
        out = cls(**cfg)
        if out.gap_weighting not in ("none", "gap"):
            raise UserError(f"unknown gap_weighting {out.gap_weighting!r}", "use none or gap")
        if not (0.0 <= out.dev_fraction and 0.0 <= out.test_fraction and out.dev_fraction + out.test_fraction < 1.0):
            raise UserError(f"dev_fraction {out.dev_fraction} and test_fraction {out.test_fraction} must be >= 0 "
                            "and leave inputs to train on", "e.g. dev_fraction 0.2, test_fraction 0.2")
        return out


def pairwise_loss(r_chosen: torch.Tensor, r_rejected: torch.Tensor, weights: torch.Tensor | None = None) -> torch.Tensor:
    """-log sigmoid(r+ - r-), averaged (weighted by `weights` when given)."""
    losses = -F.logsigmoid(r_chosen - r_rejected)
    if weights is None:
        return losses.mean()
    return (losses * weights).sum() / weights.sum().clamp(min=1e-12)


def _context_key(p: PreferencePair) -> str:
    return json.dumps(p.context, sort_keys=True, default=str)


@dataclass
class PairSplit:
    """Pairs split by input. `no_test` says, per component without a test split, why."""

    train: list[PreferencePair] = field(default_factory=list)
    dev: list[PreferencePair] = field(default_factory=list)
    test: list[PreferencePair] = field(default_factory=list)
    no_test: dict[str, str] = field(default_factory=dict)


def split_by_input(
    pairs: Sequence[PreferencePair], dev_fraction: float, test_fraction: float, seed: int,
    min_test_pairs: int = 0, train_fraction: float = 1.0,
) -> PairSplit:
    """Per component, a seeded shuffle of its inputs (in collection order): the first `test_fraction` go to test, the next
    `dev_fraction` to dev, the first `train_fraction` of the rest to train (all their pairs each).

    Test and dev do not depend on `train_fraction` (an ablation over it compares on one test set),
    and smaller fractions train on subsets of larger ones. A component with fewer than
    `min_test_pairs` pairs or fewer than 3 inputs gets no dev or test split (all its pairs train)
    and its reason in `no_test`, so its alignment reads n/a instead of an accuracy on training pairs.
    """
    if not 0.0 < train_fraction <= 1.0:
        raise UserError(f"lrf.train_fraction is {train_fraction}", "use a fraction in (0, 1]")
    out = PairSplit()
    for name, group in sorted(by_component(pairs).items()):
        by_ctx: dict[str, list[PreferencePair]] = {}
        for p in group:
            by_ctx.setdefault(_context_key(p), []).append(p)
        units = list(by_ctx.values())
        random.Random(f"{seed}:{name}").shuffle(units)  # per component: others' pairs never move its split
        n_test = n_dev = 0
        if len(group) < min_test_pairs:
            out.no_test[name] = f"{len(group)} pairs, fewer than the {min_test_pairs} a test split needs"
        elif len(units) < 3:
            out.no_test[name] = f"pairs from {len(units)} input(s); train, dev and test need 3"
        else:
            n_test = max(1, round(len(units) * test_fraction)) if test_fraction > 0 else 0
            if not n_test:
                out.no_test[name] = "no test split configured (lrf.train.test_fraction is 0)"
            n_dev = max(1, round(len(units) * dev_fraction)) if dev_fraction > 0 else 0
            n_dev = min(n_dev, len(units) - n_test - 1)
        rest = units[n_test + n_dev:]
        out.test += [p for unit in units[:n_test] for p in unit]
        out.dev += [p for unit in units[n_test:n_test + n_dev] for p in unit]
        out.train += [p for unit in rest[: max(1, math.ceil(len(rest) * train_fraction))] for p in unit]
    return out


def distinguishable(model, pairs: Sequence[PreferencePair]) -> tuple[list[PreferencePair], list[PreferencePair]]:
    """(pairs whose chosen and rejected outputs render to different texts, pairs that render alike)."""
    seen, hidden = [], []
    for name, group in by_component(pairs).items():
        contexts = [p.context for p in group]
        chosen = model.texts(name, contexts, [p.chosen for p in group])
        rejected = model.texts(name, contexts, [p.rejected for p in group])
        for p, c, r in zip(group, chosen, rejected, strict=True):
            (seen if c != r else hidden).append(p)
    return seen, hidden


@dataclass
class _Item:
    component: str
    chosen: str
    rejected: str
    gap: float


def _render(model, pairs: Sequence[PreferencePair]) -> list[_Item]:
    """Pairs as the texts the reward model reads; indistinguishable ones are left out."""
    items = []
    for name, group in by_component(pairs).items():
        contexts = [p.context for p in group]
        chosen = model.texts(name, contexts, [p.chosen for p in group])
        rejected = model.texts(name, contexts, [p.rejected for p in group])
        items += [_Item(name, c, r, p.gap) for p, c, r in zip(group, chosen, rejected, strict=True) if c != r]
    return items


def _batch_loss(model, batch: Sequence[_Item], gap_weighting: str) -> torch.Tensor:
    names = [it.component for it in batch]
    rewards = model.rewards(names + names, [it.chosen for it in batch] + [it.rejected for it in batch])
    n = len(batch)
    weights = None
    if gap_weighting == "gap":
        weights = torch.tensor([max(it.gap, 0.0) for it in batch], device=rewards.device)
    return pairwise_loss(rewards[:n], rewards[n:], weights)


@torch.no_grad()
def _evaluate(model, items: Sequence[_Item], batch_size: int) -> tuple[float, dict]:
    """(mean loss, accuracy summary) in eval mode."""
    was_training = model.training
    model.eval()
    try:
        losses, correct = [], []
        for start in range(0, len(items), batch_size):
            batch = items[start : start + batch_size]
            names = [it.component for it in batch]
            r = model.rewards(names + names, [it.chosen for it in batch] + [it.rejected for it in batch])
            r_pos, r_neg = r[: len(batch)], r[len(batch) :]
            losses += (-F.logsigmoid(r_pos - r_neg)).tolist()
            correct += (r_pos > r_neg).tolist()
        summary = summarize_correct([it.component for it in items], correct)
        return (sum(losses) / len(losses) if losses else math.nan), summary
    finally:
        model.train(was_training)


def _optimizer(model, lr: float, cfg: TrainConfig) -> torch.optim.Optimizer:
    groups = [{"params": model.head_parameters(), "lr": cfg.head_lr, "weight_decay": 0.0}]
    backbone = model.backbone_parameters()
    if backbone:
        groups.append({"params": backbone, "lr": lr, "weight_decay": cfg.weight_decay})
    return torch.optim.AdamW(groups)


def _step(model, optimizer, batch: Sequence[_Item], cfg: TrainConfig) -> float:
    optimizer.zero_grad(set_to_none=True)
    loss = _batch_loss(model, batch, cfg.gap_weighting)
    loss.backward()
    if cfg.grad_clip:
        torch.nn.utils.clip_grad_norm_([p for g in optimizer.param_groups for p in g["params"]], cfg.grad_clip)
    optimizer.step()
    return float(loss.detach())


def _trainable_state(model) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}


def _restore(model, state: dict[str, torch.Tensor]) -> None:
    params = dict(model.named_parameters())
    with torch.no_grad():
        for n, v in state.items():
            params[n].copy_(v)


@contextlib.contextmanager
def _seeded(model, seed: int):
    """Seed dropout and shuffling without disturbing the caller's global RNG state."""
    devices = [torch.device(model.device_name).index or 0] if str(model.device_name).startswith("cuda") else []
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(seed)
        yield


def train_stage1(
    model,
    pairs: Sequence[PreferencePair],
    cfg: TrainConfig | Mapping | None = None,
    dev: Sequence[PreferencePair] | None = None,
    buffer: ReplayBuffer | None = None,
    before_epoch: Callable[[], None] | None = None,
) -> dict:
    """Train on `pairs` until dev accuracy stops improving; the best epoch's weights are kept.
    `before_epoch` runs before each epoch (a budget cap's check, which may stop the training).

    Without `dev`, a `cfg.dev_fraction` split of `pairs` by input is the dev set (nothing is held
    out for test here: the caller who reports alignment splits with split_by_input first). The
    training pairs go into `buffer` when one is given. Returns the training history and dev accuracy.
    """
    cfg = cfg if isinstance(cfg, TrainConfig) else TrainConfig.from_mapping(cfg)
    if dev is None:
        split = split_by_input(pairs, cfg.dev_fraction, 0.0, cfg.seed)
        train_pairs, held_pairs = split.train, split.dev
    else:
        train_pairs, held_pairs = list(pairs), list(dev)
    if not train_pairs:
        raise UserError("no preference pairs to train the local reward model on",
                        "collect pairs first (more examples, more candidates, or a smaller epsilon)")
    started = time.perf_counter()
    train_items, held_items = _render(model, train_pairs), _render(model, held_pairs)
    if not train_items:
        raise UserError("every training pair renders to the same text on both sides (indistinguishable)",
                        "declare a reward_view for the component, or raise lrf.max_length")
    rng = random.Random(cfg.seed)
    history: list[dict] = []
    steps = 0
    with _seeded(model, cfg.seed), large_allocations_unmapped_on_free():
        optimizer = _optimizer(model, cfg.lr, cfg)
        best_key, best_state, best_epoch = None, _trainable_state(model), 0
        if held_items:  # for the record only: the untrained model is never the one kept
            loss0, acc0 = _evaluate(model, held_items, cfg.batch_size)
            history.append({"epoch": 0, "dev_loss": loss0, "dev_accuracy": acc0["mean"]})
        since_best = 0
        n_batches = math.ceil(len(train_items) / cfg.batch_size)
        model.train()
        with phase("LRF training · batches", cfg.epochs * n_batches) as advance:
            for epoch in range(1, cfg.epochs + 1):
                if before_epoch is not None:
                    before_epoch()
                order = list(train_items)
                rng.shuffle(order)
                losses = []
                for start in range(0, len(order), cfg.batch_size):
                    losses.append(_step(model, optimizer, order[start : start + cfg.batch_size], cfg))
                    steps += 1
                    advance()
                row = {"epoch": epoch, "train_loss": sum(losses) / len(losses)}
                if held_items:
                    loss, acc = _evaluate(model, held_items, cfg.batch_size)
                    row.update(dev_loss=loss, dev_accuracy=acc["mean"])
                    key = (acc["mean"], -loss)
                    if best_key is None or key > best_key:
                        best_key, best_state, best_epoch, since_best = key, _trainable_state(model), epoch, 0
                    else:
                        since_best += 1
                else:
                    best_state, best_epoch = None, epoch
                history.append(row)
                log.info("LRF epoch %d: %s", epoch, {k: round(v, 4) for k, v in row.items() if k != "epoch"})
                if held_items and since_best >= cfg.patience:
                    break
        if best_state is not None:
            _restore(model, best_state)
    model.eval()
    if buffer is not None:
        buffer.add(train_pairs)
    result = {
        "train_pairs": len(train_pairs),
        "dev_pairs": len(held_pairs),
        "epochs_run": history[-1]["epoch"] if history else 0,
        "best_epoch": best_epoch,
        "steps": steps,
        "history": history,
        "seconds": round(time.perf_counter() - started, 2),
    }
    if held_items:
        result["dev_loss"], result["dev"] = _evaluate(model, held_items, cfg.batch_size)
    return result


def adapt_stage2(
    model,
    fresh_pairs: Sequence[PreferencePair],
    buffer: ReplayBuffer,
    cfg: TrainConfig | Mapping | None = None,
) -> dict:
    """A few steps on fresh pairs mixed with replayed ones; the fresh pairs then join the buffer.
    Indistinguishable fresh pairs are counted and left out (of training and of the buffer)."""
    cfg = cfg if isinstance(cfg, TrainConfig) else TrainConfig.from_mapping(cfg)
    fresh_pairs, hidden = distinguishable(model, fresh_pairs)
    if not fresh_pairs:
        return {"steps": 0, "fresh_pairs": 0, "indistinguishable": len(hidden)}
    started = time.perf_counter()
    batches = buffer.mixed_batches(list(fresh_pairs), cfg.stage2_batch_size, cfg.stage2_steps)
    fresh_items = _render(model, fresh_pairs)
    _, before = _evaluate(model, fresh_items, cfg.stage2_batch_size)
    losses = []
    with _seeded(model, cfg.seed + 1 + len(buffer)), large_allocations_unmapped_on_free():
        optimizer = _optimizer(model, cfg.stage2_lr or cfg.lr, cfg)
        model.train()
        for batch in track(batches, "LRF adaptation · batches"):
            items = _render(model, batch)
            if items:  # replayed pairs were filtered when they were fresh; this guards old buffers
                losses.append(_step(model, optimizer, items, cfg))
    model.eval()
    _, after = _evaluate(model, fresh_items, cfg.stage2_batch_size)
    n_fresh, n_replay = buffer.batch_shape(cfg.stage2_batch_size, len(fresh_pairs))
    buffer.add(fresh_pairs)
    return {
        "steps": len(batches),
        "fresh_pairs": len(fresh_pairs),
        "indistinguishable": len(hidden),
        "batch_fresh": n_fresh,
        "batch_replayed": n_replay,
        "losses": losses,
        "fresh_accuracy_before": before["mean"],
        "fresh_accuracy_after": after["mean"],
        "seconds": round(time.perf_counter() - started, 2),
    }
