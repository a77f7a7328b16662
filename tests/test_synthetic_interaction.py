"""pipeline=synthetic with interaction=on and up to 128 options, its exact optimum, and lrf=oracle.

The elimination optimum is checked against brute force on small instances (both modes, every shape,
global and per-type components); interaction=on must really make a component's best value depend on
its parent's value and on the input type, and defeat a single coordinate sweep on some instance; the
oracle's scores must equal the exact expected reward of each output (metric mean and sink); an Optimas
run on a 128-option instance with lrf=oracle must run end to end without collecting or training anything.
"""
from __future__ import annotations

import itertools
import json
import statistics
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from optimas_cli.conf import CONF_DIR
from optimas_cli.errors import UserError
from optimas_cli.flows.setup import budget_splits, build_budget, build_context, build_method, build_pipeline
from optimas_cli.lrf.collect import COLLECTION_PHASE
from optimas_cli.lrf.oracle import OracleLRF
from optimas_cli.system import LRF_ROUTE, Pipeline, RunContext, RunLedger
from optimas_cli.system.run_folder import RunFolder
from optimas_pipelines.synthetic import exact
from optimas_pipelines.synthetic.components import instruction, solid_share, strategy_of
from optimas_pipelines.synthetic.spec import UNGUIDED, draw_instance
from optimas_pipelines.synthetic.system import build

RUNS = Path(__file__).resolve().parents[1] / "docs" / "results" / "synthetic" / "runs"


def brute_force_optimum(instance, rows) -> float:
    """Every global value (a prompt may also be unguided) and every per-type choice of every router."""
    weights = exact.type_weights(instance, rows)
    per_component = []
    for spec in instance.components:
        if spec.kind == "route":
            per_component.append(list(itertools.product(spec.values, repeat=len(instance.types))))
        else:
            extra = (UNGUIDED,) if spec.kind == "prompt" else ()
            per_component.append([(v,) * len(instance.types) for v in (*spec.values, *extra)])
    best = 0.0
    for combo in itertools.product(*per_component):
        score = sum(w * exact.expected_reward(instance, {s.name: c[t] for s, c in zip(instance.components, combo, strict=True)}, t)
                    for t, w in weights.items())
        best = max(best, score)
    return best


@pytest.mark.parametrize("interaction", ["none", "on"])
@pytest.mark.parametrize("shape, kinds", [("chain", "mix"), ("tree", "mix"), ("diamond", "mix"), ("chain", "route")])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_exact_optimum_is_the_brute_force_one(interaction, shape, kinds, seed):
    pipe = build(components=4, shape=shape, kinds=kinds, options=3, input_types=2, coupling=0.6, instance=seed,
                 interaction=interaction, test_size=40)
    inst, rows = pipe.instance, pipe.splits.test
    optimum = exact.optimum_score(inst, rows)
    assert optimum == pytest.approx(brute_force_optimum(inst, rows), abs=1e-12)
    assert pipe.info["optimum_score"]["test"] == pytest.approx(optimum)
    # the values elimination returns reach it
    best = exact.best_values(inst, rows)
    reached = statistics.fmean(
        exact.expected_reward(inst, {n: v[exact.type_index(inst, ex)] if isinstance(v, dict) else v
                                     for n, v in best.items()}, exact.type_index(inst, ex)) for ex in rows)
    assert reached == pytest.approx(optimum, abs=1e-12)


def best_child_value(instance, parent_value: str, t: int) -> str:
    """step_01's best value when its parent step_00 uses parent_value, on input type t alone."""
    if instance.interaction == "none":
        return max(instance.components[1].values, key=lambda v: instance.components[1].q(v, t))
    return exact.solve(instance, {t: 1.0}, {"step_00": parent_value}, per_type=set())[1]["step_01"]


