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

When values are scored (optimizer.choice.route). `post` (above, the paper's) runs a value to score it: a
global choice runs every value on the search sample, a router every value on every input it routes, the
options times a run. `pre` scores (input, value) before anything runs, by the value scorer s_k trained from
the same pairs as r_k (lrf/value_scorer.py): a global choice's value scores mean s_k over the search inputs
(none of them run), and a router is {"route": "lrf_pre"}, which runs only the value s_k picks per input.
The default stays `post`: every figure the project reports was measured with it, and `pre` has not been
compared with it at matched runs (results.json's `routing` gives both routes' accuracy on the simulator).

Settings: optim/settings.py ChoiceSettings (scale=absolute with its default T = 1.0 is the paper's
plain exp(r_k)).
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from optimas_cli.errors import UserError
from optimas_cli.optim.proposal import Proposal, make_rng, score_value
from optimas_cli.optim.settings import ChoiceSettings, typed
from optimas_cli.system.component import LRF_PRE_ROUTE, LRF_ROUTE, Component
from optimas_cli.system.context import RunContext
from optimas_cli.system.local_reward import LocalReward


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
    lrf: LocalReward,
    ctx: RunContext,
    cfg: ChoiceSettings | Mapping | None = None,
    *,
    rng: np.random.Generator | None = None,
) -> Proposal:
    cfg = typed(ChoiceSettings, cfg, "optimizer.choice")
    pre = cfg.route == "pre"
    if pre and not (hasattr(lrf, "scores_values") and lrf.scores_values(component.name)):
        raise UserError(f"optimizer.choice.route=pre needs a value scorer for {component.name!r}, and this method's "
                        f"local reward ({type(lrf).__name__}) has none",
                        "use method.optimizer.choice.route=post, or a method that trains one (optimas)")
    if component.per_instance:
        route = LRF_PRE_ROUTE if pre else LRF_ROUTE
        return Proposal(
            value=dict(route),
            local_score=None,
            baseline_score=None,
            details={"policy": "argmax s_k(x, v) per input, before running" if pre else "argmax r_k per input",
                     "unchanged": current_value == route},
        )

    values = component.candidate_values()
    if pre:  # mean s_k over the search inputs, nothing run
        table = np.asarray(lrf.score_values(component.name, list(search_inputs), values), dtype=np.float64)
        scores = table.mean(axis=0).tolist()
    else:
        scores = [score_value(component, v, search_inputs, lrf, ctx)[0] for v in values]
    # Values may be unhashable (aggregator weight lists), so find the current one by equality.
    current = next((i for i, v in enumerate(values) if v == current_value), None)
    if current is not None:
        baseline = scores[current]
    elif pre:  # a starting value outside the declared set: the value scorer knows only the declared ones
        baseline = None
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
            "route": cfg.route,
            "unchanged": picked == current,  # the loop then keeps the current value without validating
        },
    )
