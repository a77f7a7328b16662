"""pipeline.metric=sink: an example's reward is the solid share of the last draft alone.

The exact optimum under sink is checked against brute force (every shape, both interactions, sizes where
some component does not feed the sink), the exact expectation against the mean of simulated runs; the
oracle under sink is checked in test_synthetic_interaction.py, metric=mean by every other synthetic test.
"""
from __future__ import annotations

import statistics

import pytest

from optimas_cli.errors import UserError
from optimas_pipelines.synthetic import exact
from optimas_pipelines.synthetic.components import instruction
from optimas_pipelines.synthetic.system import build
from tests.test_synthetic_interaction import brute_force_optimum, ctx_for


@pytest.mark.parametrize("interaction", ["none", "on"])
@pytest.mark.parametrize("shape, kinds, components", [
    ("chain", "mix", 4), ("tree", "mix", 4), ("tree", "route", 4), ("diamond", "mix", 3), ("diamond", "mix", 4)])
@pytest.mark.parametrize("seed", [0, 1])
def test_the_sink_optimum_is_the_brute_force_one(interaction, shape, kinds, components, seed):
    pipe = build(components=components, shape=shape, kinds=kinds, options=3, input_types=2, coupling=0.6,
                 instance=seed, interaction=interaction, metric="sink", test_size=40)
    inst, rows = pipe.instance, pipe.splits.test
    optimum = exact.optimum_score(inst, rows)
    assert optimum == pytest.approx(brute_force_optimum(inst, rows), abs=1e-12)
    assert pipe.info["optimum_score"]["test"] == pytest.approx(optimum)
    # the optimum's values reach it, and so do its global values with every router routing at its best
    best = exact.best_values(inst, rows)
    reached = statistics.fmean(
        exact.expected_reward(inst, {n: v[exact.type_index(inst, ex)] if isinstance(v, dict) else v
                                     for n, v in best.items()}, exact.type_index(inst, ex)) for ex in rows)
    assert reached == pytest.approx(optimum, abs=1e-12)
    routed = {s.name: {"route": "best"} if s.kind == "route" else instruction(best[s.name]) if s.kind == "prompt"
              else best[s.name] for s in inst.components}
    assert exact.expected_score(inst, routed, rows) == pytest.approx(optimum, abs=1e-12)


def test_only_the_components_feeding_the_sink_change_the_reward():
    # a tree of 4: step_03 reads step_01, which reads step_00; step_02 (a leaf) feeds no one
    scores = {}
    for metric in ("mean", "sink"):
        pipe = build(components=4, shape="tree", kinds="choice", options=4, instance=3, metric=metric, test_size=30)
        config, rows = pipe.system.default_config(), pipe.splits.test
        scores[metric] = {v: exact.expected_score(pipe.instance, {**config, "step_02": v}, rows)
                          for v in pipe.instance.components[2].values}
    assert len(set(scores["sink"].values())) == 1 and len(set(scores["mean"].values())) == 4
    with pytest.raises(UserError, match=r"pipeline.metric=last — use one of mean, sink$"):
        build(components=3, metric="last")


@pytest.mark.parametrize("shape, interaction, noise, temperature", [
    ("diamond", "none", 1.0, None), ("diamond", "on", 0.3, 0.9), ("tree", "on", 1.0, None), ("chain", "none", 0.0, None)])
def test_the_simulated_sink_reward_matches_its_exact_expectation(shape, interaction, noise, temperature):
    pipe = build(components=6, shape=shape, noise=noise, coupling=0.7, instance=2, interaction=interaction,
                 metric="sink", test_size=999)
    # the sink at its worst value: its share then lies well away from the mean share over every draft
    sink = pipe.instance.components[-1]
    worst = min(sink.values, key=lambda v: sum(sink.q(v, t) for t in range(len(pipe.instance.types))))
    rows, config = pipe.splits.test, pipe.system.default_config().replace(sink.name, worst)
    realized = []
    for repeat in range(4 if temperature else 1):
        trajs = pipe.system.run(rows, config, ctx_for(pipe, temperature=temperature, sample_index=repeat))
        realized += [pipe.metric(t.example, t.final(pipe.system.outputs)) for t in trajs]
        assert exact.expected_of_run(pipe.instance, rows, [t.steps for t in trajs]) == pytest.approx(
            exact.expected_score(pipe.instance, config, rows))
    expected = exact.expected_score(pipe.instance, config, rows)
    standard_error = statistics.pstdev(realized) / len(realized) ** 0.5
    assert abs(statistics.fmean(realized) - expected) < 4 * standard_error + 1e-3


def test_a_sink_run_goes_end_to_end_and_records_its_metric_and_code(tmp_path):
    """`optimas run pipeline=synthetic pipeline.metric=sink` (the oracle reward: no model to train) writes a
    results.json that scores the sink, holds the sink's optimum, and names the code that ran."""
    import json

    from tests.cli_runner import optimas

    folder = tmp_path / "run"
    proc = optimas("run", "pipeline=synthetic", "pipeline.metric=sink", "pipeline.components=4", "method=optimas",
                   "lrf=oracle", "budget=smoke", "budget.iterations=2", "proposer=pool", "repeats=1",
                   "lrf.judge.enabled=false", f"hydra.run.dir={folder}", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    results = json.loads((folder / "results.json").read_text())
    assert results["config"]["pipeline"]["metric"] == "sink"
    info = results["pipeline_info"]
    assert info["settings"]["metric"] == "sink" and info["optimum_score"]["test"] >= info["initial_score"]["test"]
    assert results["code"]["commit"] or results["code"]["version"]  # a checkout's commit, else the installed version