def test_interaction_makes_the_best_value_depend_on_the_parent_and_the_input_type():
    on = draw_instance(components=3, options=8, input_types=3, interaction="on", instance=0)
    none = draw_instance(components=3, options=8, input_types=3, interaction="none", instance=0)
    parent_values = on.components[0].values
    assert len({best_child_value(on, u, 0) for u in parent_values}) > 1
    assert len({best_child_value(none, u, 0) for u in parent_values}) == 1
    # a global component's best value changes with the input type (each type alone), unlike under none
    by_type = {exact.solve(on, {t: 1.0}, {}, per_type=set())[1]["step_00"] for t in range(3)}
    assert len(by_type) > 1
    assert len({max(none.components[0].values, key=lambda v, t=t: none.components[0].q(v, t)) for t in range(3)}) == 1


def one_sweep(instance, rows) -> float:
    """Coordinate ascent's first pass with exact scores: each global component in turn takes its best value
    given the others (routers route per input at their best), starting from the initial configuration."""
    config = {s.name: (dict({"route": "best"}) if s.kind == "route" else
                       instruction(s.default) if s.kind == "prompt" else s.default) for s in instance.components}
    for spec in instance.components:
        if spec.kind == "route":
            continue
        options = [instruction(v) if spec.kind == "prompt" else v for v in spec.values]
        config[spec.name] = max(options, key=lambda v, s=spec: exact.expected_score(instance, {**config, s.name: v}, rows))
    return exact.expected_score(instance, config, rows)


def test_one_coordinate_sweep_reaches_the_optimum_only_without_interaction():
    gaps = {}
    for interaction in ("none", "on"):
        gaps[interaction] = []
        for seed in range(6):
            pipe = build(components=6, options=4, input_types=3, instance=seed, interaction=interaction, test_size=60)
            rows = pipe.splits.test
            gaps[interaction].append(exact.optimum_score(pipe.instance, rows) - one_sweep(pipe.instance, rows))
    assert max(gaps["none"]) == pytest.approx(0.0, abs=1e-12)
    assert min(gaps["on"]) >= -1e-12 and max(gaps["on"]) > 1e-3


def ctx_for(pipe, **changes) -> RunContext:
    return RunContext(ledger=RunLedger(len(pipe.system))).replace(**changes)


@pytest.mark.parametrize("metric", ["mean", "sink"])
@pytest.mark.parametrize("interaction", ["none", "on"])
@pytest.mark.parametrize("kinds", ["mix", "route"])
def test_the_oracle_scores_each_output_by_its_exact_expected_reward(interaction, kinds, metric):
    pipe = build(components=4, kinds=kinds, options=4, input_types=3, instance=3, interaction=interaction,
                 metric=metric, test_size=30)
    inst, system = pipe.instance, pipe.system
    config = system.default_config()
    for spec in inst.components:  # every router downstream picks per input by the oracle
        if spec.kind == "route":
            config = config.replace(spec.name, dict(LRF_ROUTE))
    oracle = OracleLRF(pipe)
    oracle.observe([], config)
    trajs = system.run(pipe.splits.test, config, ctx_for(pipe, lrf=oracle))
    for spec in inst.components[:2]:
        component = system.components[spec.name]
        parents = [inst.components[p] for p in spec.parents]
        free = [s for s in inst.components if s.kind == "route" and s is not spec and s not in parents]
        for traj in trajs[:6]:
            x, t = traj.steps[spec.name]["inputs"], exact.type_index(inst, traj.example)
            outputs = [component.forward([x], instruction(v) if spec.kind == "prompt" else v, ctx_for(pipe))[0]
                       for v in spec.values]
            scores = oracle.score(spec.name, [x] * len(outputs), outputs)
            names = {s.name: exact.name_of(s, config[s.name], t) for s in inst.components if s.kind != "route"}
            names.update({p.name: exact.named_value(x[p.field]) for p in parents})
            observed = {p.index: solid_share(x[p.field]) for p in parents}
            brute = [max(exact.expected_reward(inst, {**names, spec.name: v, **dict(zip([s.name for s in free], picks, strict=True))},
                                               t, observed)
                         for picks in itertools.product(*[s.values for s in free])) for v in spec.values]
            assert scores == pytest.approx(brute, abs=1e-12)
    # routing by the oracle under the optimal global values reaches the optimum exactly (those on these rows:
    # under interaction=on they depend on the rows' type shares, which optimal_config takes as uniform)
    best, values = system.default_config(), exact.best_values(inst, pipe.splits.test)
    for spec in inst.components:
        value = values[spec.name]
        best = best.replace(spec.name, dict(LRF_ROUTE) if spec.kind == "route" else
                            instruction(value) if spec.kind == "prompt" else value)
    oracle.observe([], best)
    routed = system.run(pipe.splits.test, best, ctx_for(pipe, lrf=oracle))
    assert exact.expected_of_run(inst, pipe.splits.test, [t.steps for t in routed]) == pytest.approx(
        exact.optimum_score(inst, pipe.splits.test), abs=1e-12)


