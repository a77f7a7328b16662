"""The synthetic benchmark's phase map: its grid lives in conf/experiment/synthetic_phase_map*.yaml and composes
into the very runs committed before the grid moved there; `optimas report` (report/synthetic*.py) reproduces the
committed README's numbers from the committed runs; the anytime curve applies every method's history, Stage 1 is
counted once, and the verdict follows its rule."""
from __future__ import annotations

import itertools
import re
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from optimas_cli.conf import CONF_DIR
from optimas_cli.report import regret, synthetic, synthetic_brackets, synthetic_verdict
from optimas_cli.report.run_archive import located
from optimas_cli.report.runs import load_runs
from optimas_cli.report.synthetic_grid import Cell, Grid, grid_of, one_step
from optimas_pipelines.synthetic import exact
from optimas_pipelines.synthetic.system import build

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "docs" / "results" / "synthetic"
METHODS = ["optimas", "optimas_paper", "optimas_no_adapt", "optimas_oracle", "random_reward", "coordinate_ascent",
           "global_reward", "tpe", "hbc"]


def _compose(overrides: list[str], hydra: bool = False):
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return compose(config_name="config", overrides=overrides, return_hydra_config=hydra)


def _jobs(experiment: str) -> list[tuple]:
    """The sweep's jobs as Hydra's basic sweeper makes them: the product of hydra.sweeper.params."""
    params = _compose([f"experiment={experiment}"], hydra=True).hydra.sweeper.params
    return list(itertools.product(*([f"{k}={v}" for v in str(values).split(",")] for k, values in params.items())))


def test_the_grid_is_the_one_committed_before_its_runs_and_every_run_gets_the_cap_90k():
    grid, headline = _jobs("synthetic_phase_map"), _jobs("synthetic_phase_map_headline")
    assert len(grid) == 12 * 3 * 9 and len(headline) == 2 * 9  # 11 cells x 3 seeds + the headline's 5, x 9 methods
    methods = {job[-1].split("=")[1] for job in grid}
    assert sorted(methods) == sorted(METHODS)
    assert {job[3] for job in headline} == {"seed=3", "seed=4"}
    for overrides, k, method in ((["pipeline.options=4", "experiment/synthetic_k=k10", "pipeline.interaction=none",
                                   "experiment/synthetic_method=optimas_paper"], 10, "optimas"),
                                 (["pipeline.options=128", "experiment/synthetic_k=k30", "pipeline.interaction=on",
                                   "experiment/synthetic_method=optimas_oracle"], 30, "optimas")):
        cfg = OmegaConf.to_container(_compose(["experiment=synthetic_phase_map", "seed=1", *overrides]), resolve=True)
        assert cfg["budget"]["max_runs"] == 90 * k and cfg["budget"]["iterations"] == 100000
        assert cfg["pipeline"]["components"] == k and cfg["method"]["name"] == method and cfg["data_dir"] is None
        assert {key: cfg["pipeline"][key] for key in ("shape", "kinds", "input_types", "noise", "coupling", "marks")} == {
            "shape": "chain", "kinds": "mix", "input_types": 3, "noise": 0.5, "coupling": 0.5, "marks": 8}
        assert (cfg["proposer"], cfg["repeats"], cfg["lrf"]["train_backbone"], cfg["lrf"]["max_length"]) == ("pool", 1, "heads", 96)
        assert cfg["lrf"]["judge"]["enabled"] is False and cfg["lrf"]["score_traces"] is False
    paper = _compose(["experiment=synthetic_phase_map", "experiment/synthetic_method=optimas_paper"])
    oracle = _compose(["experiment=synthetic_phase_map", "experiment/synthetic_method=optimas_oracle"])
    exact_labels = _compose(["experiment=synthetic_phase_map", "experiment/synthetic_method=optimas_exact_labels"])
    assert paper.method.adaptation == "paper" and oracle.lrf.name == "oracle" and exact_labels.lrf.collect.labels == "exact"
    assert exact_labels.run_label == "optimas_exact_labels" and "optimas_exact_labels" not in methods  # off the grid


def _readme_lines(cells: tuple[str, ...]) -> list[str]:
    """The README's table rows and verdict lines that name one of `cells` (or the verdict)."""
    text = (RESULTS / "README.md").read_text()
    return [line for line in text.splitlines() if line.startswith("| o") and line.split(" | ")[0][2:] in cells]


def _section(folders: list[Path], tmp_path) -> list[str]:
    text = synthetic.section(load_runs([str(f) for f in folders]).runs, tmp_path)
    assert (tmp_path / "plots" / "phase_map.png").exists() and (tmp_path / "synthetic_runs.csv").exists()
    return text.splitlines()


def test_the_report_reproduces_the_committed_readme_for_the_k10_cells_at_4_options(tmp_path):
    cells = ("o4-K10-none", "o4-K10-on")
    lines = _section([RESULTS / "phase-map" / c for c in cells], tmp_path)
    expected = _readme_lines(cells)
    got = [line for line in lines if line.startswith("| o")]
    assert len(expected) == 2 + 2 * 9 * 3 + 2 + 2 * 6  # phase map, cap, anytime, phases, brackets, paid
    assert got == expected


