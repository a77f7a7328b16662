"""Shortlist and race (optim/race.py): successive halving over the candidates r_k ranks highest, on paired validation
minibatches; the winner faces the strict gate, every run is counted against the cap, and a winner r_k did not rank
first (and only that) makes lazy adaptation re-collect the component's pairs."""
from __future__ import annotations

import pytest

from optimas_cli.optim.loop import LoopSettings, OptimasLoop
from optimas_cli.optim.race import Evaluated, example_runs, race, rungs
from optimas_cli.optim.settings import RaceSettings
from optimas_cli.system import RunContext, RunLedger
from optimas_cli.system.caps import BudgetCaps
from optimas_cli.system.run_folder import RunFolder
from tests.test_loop import CountingStage2, make_pipeline


def test_rungs_end_a_reduction_factor_short_of_the_full_set_and_count_what_they_run():
    eta3 = RaceSettings(shortlist=3)
    assert rungs(3, 20, eta3) == [7] and example_runs(3, 20, eta3) == 3 * 7 + 13  # 1.7 passes, not 3
    assert rungs(9, 27, eta3) == [3, 9] and example_runs(9, 27, eta3) == 9 * 3 + 3 * 6 + 18
    assert rungs(3, 20, RaceSettings(shortlist=3, reduction_factor=2)) == [5, 10]
    assert rungs(4, 20, RaceSettings(shortlist=4, min_examples=4, reduction_factor=2)) == [4, 8]


def test_the_race_keeps_the_best_by_summed_validation_and_says_when_it_overrules_the_local_reward():
    truth = {"a": 0.2, "b": 0.9, "c": 0.5}
    ran = []

    def evaluate(value, lo, hi):
        ran.append((value, lo, hi))
        return Evaluated([None] * (hi - lo), [truth[value]] * (hi - lo), [])

    settings = RaceSettings(shortlist=3)
    result = race(["a", "b", "c"], "c", [0.5] * 9, 9, settings, evaluate, lambda value, n: True)
    assert result.winner == "b" and result.contradicts_lrf and result.head.scores == [0.9] * 3
    assert sorted(ran) == [("a", 0, 3), ("b", 0, 3)]  # the current value "c" raced on its known scores
    agrees = race(["b", "a", "c"], "c", [0.5] * 9, 9, settings, evaluate, lambda value, n: True)
    assert agrees.winner == "b" and not agrees.contradicts_lrf


class Ranks:
    """A stand-in local reward that ranks the pick's values in a fixed order (best first)."""

    def __init__(self, order):
        self.order = order

    def score(self, name, inputs, outputs):
        return [float(len(self.order) - self.order.index(o["value"])) for o in outputs]


def race_loop(tmp_path, order, iterations=2, cap=None):
    pipeline, _ = make_pipeline()  # up -> pick; REWARD {0: 0.5, 1: 0.5, 2: 0.2, 3: 0.9}; 5 validation rows
    ctx = RunContext(ledger=RunLedger(len(pipeline.system)))
    if cap is not None:
        ctx.caps = BudgetCaps(max_runs=cap, spent=lambda: {"max_runs": ctx.ledger.equivalent_runs()})
    stage2 = CountingStage2(pipeline.system)
    settings = LoopSettings.from_budget(_Budget(iterations), "round_robin", {"race": {"shortlist": 3}}, 0,
                                        str(tmp_path / "adapters"), adaptation="lazy")
    loop = OptimasLoop(pipeline, pipeline.splits.train, pipeline.splits.val, ctx, Ranks(order), settings,
                       RunFolder(tmp_path), adapt=stage2)
    return loop, ctx, stage2


class _Budget:
    def __init__(self, iterations):
        self.iterations, self.search_size, self.num_candidates, self.num_steps = iterations, 3, 1, 1
        self.max_runs_from = None