def test_options_beyond_eight_get_generated_names_fixed_by_the_instance_seed():
    a, b = (draw_instance(components=3, options=128, instance=7, interaction="on") for _ in range(2))
    assert a == b and len(set(a.components[0].values)) == 128
    assert draw_instance(components=3, options=20, instance=8).components[0].values != \
        draw_instance(components=3, options=20, instance=9).components[0].values
    for value in a.components[0].values:  # every generated strategy reads back from its instruction
        assert strategy_of(instruction(value)) == value
    with pytest.raises(UserError, match="options"):
        draw_instance(options=129)
    with pytest.raises(UserError, match="interaction"):
        draw_instance(interaction="strong")
    # a tree whose routers each touch three global components: too large a table to solve exactly
    with pytest.raises(UserError, match="use fewer pipeline.options"):
        build(components=50, shape="tree", options=128, interaction="on")


def test_interaction_none_reproduces_the_committed_benchmark_instances():
    """The committed runs' optimum, initial score and optimal configuration come out of today's code."""
    folders = sorted(RUNS.glob("K*-s*/optimas_no_adapt/results.json"))
    assert folders
    for path in folders:
        info = json.loads(path.read_text())["pipeline_info"]
        pipe = build(**info["settings"])
        assert pipe.info["optimum_score"] == info["optimum_score"]
        assert pipe.info["initial_score"] == info["initial_score"]
        assert pipe.info["optimal_config"] == info["optimal_config"]


def test_optimas_with_the_oracle_runs_a_128_option_instance_without_collecting(tmp_path):
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose("config", overrides=[
            "pipeline=synthetic", "pipeline.components=3", "pipeline.options=128", "pipeline.interaction=on",
            "pipeline.instance=1", "method=optimas", "lrf=oracle", "budget=synthetic", "budget.iterations=4",
            "budget.val_size=10", "budget.test_size=20", "proposer=pool", "method.scheduler=round_robin"])
    pipe = build_pipeline(cfg)
    splits = budget_splits(pipe, build_budget(cfg))
    folder = RunFolder(tmp_path)
    ctx = build_context(cfg, pipe, folder)
    outcome = build_method(cfg, build_budget(cfg)).optimize(pipe, splits, ctx, folder)
    assert isinstance(outcome.lrf, OracleLRF) and "lrf_oracle" in outcome.extras
    phases = ctx.ledger.to_dict()["by_phase"]
    assert not folder.file("pairs.jsonl").exists() and not {COLLECTION_PHASE, "adaptation"} & set(phases)
    assert "lrf_training" not in ctx.ledger.to_dict()["compute_seconds"]
    assert len(outcome.history) == 4 and any(e.accepted for e in outcome.history)
    # a per-input route reads the oracle at test time, under the final configuration
    trajs = pipe.system.run(splits.test, outcome.config, ctx.replace(lrf=outcome.lrf, phase="test"))
    assert 0 < exact.expected_of_run(pipe.instance, splits.test, [t.steps for t in trajs]) <= exact.optimum_score(
        pipe.instance, splits.test) + 1e-12


def test_the_oracle_refuses_a_pipeline_without_an_exact_model():
    pipe = build(components=3)
    plain = Pipeline(name="plain", system=pipe.system, splits=pipe.splits, metric=pipe.metric)
    with pytest.raises(UserError, match="lrf=oracle needs a pipeline with an exact model"):
        OracleLRF(plain)
