"""Choice optimizer: a discrete configuration (a model, retriever k, aggregator weights).

Global choice (one value for every input): each value is scored by the mean r_k of the outputs
it produces on the search sample, and the update is SAMPLED with probability proportional to
exp(score / temperature) — not argmax — so near-ties between competitive values keep some
exploration alive (paper Section 4.2; seed Chapter 7). The validation gate then decides.

Per-instance choice (route each input to a value): the optimized configuration is the routing
policy {"route": "lrf"} — at inference `Component.execute` runs every value and keeps, per input,
the output with the highest r_k — so the LRF itself becomes part of the configuration, and the
loop must keep `ctx.lrf` current. Nothing is executed here; only the gate can judge a policy.

Settings: optim/settings.py ChoiceSettings (temperature 1.0 is the paper's plain exp(r_k)).
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from optimas_cli.errors import UserError
from optimas_cli.optim import Proposal, make_rng, score_value
from optimas_cli.optim.settings import ChoiceSettings, typed
from optimas_cli.system.component import LRF_ROUTE, Component
from optimas_cli.system.context import RunContext


def exp_probabilities(scores: Sequence[float], temperature: float) -> np.ndarray:
    """softmax(scores / temperature), computed stably (shifted by the max)."""
    if not temperature > 0:
        raise UserError(
            f"choice temperature must be positive, got {temperature!r}",
            "set the choice optimizer's `temperature` to a number > 0 (1.0 is the paper's exp(r_k))",
        )
    z = np.asarray(scores, dtype=np.float64) / float(temperature)
    weights = np.exp(z - z.max())
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
    probabilities = exp_probabilities(scores, cfg.temperature)
    picked = int(make_rng(rng, cfg, ctx).choice(len(values), p=probabilities))

    # Values may be unhashable (aggregator weight lists), so find the current one by equality.
    current = next((i for i, v in enumerate(values) if v == current_value), None)
    if current is not None:
        baseline = scores[current]
    else:  # a starting value outside the declared set (e.g. a hand-set default): score it too
        baseline = score_value(component, current_value, search_inputs, lrf, ctx)[0]
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
        },
    )