def test_a_race_the_local_reward_ranked_right_is_not_followed_by_a_recollection(tmp_path):
    loop, ctx, stage2 = race_loop(tmp_path, [3, 0, 1, 2])
    config, history = loop.run()
    first, second = history
    assert first.proposal == 3 and first.accepted and first.details["race"]["contradicts_lrf"] is False
    assert second.note == "the race kept the current value" and stage2.calls == []


def test_a_race_that_overrules_the_local_reward_picks_the_best_spends_what_it_reports_and_recollects(tmp_path):
    loop, ctx, stage2 = race_loop(tmp_path, [2, 1, 3, 0])  # r_k ranks the worst value first, the best third
    config, history = loop.run()
    first, second = history
    race_record = first.details["race"]
    assert first.proposal == 3 and first.accepted and config["pick"] == 3  # the true best of the shortlist 2, 1, 3
    assert race_record["contradicts_lrf"] is True and race_record["winner_lrf_rank"] == 2
    # 3 contenders on the first 2 of 5 validation rows, each re-running `pick` (1 of 2 components): 3 runs;
    # then the winner on the other 3 rows (1.5); the opening pass ran the whole system on all 5 (5). Iteration 2
    # races 2 and 1 against the current 3, which races on its known scores (2 runs), and keeps 3 unvalidated.
    assert race_record["runs"] == pytest.approx(3 * 2 / 2) and second.details["race"]["runs"] == pytest.approx(2)
    assert ctx.ledger.equivalent_runs("validation") == pytest.approx(5 + 3 + 1.5 + 2)
    assert stage2.calls == [(["pick"], 2)]  # the next time `pick` is optimized, and only because of the race
    assert "contradicted" in second.details["adaptation"]["trigger"]


def test_a_race_never_crosses_the_run_cap(tmp_path):
    # opening 5 + 3 runs, the choice's local search 4 values x 3 inputs / 2 = 6; the race needs 3 more: 2 fit
    loop, ctx, _ = race_loop(tmp_path, [2, 1, 3, 0], iterations=1, cap=16.0)
    config, history = loop.run()
    assert ctx.ledger.equivalent_runs() <= 16.0 and history[-1].note.startswith("race stopped")
    assert config["pick"] == 0 and ctx.caps.stopped.cap == "max_runs"


class Inverted:
    """The synthetic pipeline's exact local reward, negated: it ranks every value in the wrong order."""

    def __init__(self, pipeline):
        self.exact, self.config = pipeline.local_reward_oracle, pipeline.system.default_config()

    def score(self, name, inputs, outputs):
        return [-s for s in self.exact.score(name, self.config, inputs, outputs)]


def test_on_the_synthetic_pipeline_the_race_finds_the_exact_best_value_the_local_reward_ranked_last(tmp_path):
    from optimas_pipelines.synthetic import exact
    from optimas_pipelines.synthetic.system import build

    pipeline = build(components=3, kinds="choice", options=6, noise=0.0, marks=32, instance=1, val_size=30)
    name, config = pipeline.system.order[0], pipeline.system.default_config()
    truth = {v: exact.expected_score(pipeline.instance, config.replace(name, v), pipeline.splits.val)
             for v in pipeline.system.components[name].choices}
    settings = LoopSettings.from_budget(_Budget(1), "round_robin", {"race": {"shortlist": 6}}, 0,
                                        str(tmp_path / "adapters"))
    ctx = RunContext(ledger=RunLedger(len(pipeline.system)))
    loop = OptimasLoop(pipeline, pipeline.splits.train, pipeline.splits.val, ctx, Inverted(pipeline), settings,
                       RunFolder(tmp_path))
    _, (entry,) = loop.run()
    best = max(truth, key=truth.get)
    assert entry.details["race"]["winner_lrf_rank"] == 5  # of 6: the negated exact reward ranked it last
    assert entry.proposal == best and entry.details["race"]["contradicts_lrf"]
    assert entry.accepted == (truth[best] > truth[config[name]])
