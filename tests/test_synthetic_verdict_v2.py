"""The second phase map's report (issue 59): its plan composed from the committed sweeps, each run read at 1/2x, 1x
and 2x of its cell's cap, the committed verdict rule in every branch (met; not met by the half rule, by an interval
that holds 0, by random reward in one cell; a method that did not move; a partly run grid), the brackets where it
fails, and the figure. The runs are fabricated as `optimas run` writes them (results.json and regret.json)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from optimas_cli.report import synthetic
from optimas_cli.report.runs import load_runs
from optimas_cli.report.synthetic_grid import Cell, grid_of
from optimas_cli.report.synthetic_plan import committed_plan
from optimas_cli.report.synthetic_readings import read
from optimas_cli.report.synthetic_verdict_v2 import verdict

PLAN = committed_plan()
HEAD = PLAN.headline
RULE_CELLS = [c for c in PLAN.cells if c.interaction == "on" and c.options in (4, 32)]  # random reward's clause
OPTIMUM, INITIAL = 0.9, 0.4  # every fabricated run: its optimum and its initial regret
# (share of the cell's 1x cap, regret) after each history entry, per method; a change of regret is an accepted
# change; seed s adds 0.01 s to every regret so that seeds differ
GOOD = {"optimas": [(0.3, 0.12), (0.9, 0.08), (1.8, 0.05)], "random_reward": [(0.5, 0.30)],
        "coordinate_ascent": [(0.5, 0.25)], "tpe": [(0.6, 0.30)]}


def write_run(root: Path, cell: Cell, seed: int, method: str, points, stage1: float = 0.0) -> None:
    """A run folder of the second phase map: results.json (config, ledger, history) and regret.json (its measured
    regret and anytime curve, so the test traces are not needed)."""
    cap, last = cell.reference_cap, INITIAL
    history, curve = [], []
    for i, (share, regret) in enumerate(points, 1):
        jittered = regret if regret == INITIAL else regret + 0.01 * seed
        history.append({"iteration": i, "accepted": jittered != last, "runs_so_far": share * cap,
                        "component": "step_00", "proposal": {"route": f"value-{i}"}, "val_before": 1.0,
                        "val_after": 1.0, "n": 20})
        last = jittered
        curve.append([share * cap, jittered])
    spent = max([stage1, *(x for x, _ in curve)])
    folder = root / f"{cell.name}-s{seed}-{method}"
    folder.mkdir(parents=True)
    pipeline = {"options": cell.options, "components": cell.k, "interaction": cell.interaction, "metric": cell.metric,
                "shape": "chain", "noise": 0.5}
    results = {"pipeline": "synthetic", "method": method, "metric": cell.metric, "stopped": "max_runs",
               "test": {"mean": OPTIMUM - last, "std": 0.1, "scores": [OPTIMUM - last], "n": 1},
               "ledger": {"runs": spent, "tokens": 0, "calls": 0, "by_phase": {"lrf_collection": {"runs": stage1}}},
               "history": history,
               "config": {"pipeline": pipeline, "budget": {"max_runs": cell.cap, "train_size": 10}, "seed": seed,
                          "run_label": method, "lrf": {"name": "minilm"}, "proposer": "pool"}}
    (folder / "results.json").write_text(json.dumps(results))
    (folder / "regret.json").write_text(json.dumps({"regret": last, "reached": OPTIMUM - last, "optimum": OPTIMUM,
                                                    "initial": OPTIMUM - INITIAL, "curve": curve}))


def write_grid(root: Path, cells=RULE_CELLS, methods=GOOD, changed=None, stage1=None) -> Path:
    """Every planned seed of `cells` for `methods` (method -> points); `changed`: (cell name, method) -> points
    (or seed -> points) in place of the method's; `stage1`: Stage 1 runs of learned Optimas per cell name."""
    changed, stage1 = changed or {}, stage1 or {}
    for cell in cells:
        for method, points in methods.items():
            got = changed.get((cell.name, method), points)
            for seed in PLAN.seeds[cell.name]:
                write_run(root, cell, seed, method, got[seed] if isinstance(got, dict) else got,
                          stage1.get(cell.name, 0.0) if method == "optimas" else 0.0)
    return root


