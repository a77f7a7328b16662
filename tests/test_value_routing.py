"""Routing before execution (issue 59): the value scorer s_k(x, v) ranks a choice's values before any runs, so a
{"route": "lrf_pre"} router runs one value per input; it learns from the same pairs as r_k; the old
{"route": "lrf"} route still runs and scores every value; the simulator's routers start on one value."""
from __future__ import annotations

import numpy as np
import pytest
from test_lrf_tiny_backbone import build_tiny_bert

from optimas_cli.errors import UserError
from optimas_cli.lrf.collect import collect_all
from optimas_cli.lrf.model import LocalRewardModel
from optimas_cli.lrf.oracle import OracleLRF
from optimas_cli.lrf.routing import routing_accuracy
from optimas_cli.lrf.text import component_infos
from optimas_cli.lrf.value_scorer import ValueScorerSettings, fit_value_scorers, value_pair_accuracy
from optimas_cli.optim.choice import propose
from optimas_cli.system import LRF_PRE_ROUTE, LRF_ROUTE, RunContext, RunLedger, SystemConfig
from optimas_pipelines.synthetic.system import build


@pytest.fixture(scope="module")
def bert(tmp_path_factory):
    return build_tiny_bert(tmp_path_factory.mktemp("bert"))


def routers(options: int = 8, **kw):
    return build(components=3, kinds="route", options=options, input_types=3, train_size=60, val_size=10,
                 test_size=90, instance=0, **kw)


def executions(pipeline, config, ctx) -> float:
    pipeline.system.run(pipeline.splits.test, config, ctx)
    return ctx.ledger.equivalent_runs()


@pytest.mark.parametrize("paired", [False, True])
def test_a_pre_route_runs_one_value_per_input_and_picks_what_its_scorer_ranks_first(paired):
    pipeline = routers()
    lrf = OracleLRF(pipeline)  # its value scorer is the exact expected reward: the picks are the per-input best
    routed = SystemConfig({name: dict(LRF_PRE_ROUTE) for name in pipeline.system.order})
    ctx = RunContext(ledger=RunLedger(len(pipeline.system)), lrf=lrf, phase="validation", paired_noise=paired)
    trajs = pipeline.system.run(pipeline.splits.test, routed, ctx)
    assert ctx.ledger.equivalent_runs() == len(pipeline.splits.test)  # one value of each component per input
    best = pipeline.info["per_type_best"]
    for t in trajs:
        kind = t.example["request"].split()[0]
        assert all(t.state[pipeline.instance.components[i].field].startswith(best[name][kind] + " on ")
                   for i, name in enumerate(pipeline.system.order))


def test_the_post_route_still_runs_every_value_and_picks_by_r_k():
    pipeline = routers()
    lrf = OracleLRF(pipeline)
    post = SystemConfig({name: dict(LRF_ROUTE) for name in pipeline.system.order})
    pre = SystemConfig({name: dict(LRF_PRE_ROUTE) for name in pipeline.system.order})
    n = len(pipeline.splits.test)
    assert executions(pipeline, post, RunContext(ledger=RunLedger(3), lrf=lrf)) == 8 * n
    # both routes pick the exact best value on every input (the oracle's r_k reads the value an output names)
    ran_post = pipeline.system.run(pipeline.splits.test, post, RunContext(ledger=RunLedger(3), lrf=lrf))
    ran_pre = pipeline.system.run(pipeline.splits.test, pre, RunContext(ledger=RunLedger(3), lrf=lrf))
    assert [t.state for t in ran_post] == [t.state for t in ran_pre]


def test_the_simulators_routers_start_on_one_value_per_input():
    pipeline = routers(options=32)
    default = pipeline.system.default_config()
    assert executions(pipeline, default, RunContext(ledger=RunLedger(3))) == len(pipeline.splits.test)
    # the leaderboard's top value, run alone, is what the heuristic route picked by running all 32
    heuristic = SystemConfig({name: {"route": "heuristic"} for name in pipeline.system.order})
    ran = [pipeline.system.run(pipeline.splits.test, c, RunContext(ledger=RunLedger(3))) for c in (default, heuristic)]
    assert [t.state for t in ran[0]] == [t.state for t in ran[1]]


