"""pipeline=synthetic: the simulator's optimum, its exact expectations, its noise, and the loop on it.

The closed-form optimum is checked against an exhaustive search; the closed-form expectation against
the mean of many simulated runs; the end-to-end run (real MiniLM reward model) must reach the optimum.
"""
from __future__ import annotations

import itertools
import statistics

import pytest
from hydra import compose, initialize_config_dir

from optimas_cli.conf import CONF_DIR
from optimas_cli.flows.setup import budget_splits, build_budget, build_context, build_method, build_pipeline
from optimas_cli.methods.coordinate_ascent import CoordinateAscent
from optimas_cli.optim.prompt_pool import add_constraint, pool_drafts, shorten
from optimas_cli.system import RunContext, RunLedger
from optimas_cli.system.budget import Budget
from optimas_cli.system.caps import BudgetCaps
from optimas_cli.system.run_folder import RunFolder
from optimas_pipelines.synthetic import exact
from optimas_pipelines.synthetic.components import SHAKY, SOLID, instruction, strategy_of
from optimas_pipelines.synthetic.spec import UNGUIDED
from optimas_pipelines.synthetic.system import build


def ctx_for(pipe, **changes) -> RunContext:
    return RunContext(ledger=RunLedger(len(pipe.system))).replace(**changes)


@pytest.mark.parametrize("shape", ["chain", "tree", "diamond"])
def test_the_closed_form_optimum_is_the_exhaustive_one(shape):
    pipe = build(components=4, shape=shape, options=3, input_types=2, coupling=0.8, instance=5, test_size=60)
    inst, rows = pipe.instance, pipe.splits.test
    per_component = []
    for spec in inst.components:
        if spec.kind == "route":  # a router may pick any option for each input type
            per_component.append(list(itertools.product(spec.values, repeat=len(inst.types))))
        else:
            per_component.append([(v,) * len(inst.types) for v in (*spec.values, UNGUIDED)])
    best = 0.0
    for combo in itertools.product(*per_component):
        score = statistics.fmean(
            exact.expected_reward(inst, {s.name: c[exact.type_index(inst, ex)] for s, c in zip(inst.components, combo, strict=True)},
                                  exact.type_index(inst, ex))
            for ex in rows)
        best = max(best, score)
    assert exact.optimum_score(inst, rows) == pytest.approx(best)
    assert pipe.info["optimum_score"]["test"] == pytest.approx(best)
    assert pipe.info["initial_score"]["test"] < best - 0.05  # room to optimize


@pytest.mark.parametrize("noise, temperature", [(0.0, None), (1.0, None), (0.3, 0.9)])
def test_the_simulated_mean_matches_the_exact_expectation(noise, temperature):
    pipe = build(components=6, shape="diamond", noise=noise, coupling=0.7, instance=2, test_size=999)
    rows, config = pipe.splits.test, pipe.system.default_config()
    realized = []
    for repeat in range(4 if temperature else 1):
        trajs = pipe.system.run(rows, config, ctx_for(pipe, temperature=temperature, sample_index=repeat))
        realized += [pipe.metric(t.example, t.final(pipe.system.outputs)) for t in trajs]
        # reading the routers' picks back from the drafts gives the same expectation
        assert exact.expected_of_run(pipe.instance, rows, [t.steps for t in trajs]) == pytest.approx(
            exact.expected_score(pipe.instance, config, rows))
    expected = exact.expected_score(pipe.instance, config, rows)
    standard_error = statistics.pstdev(realized) / len(realized) ** 0.5
    assert abs(statistics.fmean(realized) - expected) < 4 * standard_error + 1e-3


def test_outputs_are_short_texts_and_the_noise_follows_the_sampling_seed():
    pipe = build(components=3, noise=0.5, instance=1)
    rows, config = pipe.splits.val[:20], pipe.system.default_config()

    def drafts(**changes):
        return [t.state["draft_02"] for t in pipe.system.run(rows, config, ctx_for(pipe, **changes))]

    greedy = drafts()
    assert greedy == drafts(seed=7)  # greedy output does not depend on the run seed, like a greedy LM's
    for text in greedy:
        head, marks = text.split(": ")
        assert " on " in head and set(marks.split()) <= {SOLID, SHAKY} and len(marks.split()) == 8
        assert not any(ch.isdigit() for ch in text)  # the quality is never written as a number
    sampled = drafts(temperature=0.9, sample_index=3)
    assert sampled == drafts(temperature=0.9, sample_index=3)  # reproducible per (seed, sample index)
    assert sampled != drafts(temperature=0.9, sample_index=4) != greedy
    assert sampled != drafts(temperature=0.9, sample_index=3, seed=1)
    component = pipe.system.components["step_00"]
    assert component.is_stochastic(0.9) and not component.is_stochastic(0.0)