def judged(root: Path):
    return verdict(grid_of(load_runs([str(root)]).runs), PLAN)


def test_the_plan_is_the_committed_grid_in_its_committed_order():
    assert len(PLAN.cells) == 24 and sum(map(PLAN.runs, PLAN.cells)) == 592
    assert HEAD == Cell(32, 10, "on", "sink", 1800) and PLAN.cells[0] == HEAD and PLAN.seeds[HEAD.name] == (0, 1, 2, 3, 4)
    groups = [(c.options, c.interaction) for c in PLAN.cells[1:]]
    assert groups == [(4, "on")] * 6 + [(32, "on")] * 5 + [(4, "none")] * 6 + [(128, "on")] * 6
    assert len(RULE_CELLS) == 12 and "optimas_exact_labels" in PLAN.methods


def test_each_run_is_read_at_half_once_and_twice_the_cap_and_did_not_move_until_its_first_change(tmp_path):
    cell = Cell(4, 10, "on", "mean", 1800)
    assert (cell.doubled, cell.reference_cap) == (True, 900)
    assert (Cell(4, 10, "on", cap=900).reference_cap, Cell(4, 10, "on", cap=1000).reference_cap) == (900, 1000)
    write_run(tmp_path, cell, 0, "tpe", [(0.4, INITIAL), (0.6, 0.2), (1.5, 0.1)])
    grid = grid_of(load_runs([str(tmp_path)]).runs)
    half, once, twice = (read(grid, share)[(cell.name, "tpe")] for share in (0.5, 1.0, 2.0))
    assert (half.moved, once.moved, twice.moved) == (False, True, True)
    assert (half.regret[0], once.regret[0], twice.regret[0]) == (INITIAL, 0.2, 0.1)
    assert half.shown() == "did not move" and once.closed[0] == pytest.approx(0.5)


def test_the_verdict_is_met_when_optimas_halves_the_better_rival_and_beats_random_reward_in_every_cell(tmp_path):
    got = judged(write_grid(tmp_path))
    assert got.state == "met" and got.summary == "Verdict: met" and not got.failing
    text = "\n".join(got.lines)
    assert "- Headline (o32-K10-on-sink): optimas 0.100 vs coordinate_ascent 0.270" in text
    assert "learned Optimas beats it in 12, does not in 0, not measured in 0" in text and "**Verdict: met.**" in text


def test_optimas_above_half_the_rival_fails_the_half_rule_and_the_failing_brackets_are_named(tmp_path):
    methods = {**GOOD, "optimas_exact_labels": [(0.5, 0.02)], "optimas_oracle": [(0.5, 0.10)]}
    # Stage 1 took 540 of the 900 runs: the charged oracle is read at 360, before the free oracle's first change
    root = write_grid(tmp_path, methods=methods, changed={(HEAD.name, "optimas"): [(0.9, 0.16)]},
                      stage1={HEAD.name: 540.0})
    got = judged(root)
    assert got.state == "not met" and list(got.failing) == [HEAD.name]
    assert got.failing[HEAD.name] == ["the half rule", "reward quality fails", "cost fails"]
    row = next(line for line in got.lines if line.startswith(f"| {HEAD.name} | the half rule"))
    cells = row.split(" | ")
    assert cells[2].endswith(": fails") and "fails (did not move: charged oracle)" in cells[3]
    assert cells[4].startswith("+0.150 [") and ": holds" in cells[4]  # coordinate ascent above the oracle: holds
    assert got.summary == "Verdict: not met (o32-K10-on-sink: the half rule, reward quality fails, cost fails)"


