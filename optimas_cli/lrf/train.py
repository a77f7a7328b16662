"""Training the local reward model with the pairwise loss -log sigmoid(r(y+) - r(y-)) (paper Eq. 4).

Stage 1 (`train_stage1`): from the initial preference pairs, to convergence, early-stopped on a
seeded held-out split grouped by input (no held-out input was seen in training), keeping the best
epoch. Stage 2 (`adapt_stage2`, after an accepted update): a few steps on fresh pairs, each batch
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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields

import torch
import torch.nn.functional as F

from optimas_cli.errors import UserError
from optimas_cli.lrf.buffer import ReplayBuffer
from optimas_cli.lrf.metrics import summarize_correct
from optimas_cli.lrf.pairs import PreferencePair, by_component
from optimas_cli.progress import phase, track

log = logging.getLogger(__name__)


@dataclass
class TrainConfig:
    lr: float = 5e-5  # trainable backbone weights (all of them, the top layers, or the LoRA adapter)
    head_lr: float = 1e-3  # the per-component linear heads
    weight_decay: float = 0.01
    epochs: int = 10  # Stage 1 upper bound; early stopping usually ends sooner
    batch_size: int = 16  # pairs per step (2x texts through the backbone)
    patience: int = 2  # epochs without held-out improvement before stopping
    heldout_fraction: float = 0.2
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
        if not 0.0 <= out.heldout_fraction < 1.0:
            raise UserError("heldout_fraction must be in [0, 1)", "e.g. 0.2")
        return out


def pairwise_loss(r_chosen: torch.Tensor, r_rejected: torch.Tensor, weights: torch.Tensor | None = None) -> torch.Tensor:
    """-log sigmoid(r+ - r-), averaged (weighted by `weights` when given)."""
    losses = -F.logsigmoid(r_chosen - r_rejected)
    if weights is None:
        return losses.mean()
    return (losses * weights).sum() / weights.sum().clamp(min=1e-12)


def _context_key(p: PreferencePair) -> str:
    return json.dumps(p.context, sort_keys=True, default=str)


def split_heldout(pairs: Sequence[PreferencePair], fraction: float, seed: int) -> tuple[list, list]:
    """(train, held-out): per component, a seeded `fraction` of its inputs (all their pairs) is held out.

    A component whose pairs all share one input is split by pairs instead (nothing else to hold out).
    """
    rng = random.Random(seed)
    train: list[PreferencePair] = []
    heldout: list[PreferencePair] = []
    if fraction <= 0:
        return list(pairs), []
    for _, group in sorted(by_component(pairs).items()):
        by_ctx: dict[str, list[PreferencePair]] = {}
        for p in group:
            by_ctx.setdefault(_context_key(p), []).append(p)
        units = list(by_ctx.values()) if len(by_ctx) >= 2 else [[p] for p in group]
        rng.shuffle(units)
        n_held = min(len(units) - 1, max(1, round(len(units) * fraction))) if len(units) >= 2 else 0
        for unit in units[:n_held]:
            heldout += unit
        for unit in units[n_held:]:
            train += unit
    return train, heldout


@dataclass
class _Item:
    component: str
    chosen: str
    rejected: str
    gap: float


def _render(model, pairs: Sequence[PreferencePair]) -> list[_Item]:
    items = []
    for name, group in by_component(pairs).items():
        contexts = [p.context for p in group]
        chosen = model.texts(name, contexts, [p.chosen for p in group])
        rejected = model.texts(name, contexts, [p.rejected for p in group])
        items += [_Item(name, c, r, p.gap) for p, c, r in zip(group, chosen, rejected, strict=True)]
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
    """(mean held-out loss, accuracy summary) in eval mode."""
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
    heldout: Sequence[PreferencePair] | None = None,
    buffer: ReplayBuffer | None = None,
) -> dict:
    """Train on `pairs` until held-out accuracy stops improving; the best epoch's weights are kept.

    Without `heldout`, a `cfg.heldout_fraction` split of `pairs` is held out (split_heldout, seeded
    by cfg.seed, so a caller can recompute it to run the LLM judge on the same pairs). The training
    pairs go into `buffer` when one is given. Returns the training history and held-out accuracy.
    """
    cfg = cfg if isinstance(cfg, TrainConfig) else TrainConfig.from_mapping(cfg)
    train_pairs, held_pairs = (list(pairs), list(heldout)) if heldout is not None else split_heldout(
        pairs, cfg.heldout_fraction, cfg.seed)
    if not train_pairs:
        raise UserError("no preference pairs to train the local reward model on",
                        "collect pairs first (more examples, more candidates, or a smaller epsilon)")
    started = time.perf_counter()
    train_items, held_items = _render(model, train_pairs), _render(model, held_pairs)
    rng = random.Random(cfg.seed)
    history: list[dict] = []
    steps = 0
    with _seeded(model, cfg.seed):
        optimizer = _optimizer(model, cfg.lr, cfg)
        best_key, best_state, best_epoch = None, _trainable_state(model), 0
        if held_items:  # for the record only: the untrained model is never the one kept
            loss0, acc0 = _evaluate(model, held_items, cfg.batch_size)
            history.append({"epoch": 0, "heldout_loss": loss0, "heldout_accuracy": acc0["mean"]})
        since_best = 0
        n_batches = math.ceil(len(train_items) / cfg.batch_size)
        model.train()
        with phase("LRF training · batches", cfg.epochs * n_batches) as advance:
            for epoch in range(1, cfg.epochs + 1):
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
                    row.update(heldout_loss=loss, heldout_accuracy=acc["mean"])
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
        "heldout_pairs": len(held_pairs),
        "epochs_run": history[-1]["epoch"] if history else 0,
        "best_epoch": best_epoch,
        "steps": steps,
        "history": history,
        "seconds": round(time.perf_counter() - started, 2),
    }
    if held_items:
        result["heldout_loss"], result["heldout"] = _evaluate(model, held_items, cfg.batch_size)
    return result


def adapt_stage2(
    model,
    fresh_pairs: Sequence[PreferencePair],
    buffer: ReplayBuffer,
    cfg: TrainConfig | Mapping | None = None,
) -> dict:
    """A few steps on fresh pairs mixed with replayed ones; the fresh pairs then join the buffer."""
    cfg = cfg if isinstance(cfg, TrainConfig) else TrainConfig.from_mapping(cfg)
    if not fresh_pairs:
        return {"steps": 0, "fresh_pairs": 0}
    started = time.perf_counter()
    batches = buffer.mixed_batches(list(fresh_pairs), cfg.stage2_batch_size, cfg.stage2_steps)
    fresh_items = _render(model, fresh_pairs)
    _, before = _evaluate(model, fresh_items, cfg.stage2_batch_size)
    losses = []
    with _seeded(model, cfg.seed + 1 + len(buffer)):
        optimizer = _optimizer(model, cfg.stage2_lr or cfg.lr, cfg)
        model.train()
        for batch in track(batches, "LRF adaptation · batches"):
            losses.append(_step(model, optimizer, _render(model, batch), cfg))
    model.eval()
    _, after = _evaluate(model, fresh_items, cfg.stage2_batch_size)
    n_fresh, n_replay = buffer.batch_shape(cfg.stage2_batch_size, len(fresh_pairs))
    buffer.add(fresh_pairs)
    return {
        "steps": len(batches),
        "fresh_pairs": len(fresh_pairs),
        "batch_fresh": n_fresh,
        "batch_replayed": n_replay,
        "losses": losses,
        "fresh_accuracy_before": before["mean"],
        "fresh_accuracy_after": after["mean"],
        "seconds": round(time.perf_counter() - started, 2),
    }