def learned(bert, pipeline):
    """A reward model on the tiny backbone whose value scorers learned from Stage 1's Monte Carlo pairs."""
    ctx = RunContext(ledger=RunLedger(len(pipeline.system)), phase="lrf_collection")
    pairs = collect_all(pipeline.system, pipeline.system.default_config(), pipeline.splits.train, ctx, pipeline.metric,
                        num_candidates=3, mc_repeats=1)
    flat = [p for ps in pairs.values() for p in ps]
    model = LocalRewardModel(bert, component_infos(pipeline.system), device="cpu", train_backbone="heads")
    fitted = fit_value_scorers(model, pipeline.system, flat, ValueScorerSettings())
    assert all(f["pairs"] > 100 for f in fitted.values())
    return model, flat


def test_the_value_scorer_learns_each_input_types_best_value_from_pairs(bert):
    """Each input type has its own best value at every router; a leaderboard (one value for all) cannot pick
    it for every type, an input-blind or sign-flipped scorer no better than that."""
    pipeline = routers()
    model, pairs = learned(bert, pipeline)
    assert value_pair_accuracy(model, pairs)["mean"] > 0.8  # on its own training pairs: it fits them
    measured = routing_accuracy(pipeline, pipeline.system.default_config(), pipeline.splits.test, model)["mean"]
    assert measured["oracle"]["accuracy"] == 1.0 and measured["random"]["accuracy"] == pytest.approx(1 / 8)
    assert measured["pre"]["accuracy"] > measured["leaderboard"]["accuracy"] + 0.2
    assert measured["pre"]["regret"] < measured["leaderboard"]["regret"]


def test_value_scorers_survive_save_and_load(bert, tmp_path):
    pipeline = routers()
    model, _ = learned(bert, pipeline)
    inputs = [{"request": "legal request 7"}, {"request": "travel request 8"}]
    values = pipeline.system.components["step_00"].candidate_values()
    loaded = LocalRewardModel.load(model.save(tmp_path / "lrf"), device="cpu")
    assert np.allclose(loaded.score_values("step_00", inputs, values), model.score_values("step_00", inputs, values))
    loaded.load_state_dict(model.state_dict())  # a Stage 2 restore and a route revert load whole state dicts


def test_the_choice_optimizer_scores_before_running_under_route_pre(bert):
    pipeline = build(components=3, kinds="choice", options=8, input_types=3, train_size=60, val_size=10, test_size=10)
    model, _ = learned(bert, pipeline)
    comp, search = pipeline.system.components["step_01"], [{"request": "legal request 1", "draft_00": "x on legal: solid"}]
    ctx = RunContext(ledger=RunLedger(3), phase="local_optimization")
    proposal = propose(comp, comp.default, search, model, ctx, {"route": "pre"}, rng=np.random.default_rng(0))
    assert ctx.ledger.equivalent_runs() == 0 and proposal.details["route"] == "pre"
    assert proposal.details["scores"] == pytest.approx(np.mean(model.score_values("step_01", search, comp.candidate_values()), axis=0))
    router = routers().system.components["step_00"]
    assert propose(router, router.default, search, OracleLRF(routers()), ctx, {"route": "pre"}).value == LRF_PRE_ROUTE


def test_route_pre_without_a_value_scorer_is_one_line():
    class OutputsOnly:
        def score(self, name, inputs, outputs):
            return [0.0] * len(inputs)

    router = routers().system.components["step_00"]
    with pytest.raises(UserError, match="optimizer.choice.route=pre needs a value scorer"):
        propose(router, router.default, [{"request": "legal request 1"}], OutputsOnly(), RunContext(ledger=RunLedger(3)),
                {"route": "pre"})
    with pytest.raises(UserError, match="unknown choice route"):
        propose(router, router.default, [], OutputsOnly(), RunContext(ledger=RunLedger(3)), {"route": "before"})
