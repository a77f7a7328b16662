"""scripts/synthetic_benchmark.py: the phase map's grid, cap and verdict stay as committed before its runs, the
anytime curve applies every method's history, Stage 1 is counted once, and --dry-run lists the whole grid."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from optimas_pipelines.synthetic import exact
from optimas_pipelines.synthetic.system import build

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("synthetic_benchmark", ROOT / "scripts" / "synthetic_benchmark.py")
bench = importlib.util.module_from_spec(_spec)
sys.modules["synthetic_benchmark"] = bench
_spec.loader.exec_module(bench)


def test_the_grid_is_the_one_committed_before_its_runs():
    assert bench.OPTIONS == (4, 32, 128) and bench.KS == (10, 30) and bench.INTERACTIONS == ("none", "on")
    assert bench.SIMULATOR == {"shape": "chain", "kinds": "mix", "input_types": 3, "noise": 0.5, "coupling": 0.5,
                               "marks": 8}
    assert bench.SEEDS == (0, 1, 2) and bench.HEADLINE == (128, 30, "on") and bench.HEADLINE_SEEDS == (0, 1, 2, 3, 4)
    assert len(bench.CELLS) == 12 and bench.HEADLINE_CELL.name == "o128-K30-on"
    assert [c.seeds for c in bench.CELLS].count((0, 1, 2, 3, 4)) == 1
    assert bench.METHODS == {
        "optimas": ["method=optimas"], "optimas_paper": ["method=optimas", "method.adaptation=paper"],
        "optimas_no_adapt": ["method=optimas_no_adapt"], "optimas_oracle": ["method=optimas", "lrf=oracle"],
        "random_reward": ["method=random_reward"], "coordinate_ascent": ["method=coordinate_ascent"],
        "global_reward": ["method=global_reward"], "tpe": ["method=tpe"], "hbc": ["method=hbc"]}
    assert bench.GLOBAL_SEARCHES == ("coordinate_ascent", "global_reward", "tpe") and bench.HALF == 0.5


def test_every_method_of_a_cell_gets_the_cap_90k_and_an_iteration_limit_that_never_binds():
    assert (bench.cap(10), bench.cap(30)) == (900, 2700)
    for cell in bench.CELLS:
        for method in bench.METHODS:
            args = bench.overrides(cell, 0, method)
            assert f"budget.max_runs={90 * cell.k}" in args and "budget.iterations=100000" in args
            assert not any(a.startswith(("method.trials", "method.sweeps", "budget.max_runs_from")) for a in args)
            assert f"pipeline.options={cell.options}" in args and f"pipeline.interaction={cell.interaction}" in args


def test_the_exact_label_method_is_runnable_with_its_cap_but_off_the_committed_grid(capsys):
    assert bench.OFF_GRID == {"optimas_exact_labels": ["method=optimas", "lrf.collect.labels=exact"]}
    assert not set(bench.OFF_GRID) & set(bench.METHODS)
    args = bench.overrides(bench.HEADLINE_CELL, 0, "optimas_exact_labels")
    assert "lrf.collect.labels=exact" in args and "budget.max_runs=2700" in args
    bench.main(["--dry-run", "--cells", "o128-K30-on", "--methods", "optimas_exact_labels"])
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[-1].startswith("5 runs in the slice") and all("lrf.collect.labels=exact" in x for x in lines[:-1])


def _bracket_run(method: str, seed: int, curve: list, collection: float = 0.0, adaptation: float = 0.0,
                 executed: float = 880.0, regret: float = 0.3) -> dict:
    """A hand-made row of o4-K10-none (cap 900): initial regret 0.4."""
    return {"cell": "o4-K10-none", "method": method, "seed": seed, "regret": regret, "optimum": 0.9, "initial": 0.5,
            "executed_runs": executed, "cap": 900, "collection": collection, "LRF training": 0.0,
            "adaptation": adaptation, "curve": curve}


def test_the_charged_oracle_and_the_matched_random_reward_read_their_curves_at_what_optimas_paid():
    learned = _bracket_run("optimas", 0, [], collection=400, adaptation=150)  # loop: 880 - 400 - 150 = 330
    oracle = _bracket_run("optimas_oracle", 0, [[300, 0.3], [499, 0.2], [501, 0.1], [880, 0.05]])
    random = _bracket_run("random_reward", 0, [[100, 0.35], [330, 0.25], [331, 0.2]])
    assert bench.stage1_runs(learned) == 400 and bench.loop_runs(learned) == 330
    assert bench.charged_oracle(oracle, learned) == 0.2  # read at 900 - 400 = 500
    assert bench.matched_random(random, learned) == 0.25  # read at 330, the point itself included
    stuck = _bracket_run("optimas", 0, [], collection=880)  # Stage 1 took (nearly) the whole cap
    assert bench.charged_oracle(oracle, stuck) == bench.matched_random(random, stuck) == pytest.approx(0.4)

    rows = [r for s in (0, 1, 2) for r in (
        {**learned, "seed": s}, {**oracle, "seed": s}, {**random, "seed": s, "regret": 0.1, "executed_runs": 870}
    )]
    table = "\n".join(bench.paid_brackets(rows))
    assert "| o4-K10-none | learned Optimas | 3 | 0.300 [0.300, 0.300] | 400 | 150 | 330 |" in table
    assert "| o4-K10-none | oracle, charged Optimas' Stage 1 | 3 | 0.200 [0.200, 0.200] | 400 charged | 0 | read at 500 |" in table
    assert "| o4-K10-none | exact-label LRF | 0 | not run | - | - | - |" in table
    assert "| o4-K10-none | random reward, full cap | 3 | 0.100 [0.100, 0.100] | 0 | 0 | 870 |" in table
    assert "| o4-K10-none | random reward, matched loop spend | 3 | 0.250 [0.250, 0.250] | 0 | 0 | read at 330 |" in table
    assert "o4-K10-on" not in table  # a cell with none of the brackets' runs has no rows


def test_the_curve_applies_tpe_entries_that_change_several_components_at_once():
    pipe = build(components=3, kinds="choice", options=4, input_types=1, test_size=20)
    inst, examples = pipe.instance, pipe.splits.test
    best, default = exact.optimal_config(inst), pipe.system.default_config()
    changed = [n for n in best if best[n] != default[n]]
    assert len(changed) >= 2  # the instance gives the test something to change
    optimum = exact.optimum_score(inst, examples)
    picks = [{}] * len(examples)  # no lrf routers: no picks read
    history = [{"component": changed, "proposal": {n: best[n] for n in changed}, "accepted": False, "runs_so_far": 5},
               {"component": changed, "proposal": {n: best[n] for n in changed}, "accepted": True, "runs_so_far": 9}]
    points = bench.curve(inst, default, history, examples, picks, optimum)
    initial = optimum - exact.expected_score(inst, default, examples)
    assert initial > 0.01
    assert points[0] == (5.0, pytest.approx(initial)) and points[1] == (9.0, pytest.approx(0.0, abs=1e-12))
    one = [{"component": changed[0], "proposal": best[changed[0]], "accepted": True, "runs_so_far": 3}]
    assert 0 < bench.curve(inst, default, one, examples, picks, optimum)[0][1] < initial
    assert bench.regret_at(points, 4, initial) == initial and bench.regret_at(points, 9, initial) == pytest.approx(0)


def _optimas_results(seed: int, method: dict, accuracy: float) -> dict:
    return {"config": {"pipeline": {"components": 3, "instance": seed}, "seed": seed, "lrf": {"name": "minilm"},
                       "budget": {"train_size": 10, "max_runs": 270}, "proposer": "pool", "method": method},
            "lrf": {"components": {"step_00": {"pairwise_accuracy": accuracy, "pairs": {"collected": 30}, "n_pairs": 4}}},
            "pipeline_info": {"kinds": {"step_00": "choice"}}}


def test_the_accuracy_by_pairs_table_counts_a_stage1_shared_by_several_runs_once():
    shared = [_optimas_results(0, {"name": "optimas", "adaptation": a}, 0.75) for a in ("lazy", "paper", "none")]
    other = _optimas_results(1, {"name": "optimas", "adaptation": "lazy"}, 0.25)
    lines = bench.lrf_by_pairs([*shared, other])
    assert lines[0] == "2 distinct Stage 1 runs."
    assert "| 20–40 | 2 | choice 2 | 0.500 | 8 |" in lines


def _cells(o: int) -> str:
    return bench.Cell(o, 30, "on").name


def _reg(optimas: dict[int, list[float]], oracle: dict[int, list[float]], glob: dict[int, list[float]]) -> dict:
    """Regrets per options count at K 30, interaction on: optimas, optimas_oracle and one global search (the
    others worse); 5 seeds in the headline cell, 3 elsewhere."""
    reg = {}
    for o in (4, 128):
        for method, values in (("optimas", optimas[o]), ("optimas_oracle", oracle[o]), ("tpe", glob[o]),
                               ("coordinate_ascent", [v + 0.1 for v in glob[o]]),
                               ("global_reward", [v + 0.2 for v in glob[o]])):
            reg[(_cells(o), method)] = dict(enumerate(values))
    return reg


GOOD = {4: [0.10, 0.12, 0.11], 128: [0.05, 0.06, 0.04, 0.05, 0.06]}  # falls; half the global's at 128
GLOBAL = {4: [0.10, 0.11, 0.12], 128: [0.30, 0.32, 0.31, 0.29, 0.33]}  # rises
BAD = {4: [0.10, 0.12, 0.11], 128: [0.30, 0.31, 0.33, 0.32, 0.30]}  # as bad as the global search


def test_the_verdict_is_met_when_optimas_halves_the_best_global_search_and_its_trend_holds():
    text = "\n".join(bench.verdict(_reg(GOOD, BAD, GLOBAL)))
    assert "**Verdict: met.**" in text


def test_a_missed_verdict_names_the_lrf_when_the_oracle_bracket_meets_it():
    text = "\n".join(bench.verdict(_reg(BAD, GOOD, GLOBAL)))
    assert "**Verdict: not met.**" in text and "What explains it: the LRF" in text


def test_a_missed_verdict_names_the_loop_when_the_oracle_bracket_misses_it_too():
    text = "\n".join(bench.verdict(_reg(BAD, BAD, GLOBAL)))
    assert "**Verdict: not met.**" in text and "What explains it: the loop" in text


def test_the_verdict_waits_for_its_cells_and_a_difference_whose_interval_holds_0_is_not_met():
    assert "not measured yet" in "\n".join(bench.verdict({}))
    noisy = {4: GOOD[4], 128: [0.01, 0.30, 0.02, 0.31, 0.01]}  # mean below half, interval across 0
    met, detail = bench.headline_met(_reg(noisy, BAD, GLOBAL), "optimas")
    assert met is False and "difference" in detail


def test_one_step_is_the_largest_spend_between_two_history_entries():
    assert bench.one_step([{"runs_so_far": 500}, {"runs_so_far": 520}, {"runs_so_far": 600}]) == 80
    assert bench.one_step([{"runs_so_far": 500}]) is None


def test_the_dry_run_lists_9_methods_times_11_cells_of_3_seeds_and_the_headline_cells_5(capsys):
    bench.main(["--dry-run"])
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[-1].startswith(f"{9 * (11 * 3 + 5)} runs in the slice")
    finished = int(lines[-1].split("(")[1].split(" finished")[0])
    assert len(lines) - 1 + finished == 342 and all(line.startswith("optimas run pipeline=synthetic") for line in lines[:-1])
    bench.main(["--dry-run", "--cells", "o128-K30-on", "--methods", "tpe"])
    assert capsys.readouterr().out.strip().splitlines()[-1].startswith("5 runs in the slice")


def test_an_unknown_cell_is_refused_in_one_line():
    with pytest.raises(SystemExit, match="unknown cell o5-K10-none; choose from o4-K10-none"):
        bench.main(["--dry-run", "--cells", "o5-K10-none"])
