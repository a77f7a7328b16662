"""Local optimizers by configuration kind (Algorithm 1, step 2) and what they share.

Every optimizer has the same entry point,

    propose(component, current_value, search_inputs, lrf, ctx, cfg, *, rng=None) -> Proposal

and changes nothing itself: it returns a candidate value for ONE component, scored by that
component's local reward r_k (`lrf.score(name, inputs, outputs) -> list[float]`) on the search
sample; the Algorithm 1 loop forms the candidate system and runs the validation gate.
`optimize_component` dispatches on `component.kind`. The optimizer modules are imported lazily,
so a run without a weights-kind component never imports trl.
"""
from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from optimas_cli.system.component import ConfigKind

if TYPE_CHECKING:
    from optimas_cli.system.component import Component
    from optimas_cli.system.context import RunContext


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
    component: Component, value: Any, inputs: Sequence[dict], lrf: Any, ctx: RunContext
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
    component: Component, value: Any, inputs: Sequence[dict], outputs: list[dict], lrf: Any, ctx: RunContext
) -> tuple[float, list[dict], list[float]]:
    """score_value's second half, for outputs executed elsewhere (several values at once: optim/prompt.py)."""
    ctx.ledger.record(component.name, len(inputs), ctx.phase, values_run=component.values_per_input(value),
                      charged=False)
    scores = [float(s) for s in lrf.score(component.name, list(inputs), outputs)]
    if len(scores) != len(inputs):
        raise RuntimeError(f"the local reward of {component.name!r} returned {len(scores)} scores for {len(inputs)} inputs")
    return statistics.fmean(scores), outputs, scores


def optimize_component(
    component: Component,
    current_value: Any,
    search_inputs: Sequence[dict],
    lrf: Any,
    ctx: RunContext,
    cfg: Mapping | None = None,
    *,
    rng: np.random.Generator | None = None,
    base_model_path: str | None = None,
) -> Proposal:
    """Run the local optimizer of the component's configuration kind.

    `cfg` may hold one section per kind (`prompt:`, `choice:`, `weights:`); the section of this
    component's kind is passed on. A cfg without such a section is passed on whole.
    """
    kind = component.kind
    section = setting(cfg, kind.value, None)
    kind_cfg = section if section is not None else (cfg or {})
    if kind is ConfigKind.PROMPT:
        from optimas_cli.optim import prompt

        return prompt.propose(component, current_value, search_inputs, lrf, ctx, kind_cfg, rng=rng)
    if kind is ConfigKind.CHOICE:
        from optimas_cli.optim import choice

        return choice.propose(component, current_value, search_inputs, lrf, ctx, kind_cfg, rng=rng)
    if kind is ConfigKind.WEIGHTS:
        from optimas_cli.optim import weights

        return weights.propose(
            component, current_value, search_inputs, lrf, ctx, kind_cfg, rng=rng, base_model_path=base_model_path
        )
    raise ValueError(f"component {component.name!r} has nothing to optimize (kind {kind.value!r}); do not schedule it")


__all__ = ["Proposal", "make_rng", "optimize_component", "score_outputs", "score_value", "setting"]