def test_the_report_reproduces_the_committed_verdict_from_the_k30_interaction_cells(tmp_path):
    cells = ("o4-K30-on", "o32-K30-on", "o128-K30-on")
    lines = _section([RESULTS / "phase-map" / c for c in cells], tmp_path)
    readme = (RESULTS / "README.md").read_text().splitlines()
    verdict = [line for line in readme if line.startswith(("- Headline", "- Options trend", "- Oracle bracket", "**Verdict"))]
    assert len(verdict) == 4 and [line for line in lines if line in verdict] == verdict


def _bracket_run(method: str, seed: int, curve: list, collection: float = 0.0, adaptation: float = 0.0,
                 executed: float = 880.0, regret_: float = 0.3) -> dict:
    """A hand-made row of o4-K10-none (cap 900): initial regret 0.4."""
    return {"cell": "o4-K10-none", "method": method, "seed": seed, "regret": regret_, "optimum": 0.9, "initial": 0.5,
            "executed_runs": executed, "cap": 900, "collection": collection, "LRF training": 0.0,
            "adaptation": adaptation, "curve": curve}


def test_the_charged_oracle_and_the_matched_random_reward_read_their_curves_at_what_optimas_paid():
    b = synthetic_brackets
    learned = _bracket_run("optimas", 0, [], collection=400, adaptation=150)  # loop: 880 - 400 - 150 = 330
    oracle = _bracket_run("optimas_oracle", 0, [[300, 0.3], [499, 0.2], [501, 0.1], [880, 0.05]])
    random = _bracket_run("random_reward", 0, [[100, 0.35], [330, 0.25], [331, 0.2]])
    assert b.stage1_runs(learned) == 400 and b.loop_runs(learned) == 330
    assert b.charged_oracle(oracle, learned) == 0.2  # read at 900 - 400 = 500
    assert b.matched_random(random, learned) == 0.25  # read at 330, the point itself included
    stuck = _bracket_run("optimas", 0, [], collection=880)  # Stage 1 took (nearly) the whole cap
    assert b.charged_oracle(oracle, stuck) == b.matched_random(random, stuck) == pytest.approx(0.4)

    rows = [r for s in (0, 1, 2) for r in (
        {**learned, "seed": s}, {**oracle, "seed": s}, {**random, "seed": s, "regret": 0.1, "executed_runs": 870}
    )]
    table = "\n".join(b.paid_brackets(Grid(rows=rows, cells=[Cell(4, 10, "none", cap=900), Cell(4, 10, "on", cap=900)])))
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
    points = regret.curve(inst, default, history, examples, picks, optimum)
    initial = optimum - exact.expected_score(inst, default, examples)
    assert initial > 0.01
    assert points[0] == (5.0, pytest.approx(initial)) and points[1] == (9.0, pytest.approx(0.0, abs=1e-12))
    one = [{"component": changed[0], "proposal": best[changed[0]], "accepted": True, "runs_so_far": 3}]
    assert 0 < regret.curve(inst, default, one, examples, picks, optimum)[0][1] < initial
    assert regret.regret_at(points, 4, initial) == initial and regret.regret_at(points, 9, initial) == pytest.approx(0)


def test_the_anytime_table_reads_each_run_at_shares_of_its_cap_beyond_the_cap_too():
    rows = [{**_bracket_run("tpe", s, [[100, 0.3], [450, 0.2], [1800, 0.1]]), "cap": 900} for s in (0, 1)]
    lines = synthetic.anytime_table([(Cell(4, 10, "none", cap=900), "tpe", rows)], (0.1, 0.5, 1.0, 2.0))
    assert lines[2] == "| cell | method | 10% | 50% | 100% | 200% |"
    assert lines[-1] == "| o4-K10-none | tpe | 0.400 | 0.200 | 0.200 | 0.100 |"  # 90 runs: before any entry


def _optimas_results(seed: int, method: dict, accuracy: float) -> dict:
    return {"config": {"pipeline": {"components": 3, "instance": seed}, "seed": seed, "lrf": {"name": "minilm"},
                       "budget": {"train_size": 10, "max_runs": 270}, "proposer": "pool", "method": method},
            "lrf": {"components": {"step_00": {"pairwise_accuracy": accuracy, "pairs": {"collected": 30}, "n_pairs": 4}}},
            "pipeline_info": {"kinds": {"step_00": "choice"}}}


def test_the_accuracy_by_pairs_table_counts_a_stage1_shared_by_several_runs_once():
    shared = [_optimas_results(0, {"name": "optimas", "adaptation": a}, 0.75) for a in ("lazy", "paper", "none")]
    other = _optimas_results(1, {"name": "optimas", "adaptation": "lazy"}, 0.25)
    lines = synthetic_brackets.lrf_by_pairs([*shared, other])
    assert lines[0] == "2 distinct Stage 1 runs."
    assert "| 20–40 | 2 | choice 2 | 0.500 | 8 |" in lines


