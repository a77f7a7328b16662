"""Choice optimizer: a discrete configuration (a model, retriever k, aggregator weights).

Global choice (one value for every input): each value is scored by the mean r_k of the outputs
it produces on the search sample, and the update is SAMPLED with probability proportional to
exp(score / temperature) — not argmax — so near-ties between competitive values keep some
exploration alive (paper Section 4.2; seed Chapter 7). The validation gate then decides.

On which scale (optimizer.choice.scale). `absolute` is the paper's: exp(mean r_k / T), T = 1.0.
But r_k is a reward share in [0, 1] whose values differ by ~0.01, so at T = 1 the draw is nearly
uniform: the synthetic benchmark's exact oracle proposed a value its own score ranks below the
current one in 54-59% of iterations, and with 128 options it ran exactly as a random reward did.
`relative` (the default) fixes both halves of that: (1) scores are put on their own spread,
(s - max) / (max - min), so T is a fraction of how far apart the candidates are, whatever r_k's
units or the number of options (equal scores: a uniform draw); (2) only values scoring at least
the current one's are drawn (the current one included), so a reward never spends a validation
pass on a value it predicts loses; drawing the current value leaves it unchanged, which the loop
keeps without validating. Its default T = 0.1 of the spread, chosen by what it means rather than
tuned on results: a value a tenth of the spread behind the best keeps e^-1 ≈ 0.37 of the best's
weight, a fifth behind 0.14, half behind 0.007. Values a learned r_k cannot tell apart share the
draw; values it clearly ranks lower are seldom tried.

Per-instance choice (route each input to a value): the optimized configuration is the routing
policy {"route": "lrf"} — at inference `Component.execute` runs every value and keeps, per input,
the output with the highest r_k — so the LRF itself becomes part of the configuration, and the
loop must keep `ctx.lrf` current. Nothing is executed here; only the gate can judge a policy.

Settings: optim/settings.py ChoiceSettings (scale=absolute with its default T = 1.0 is the paper's
plain exp(r_k)).
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from optimas_cli.optim import Proposal, make_rng, score_value
from optimas_cli.optim.settings import ChoiceSettings, typed
from optimas_cli.system.component import LRF_ROUTE, Component
from optimas_cli.system.context import RunContext


def exp_probabilities(scores: Sequence[float], cfg: ChoiceSettings, current: int | None = None) -> np.ndarray:
    """p ∝ exp(z / temperature), z the scores on cfg.scale (module docstring), computed stably (shifted by
    the max). Under `relative`, values scoring below scores[current] get 0 (None: no current among them)."""
    z = np.asarray(scores, dtype=np.float64)
    allowed = np.ones(len(z), dtype=bool)
    if cfg.scale == "relative":
        if current is not None:
            allowed = z >= z[current]
        spread = z.max() - z.min()
        z = (z - z.max()) / spread if spread > 0 else np.zeros_like(z)
    z = z / float(cfg.temperature)
    weights = np.exp(z - z.max()) * allowed  # the best value is always allowed: it is at least the current
    return weights / weights.sum()


def propose(
    component: Component,
    current_value: Any,
    search_inputs: Sequence[dict],
    lrf: Any,
    ctx: RunContext,
    cfg: ChoiceSettings | Mapping | None = None,
    *,
    rng: np.random.Generator | None = None,
) -> Proposal:
    cfg = typed(ChoiceSettings, cfg, "optimizer.choice")
    if component.per_instance:
        return Proposal(
            value=dict(LRF_ROUTE),
            local_score=None,
            baseline_score=None,
            details={"policy": "argmax r_k per input", "unchanged": current_value == LRF_ROUTE},
        )

    values = component.candidate_values()
    scores = [score_value(component, v, search_inputs, lrf, ctx)[0] for v in values]
    # Values may be unhashable (aggregator weight lists), so find the current one by equality.
    current = next((i for i, v in enumerate(values) if v == current_value), None)
    if current is not None:
        baseline = scores[current]
    else:  # a starting value outside the declared set (e.g. a hand-set default): score it too
        baseline = score_value(component, current_value, search_inputs, lrf, ctx)[0]
        if cfg.scale == "relative":  # it is among the values drawn: kept when nothing scores as well
            values, scores, current = [*values, current_value], [*scores, baseline], len(values)
    probabilities = exp_probabilities(scores, cfg, current)
    picked = int(make_rng(rng, cfg, ctx).choice(len(values), p=probabilities))
    return Proposal(
        value=values[picked],
        local_score=scores[picked],
        baseline_score=baseline,
        details={
            "values": values,
            "scores": scores,
            "probabilities": probabilities.tolist(),
            "picked_index": picked,
            "current_index": current,
            "scale": cfg.scale,
            "temperature": cfg.temperature,
            "unchanged": picked == current,  # the loop then keeps the current value without validating
        },
    )