def test_a_difference_whose_interval_holds_0_does_not_meet_the_half_rule(tmp_path):
    noisy = {0: [(0.9, 0.0)], 1: [(0.9, 0.29)], 2: [(0.9, 0.0)], 3: [(0.9, 0.27)], 4: [(0.9, 0.0)]}
    got = judged(write_grid(tmp_path, changed={(HEAD.name, "optimas"): noisy}))
    headline = next(line for line in got.lines if line.startswith("- Headline"))
    assert "optimas 0.132 vs coordinate_ascent 0.270, the better of coordinate_ascent and tpe (half: 0.135)" in headline
    assert headline.endswith("difference -0.138 [-0.329, +0.053]: not met.")  # at most half, but the interval holds 0
    assert got.failing == {HEAD.name: ["the half rule"]}


def test_random_reward_beating_optimas_in_one_4_option_cell_is_not_met_though_other_cells_are_missing(tmp_path):
    cell = next(c for c in RULE_CELLS if c.options == 4)
    root = write_grid(tmp_path, cells=[HEAD, cell], changed={(cell.name, "random_reward"): [(0.5, 0.05)]})
    got = judged(root)
    assert got.state == "not met" and got.failing == {cell.name: ["random reward not beaten"]}
    assert f"| {cell.name} | 0.090 | 0.060 | +0.030 [+0.030, +0.030] | no |" in got.lines
    assert "beats it in 1, does not in 1, not measured in 10" in "\n".join(got.lines)


def test_a_method_that_did_not_move_is_not_ranked_and_beats_nothing(tmp_path):
    stuck = [(0.5, INITIAL), (1.5, INITIAL)]  # proposals, none accepted
    cell = next(c for c in RULE_CELLS if c.options == 32 and c != HEAD)
    root = write_grid(tmp_path, changed={(cell.name, "optimas"): stuck, (HEAD.name, "optimas"): stuck})
    got = judged(root)
    row = next(line for line in got.lines if line.startswith(f"| {cell.name} |"))
    assert row.startswith(f"| {cell.name} | did not move | 0.310 | +0.090 [") and row.endswith("| no (optimas did not move) |")
    assert next(line for line in got.lines if line.startswith("- Headline")).startswith(
        "- Headline (o32-K10-on-sink): optimas did not move vs coordinate_ascent 0.270")
    assert got.failing[HEAD.name] == ["the half rule", "random reward not beaten"] and got.failing[cell.name] == ["random reward not beaten"]
    text = synthetic.section(load_runs([str(root)]).runs, tmp_path / "report")
    assert f"| {cell.name} | {cell.reference_cap:g} | optimas | 3 | did not move | did not move | did not move | did not move |" in text


def test_a_partly_run_grid_says_which_cells_ran_and_waits_for_the_rest(tmp_path):
    """The headline cell's seeds 0-2 (experiment=synthetic_phase_map_2 alone, without its headline sweep)."""
    runs = tmp_path / "runs"
    for seed in (0, 1, 2):
        for method, points in GOOD.items():
            write_run(runs, HEAD, seed, method, points)
    got = judged(runs)
    assert got.state == "not measured yet" and not got.failing
    assert "3 of 5 seeds run" in next(line for line in got.lines if line.startswith("- Headline"))
    text = synthetic.section(load_runs([str(runs)]).runs, tmp_path / "report")
    assert "- Partly run: o32-K10-on-sink (12 of 40 runs)." in text and "- Ran: none." in text
    assert "- Not run: o4-K3-on, o4-K3-on-sink, o4-K10-on," in text
    assert "**Verdict: not measured yet** (waiting for o32-K10-on-sink, o4-K3-on," in text
    assert "| o32-K10-on-sink | 900 | optimas | 3 | 0.130 [0.105, 0.155] | 0.090 [0.065, 0.115] | 0.060 [0.035, 0.085] | 78% |" in text
    assert "| 10% | 25% | 50% | 100% | 200% |" in text and (tmp_path / "report" / "plots" / "phase_map.png").stat().st_size