GOOD = {4: [0.10, 0.12, 0.11], 128: [0.05, 0.06, 0.04, 0.05, 0.06]}  # falls; half the global's at 128
GLOBAL = {4: [0.10, 0.11, 0.12], 128: [0.30, 0.32, 0.31, 0.29, 0.33]}  # rises
BAD = {4: [0.10, 0.12, 0.11], 128: [0.30, 0.31, 0.33, 0.32, 0.30]}  # as bad as the global search
CELLS = [Cell(4, 30, "on", cap=2700), Cell(128, 30, "on", cap=2700)]


def _reg(optimas: dict[int, list[float]], oracle: dict[int, list[float]], glob: dict[int, list[float]]) -> dict:
    """Regrets per options count at K 30, interaction on: optimas, optimas_oracle and one global search (the
    others worse); 5 seeds in the headline cell, 3 elsewhere."""
    reg = {}
    for cell in CELLS:
        o = cell.options
        for method, values in (("optimas", optimas[o]), ("optimas_oracle", oracle[o]), ("tpe", glob[o]),
                               ("coordinate_ascent", [v + 0.1 for v in glob[o]]),
                               ("global_reward", [v + 0.2 for v in glob[o]])):
            reg[(cell.name, method)] = dict(enumerate(values))
    return reg


def _verdict(reg) -> str:
    return "\n".join(synthetic_verdict.verdict(reg, Grid(cells=CELLS)))


def test_the_verdict_is_met_when_optimas_halves_the_best_global_search_and_its_trend_holds():
    assert "**Verdict: met.**" in _verdict(_reg(GOOD, BAD, GLOBAL))
    assert Grid(cells=CELLS).headline().name == "o128-K30-on"


def test_a_missed_verdict_names_the_lrf_when_the_oracle_bracket_meets_it():
    text = _verdict(_reg(BAD, GOOD, GLOBAL))
    assert "**Verdict: not met.**" in text and "What explains it: the LRF" in text


def test_a_missed_verdict_names_the_loop_when_the_oracle_bracket_misses_it_too():
    text = _verdict(_reg(BAD, BAD, GLOBAL))
    assert "**Verdict: not met.**" in text and "What explains it: the loop" in text


def test_the_verdict_waits_for_its_cells_and_a_difference_whose_interval_holds_0_is_not_met():
    assert "not measured yet" in _verdict({})
    noisy = {4: GOOD[4], 128: [0.01, 0.30, 0.02, 0.31, 0.01]}  # mean below half, interval across 0
    met, detail = synthetic_verdict.headline_met(_reg(noisy, BAD, GLOBAL), CELLS[1], "optimas")
    assert met is False and "difference" in detail
    one_cell = Grid(cells=CELLS[1:])  # no options to rise over: the trend is not measured, nor the verdict
    assert "not measured yet" in "\n".join(synthetic_verdict.verdict(_reg(GOOD, BAD, GLOBAL), one_cell))


def test_one_step_is_the_largest_spend_between_two_history_entries():
    assert one_step([{"runs_so_far": 500}, {"runs_so_far": 520}, {"runs_so_far": 600}]) == 80
    assert one_step([{"runs_so_far": 500}]) is None


def test_a_run_without_regret_or_traces_is_named_not_measured(tmp_path):
    source = located(RESULTS / "phase-map" / "o4-K10-none" / "s0" / "tpe")  # packed: o4-K10-none.runs.tar.xz
    folder = tmp_path / "o4-K10-none" / "s0" / "tpe"
    folder.mkdir(parents=True)
    for name in ("results.json", "results.bulk.json.gz"):  # the run's results, its traces and regret.json left out
        if (source / name).exists():
            (folder / name).write_bytes((source / name).read_bytes())
    grid = grid_of(load_runs([str(tmp_path)]).runs)
    assert not grid.rows and re.search("neither regret.json nor the test traces", grid.problems[0][1])


def test_the_second_phase_map_is_the_grid_issue_59_fixed():
    """18 cells (options x K x metric, interaction on) x 3 seeds, the 4-option separable control and the headline
    cell's seeds 3-4, 8 methods each, every run capped at twice 90 K."""
    main, control, headline = (_jobs(f"synthetic_phase_map_2{s}") for s in ("", "_control", "_headline"))
    assert (len(main), len(control), len(headline)) == (432, 144, 16)
    methods = {dict(o.split("=") for o in job)["experiment/synthetic_method"] for job in main}
    assert methods == {"optimas", "optimas_no_adapt", "optimas_oracle", "optimas_exact_labels", "random_reward",
                       "coordinate_ascent", "tpe", "global_reward"}
    assert {dict(o.split("=") for o in job)["pipeline.interaction"] for job in control} == {"none"}
    assert {dict(o.split("=") for o in job)["seed"] for job in headline} == {"3", "4"}
    for job in (main[0], control[-1], headline[0]):
        cfg = _compose(["experiment=synthetic_phase_map_2", *job])
        assert cfg.budget.max_runs == 2 * 90 * cfg.pipeline.components and cfg.pipeline.noise == 0.5
    cfg = _compose(["experiment=synthetic_phase_map_2_headline", *headline[0]])
    assert (cfg.pipeline.options, cfg.pipeline.components, cfg.pipeline.metric) == (32, 10, "sink")
