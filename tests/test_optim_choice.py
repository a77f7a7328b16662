"""Choice optimizer: exp(r_k / T) sampling for global choices, the LRF route for per-instance ones.

The scales themselves (relative vs the paper's absolute, the exact oracle): test_optim_choice_scale.py."""
from __future__ import annotations

import math

import numpy as np
import pytest

from optimas_cli.errors import UserError
from optimas_cli.optim import optimize_component
from optimas_cli.optim.choice import exp_probabilities, propose
from optimas_cli.optim.settings import ChoiceSettings
from optimas_cli.system.component import HEURISTIC_ROUTE, LRF_ROUTE, Component, ConfigKind
from optimas_cli.system.context import RunContext
from optimas_cli.system.ledger import RunLedger


class Retriever(Component):
    """A global choice: returns k passages; counts its executions."""

    def __init__(self, choices=(1, 3, 5), per_instance=False):
        super().__init__(
            name="retriever", description="retrieves k passages", inputs=("q",), outputs=("passages",),
            kind=ConfigKind.CHOICE, default=choices[0], choices=choices, per_instance=per_instance,
        )
        self.calls = 0

    def forward(self, inputs, value, ctx):
        self.calls += 1
        return [{"passages": [f"{x['q']}-{i}" for i in range(value)]} for x in inputs]


class PassageCountReward:
    """r_k rewards a fixed number of passages per value, so the expected scores are known."""

    def __init__(self, reward_by_k):
        self.reward_by_k, self.calls = reward_by_k, 0

    def score(self, name, inputs, outputs):
        self.calls += 1
        return [self.reward_by_k[len(o["passages"])] for o in outputs]


SEARCH = [{"q": "a"}, {"q": "b"}]


def _ctx():
    return RunContext(ledger=RunLedger(3), phase="local_optimization")


def test_scores_and_probabilities_are_the_softmax_of_mean_local_reward():
    component, lrf = Retriever(), PassageCountReward({1: 0.2, 3: 0.9, 5: 0.5})
    ctx = _ctx()
    proposal = propose(component, 1, SEARCH, lrf, ctx, {"scale": "absolute", "temperature": 0.5},
                       rng=np.random.default_rng(0))
    assert proposal.details["scores"] == pytest.approx([0.2, 0.9, 0.5])
    weights = [math.exp(s / 0.5) for s in (0.2, 0.9, 0.5)]
    assert proposal.details["probabilities"] == pytest.approx([w / sum(weights) for w in weights])
    assert proposal.baseline_score == pytest.approx(0.2)  # the current value k=1
    assert proposal.local_score == pytest.approx(proposal.details["scores"][proposal.details["picked_index"]])
    assert component.calls == 3 and lrf.calls == 3  # one execution and one scoring per value, nothing more
    assert ctx.ledger.executions["local_optimization"]["retriever"] == 3 * len(SEARCH)


@pytest.mark.parametrize("cfg", [{"scale": "absolute"}, {"scale": "relative", "temperature": 1.0}])
def test_sampling_frequencies_match_the_softmax_on_a_fixed_seed(cfg):
    component, lrf = Retriever(), PassageCountReward({1: 0.1, 3: 1.0, 5: 0.6})
    rng, draws = np.random.default_rng(1234), 5000
    picked = [propose(component, 1, SEARCH, lrf, _ctx(), cfg, rng=rng).value for _ in range(draws)]
    expected = exp_probabilities([0.1, 1.0, 0.6], ChoiceSettings(**cfg), current=0)
    for value, p in zip((1, 3, 5), expected, strict=True):
        # 5,000 draws: one standard deviation is at most 0.0071; allow ~3.5 of them.
        assert picked.count(value) / draws == pytest.approx(p, abs=0.025)
    assert len(set(picked)) == 3, "sampling, not argmax: every value is drawn sometimes"


def test_same_seed_same_draws_and_low_temperature_is_nearly_argmax():
    component, lrf = Retriever(), PassageCountReward({1: 0.1, 3: 1.0, 5: 0.6})
    a = [optimize_component(component, 1, SEARCH, lrf, _ctx(), {"seed": 7}).value for _ in range(3)]
    b = [optimize_component(component, 1, SEARCH, lrf, _ctx(), {"seed": 7}).value for _ in range(3)]
    assert a == b
    rng = np.random.default_rng(0)
    cold = [propose(component, 1, SEARCH, lrf, _ctx(), {"temperature": 0.01}, rng=rng).value for _ in range(50)]
    assert cold == [3] * 50


def test_unhashable_values_and_a_current_value_outside_the_set():
    class Aggregator(Component):
        def forward(self, inputs, value, ctx):
            return [{"score": sum(w * x["f"][i] for i, w in enumerate(value))} for x in inputs]

    agg = Aggregator(
        name="agg", description="weighted sum", inputs=("f",), outputs=("score",), kind=ConfigKind.CHOICE,
        choices=([1.0, 0.0], [0.0, 1.0]),
    )

    class ScoreIsReward:
        def score(self, name, inputs, outputs):
            return [o["score"] for o in outputs]

    inputs = [{"f": [0.2, 0.8]}]
    absolute = propose(agg, [0.5, 0.5], inputs, ScoreIsReward(), _ctx(), {"scale": "absolute"},
                       rng=np.random.default_rng(0))
    assert absolute.details["current_index"] is None  # the paper's draw: the declared values only
    assert absolute.baseline_score == pytest.approx(0.5)
    assert absolute.value in ([1.0, 0.0], [0.0, 1.0])
    # relative: the current value joins the draw, and [1, 0] (0.2, below its 0.5) leaves it
    relative = propose(agg, [0.5, 0.5], inputs, ScoreIsReward(), _ctx(), {}, rng=np.random.default_rng(0))
    assert relative.details["values"] == [[1.0, 0.0], [0.0, 1.0], [0.5, 0.5]]
    assert relative.details["current_index"] == 2 and relative.details["probabilities"][0] == 0
    assert relative.value in ([0.0, 1.0], [0.5, 0.5])


def test_per_instance_choice_proposes_the_lrf_route_without_running_anything():
    component, lrf = Retriever(per_instance=True), PassageCountReward({1: 0.1, 3: 1.0, 5: 0.6})
    proposal = optimize_component(component, dict(HEURISTIC_ROUTE), SEARCH, lrf, _ctx(), {})
    assert proposal.value == LRF_ROUTE
    assert proposal.details["unchanged"] is False
    assert component.calls == 0 and lrf.calls == 0
    assert optimize_component(component, dict(LRF_ROUTE), SEARCH, lrf, _ctx(), {}).details["unchanged"] is True


@pytest.mark.parametrize("cfg, match", [({"temperature": 0}, "temperature"), ({"scale": "softmax"}, "scale")])
def test_bad_settings_are_a_user_error(cfg, match):
    with pytest.raises(UserError, match=match):
        propose(Retriever(), 1, SEARCH, PassageCountReward({1: 0, 3: 0, 5: 0}), _ctx(), cfg)