def test_every_instruction_text_maps_to_a_strategy_the_pool_edits_keep():
    pipe = build(components=3, instance=3)
    prompt = pipe.system.components["step_00"]
    strategy = strategy_of(prompt.default)
    assert strategy in prompt.spec.values and strategy_of(instruction("checklist")) == "checklist"
    for draft in pool_drafts(prompt, prompt.default, "Example of a good reply:\nstepwise on legal: solid"):
        if draft.source != "alternative":
            assert strategy_of(draft.text) == strategy  # constrain / shorten / example keep the strategy
    assert strategy_of(add_constraint(prompt.default, ("Be brief.",))) == strategy
    assert shorten(prompt.default) and strategy_of(shorten(prompt.default)) == strategy
    assert strategy_of("Answer the question.") == UNGUIDED and strategy_of(None) == UNGUIDED


def test_coordinate_ascent_climbs_to_the_best_global_configuration_and_honours_the_run_cap(tmp_path):
    pipe = build(components=4, noise=0.0, coupling=0.5, input_types=1, instance=4, val_size=30)
    budget = Budget.from_mapping({"name": "t", "train_size": 5, "val_size": 30, "test_size": 30, "search_size": 5,
                                  "num_candidates": 2, "num_steps": 1, "fresh_size": 1, "iterations": 1})
    ctx = ctx_for(pipe)
    outcome = CoordinateAscent(budget, seed=0).optimize(pipe, pipe.splits, ctx, RunFolder(tmp_path / "free"))
    # one input type: a global choice is as good as a route, so the optimum is reachable without routes
    assert exact.expected_score(pipe.instance, outcome.config, pipe.splits.test) == pytest.approx(
        exact.optimum_score(pipe.instance, pipe.splits.test))
    assert outcome.extras["coordinate_ascent"]["converged"]
    capped = ctx_for(pipe)
    capped.caps = BudgetCaps(max_runs=80.0, spent=lambda: {"max_runs": capped.ledger.equivalent_runs()})
    short = CoordinateAscent(budget, seed=0).optimize(pipe, pipe.splits, capped, RunFolder(tmp_path / "capped"))
    assert capped.ledger.equivalent_runs() <= 80.0 and not short.extras["coordinate_ascent"]["converged"]
    assert len(short.history) < len(outcome.history)



@pytest.mark.real_model
def test_optimas_reaches_the_known_optimum_on_a_small_system(tmp_path):
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose("config", overrides=[
            "pipeline=synthetic", "pipeline.components=3", "pipeline.options=3", "pipeline.input_types=2",
            "pipeline.noise=0.0", "pipeline.instance=0", "method=optimas", "method.scheduler=round_robin",
            "budget=smoke", "budget.train_size=8", "budget.val_size=20", "budget.test_size=100",
            "budget.search_size=8", "budget.iterations=6", "budget.num_candidates=4", "budget.num_steps=2", "proposer=pool", "lrf.judge.enabled=false",
            "lrf.train_backbone=heads", "lrf.min_steps=30", "lrf.train.batch_size=8"])
    pipe = build_pipeline(cfg)
    splits = budget_splits(pipe, build_budget(cfg))
    folder = RunFolder(tmp_path)
    ctx = build_context(cfg, pipe, folder)
    outcome = build_method(cfg, build_budget(cfg)).optimize(pipe, splits, ctx, folder)
    trajs = pipe.system.run(splits.test, outcome.config, ctx.replace(lrf=outcome.lrf, phase="test"))
    reached = exact.expected_of_run(pipe.instance, splits.test, [t.steps for t in trajs])
    initial = exact.expected_score(pipe.instance, pipe.system.default_config(), splits.test)
    assert reached == pytest.approx(exact.optimum_score(pipe.instance, splits.test)) and reached > initial + 0.05
