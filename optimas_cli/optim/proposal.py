"""What every local optimizer returns and how it scores a value: a Proposal, r_k on the search sample.

The optimizers (prompt.py, choice.py, weights.py) import these; `optimas_cli.optim` dispatches onto the
optimizers, so the shared part lives here, not in the package that imports them (an import circle).
"""
from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from optimas_cli.system.component import Component
    from optimas_cli.system.context import RunContext
    from optimas_cli.system.local_reward import LocalReward


@dataclass
class Proposal:
    """One candidate configuration value for one component, with its local evidence.

    `local_score` is the mean r_k of the proposed value's outputs on the search sample and
    `baseline_score` the same for the current value (None where the optimizer measured nothing,
    e.g. a per-instance routing policy, which only the validation gate can judge).
    """

    value: Any
    local_score: float | None
    baseline_score: float | None
    details: dict = field(default_factory=dict)


def setting(cfg: Mapping | None, key: str, default: Any) -> Any:
    """A key of a plain dict or an OmegaConf DictConfig (both have .get), or the default."""
    if cfg is None:
        return default
    value = cfg.get(key, default)
    return default if value is None else value


def make_rng(rng: np.random.Generator | None, cfg: Any, ctx: RunContext) -> np.random.Generator:
    """The loop's Generator when it passes one (so successive iterations draw fresh samples),
    else one seeded from the settings (a mapping or a typed settings object with `seed`),
    reproducible for a given seed and sample index."""
    if rng is not None:
        return rng
    seed = setting(cfg, "seed", None) if cfg is None or isinstance(cfg, Mapping) else getattr(cfg, "seed", None)
    return np.random.default_rng([int(ctx.seed if seed is None else seed), int(ctx.sample_index)])


def score_value(
    component: Component, value: Any, inputs: Sequence[dict], lrf: LocalReward, ctx: RunContext
) -> tuple[float, list[dict], list[float]]:
    """Run ONE component under `value` on `inputs` and score its outputs with r_k.

    Returns (mean r_k, outputs, per-input r_k). Nothing else of the system runs; the execution
    is recorded in the ledger (a partial run of 1 of K components per input) under ctx.phase, as
    local scoring (executed, not charged by the paper's accounting).
    """
    if not inputs:
        raise ValueError(f"component {component.name!r}: local optimization needs at least one search input")
    return score_outputs(component, value, inputs, component.execute(list(inputs), value, ctx), lrf, ctx)


def score_outputs(
    component: Component, value: Any, inputs: Sequence[dict], outputs: list[dict], lrf: LocalReward, ctx: RunContext
) -> tuple[float, list[dict], list[float]]:
    """score_value's second half, for outputs executed elsewhere (several values at once: optim/prompt.py)."""
    ctx.ledger.record(component.name, len(inputs), ctx.phase, values_run=component.values_per_input(value),
                      charged=False)
    scores = [float(s) for s in lrf.score(component.name, list(inputs), outputs)]
    if len(scores) != len(inputs):
        raise RuntimeError(f"the local reward of {component.name!r} returned {len(scores)} scores for {len(inputs)} inputs")
    return statistics.fmean(scores), outputs, scores
