"""`optimas report`: tables reproduce results.json exactly, repeats are averaged, ablation values get
their own columns, broken runs are listed with a reason, plots are written.

Real toy runs come from the CLI (toy pipelines, method=unoptimized); the optimas-style runs (history,
lrf alignment) are results.json files written here from a real run's config."""
from __future__ import annotations

import copy
import csv
import json
import statistics
from pathlib import Path

import pytest

from optimas_cli.cli import main as cli_main
from optimas_cli.report.runs import Run
from optimas_cli.report.variants import labels
from optimas_cli.system.results_file import read_results
from optimas_cli.system.traces import PREDICTIONS, TraceSink, read_predictions
from tests.cli_runner import optimas


def fake_optimas(base: dict, *, seed: int, mean: float, fresh_size: int | None = None, pipeline: str | None = None,
                 method: str = "optimas") -> dict:
    """An optimas-style results.json built on a real run's results: new test scores, history, lrf block."""
    results = copy.deepcopy(base)
    results["method"] = method
    if pipeline:
        results["pipeline"] = pipeline
    results["test"] = {"mean": mean, "std": 0.0125 * (seed + 1), "scores": [mean - 0.01, mean, mean + 0.01], "n": 5}
    results["ledger"] = {"runs": 42.5 + seed, "paper_runs": 40.0 + seed, "calls": 300 + seed, "tokens": 12345 + seed,
                         "cost": 0.0, "seconds": 3.0,
                         "usd": 0.25 * (seed + 1), "unpriced_calls": 2 * seed, "compute_seconds": 10.0 + seed,
                         "by_phase": {"test": {"runs": 15.0, "paper_runs": 15.0},
                                      "final_validation": {"runs": 5.0, "paper_runs": 5.0},
                                      "validation": {"runs": 12.5 + seed, "paper_runs": 10.0 + seed}}, "lm": {}}
    results["history"] = [
        {"iteration": 1, "component": "hinter", "val_before": 2.1, "val_after": 2.1, "val_candidate": 1.9, "accepted": False},
        {"iteration": 2, "component": "hinter", "val_before": 2.1, "val_after": 2.6, "val_candidate": 2.6, "accepted": True},
        {"iteration": 3, "component": "answerer", "val_before": 2.6, "val_after": 2.6, "accepted": False},
    ]
    results["lrf"] = {
        "components": {"hinter": {"pairwise_accuracy": 0.8 + 0.05 * seed, "judge_accuracy": 0.5, "n_pairs": 10,
                                  "judge_parse_rate": 0.9, "pairs": {"trained": 30, "indistinguishable": 0, "tied": 4}},
                       "answerer": {"pairwise_accuracy": 0.7, "judge_accuracy": 0.45, "n_pairs": 6},
                       "router": {"pairwise_accuracy": None, "judge_accuracy": None, "n_pairs": 0,
                                  "pairs": {"trained": 5, "indistinguishable": 2, "tied": 1},
                                  "no_test": "5 pairs, fewer than the 20 a test split needs"}},
        "mean_pairwise_accuracy": 0.75 + 0.025 * seed, "mean_judge_accuracy": 0.475, "measured_on": "test",
        "judge_parse_rate": 0.9,
    }
    results["config"]["seed"] = seed
    results["config"]["method"] = {"name": method, "seed": seed}
    if fresh_size is not None:
        results["config"]["budget"]["fresh_size"] = fresh_size
    return results


def write(folder: Path, name: str, text: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text(text)


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("runs")
    proc = optimas("run", "-m", "pipeline=toy_hint,toy_retriever", "method=unoptimized",
                   f"hydra.sweep.dir={root / 'sweep'}", cwd=root)
    assert proc.returncode == 0, proc.stderr[-3000:]
    base = read_results(root / "sweep" / "0-toy_hint-unoptimized")
    fakes = {
        "optimas-seed0": fake_optimas(base, seed=0, mean=0.5),
        "optimas-seed1": fake_optimas(base, seed=1, mean=0.6),
        "optimas-fresh10": fake_optimas(base, seed=0, mean=0.3, fresh_size=10, pipeline="toy_retriever"),
        "optimas-fresh20": fake_optimas(base, seed=0, mean=0.25, fresh_size=20, pipeline="toy_retriever"),
    }
    for name, results in fakes.items():
        write(root / "fake" / name, "results.json", json.dumps(results))
    # Two seeds of an ablation whose traces gain a constant 0.01 / 0.03 per test example over Unoptimized.
    unoptimized = root / "sweep" / "0-toy_hint-unoptimized"
    for seed, shift in ((0, 0.01), (1, 0.03)):
        results = fake_optimas(base, seed=seed, mean=base["test"]["mean"] + shift, method="global_reward")
        results["test"]["scores"] = [results["test"]["mean"]] * 3
        del results["lrf"]
        write(root / "fake" / f"global-seed{seed}", "results.json", json.dumps(results))
        lines = read_predictions(unoptimized / PREDICTIONS)
        for line in lines:
            line["score"] += shift
        TraceSink(root / "fake" / f"global-seed{seed}" / PREDICTIONS).write(lines)
    lrf_only = {k: v for k, v in fakes["optimas-seed0"].items() if k not in ("test", "validation", "history")}
    lrf_only.update(method="train-lrf", pipeline="toy_hint")
    lrf_only["config"] = {**lrf_only["config"], "lrf": {**lrf_only["config"]["lrf"], "name": "other_backbone"}}
    lrf_only["lrf"] = {**lrf_only["lrf"], "mean_judge_accuracy": None, "judge_parse_rate": None, "measured_on": "train"}
    write(root / "fake" / "train-lrf", "results.json", json.dumps(lrf_only))
    # Broken runs: killed before results.json, cut off mid-write, and missing the test block.
    write(root / "fake" / "killed", "config.yaml", "pipeline: {}\n")
    write(root / "fake" / "half-written", "results.json", json.dumps(fakes["optimas-seed0"])[:200])
    no_test = {k: v for k, v in base.items() if k != "test"}
    write(root / "fake" / "no-test", "results.json", json.dumps(no_test))
    assert cli_main(["report", str(root / "sweep"), str(root / "fake"), "--out", str(root / "report")]) == 0
    return root


def read_csv(path: Path) -> list[dict]:
    with path.open() as handle:
        return list(csv.DictReader(handle))


def results_of(root: Path, *parts: str) -> dict:
    return read_results(root.joinpath(*parts))


def test_table2_equals_results_json_exactly(runs):
    rows = {(r["pipeline"], r["method"], r["variant"]): r for r in read_csv(runs / "report" / "table2.csv")}
    for job in ("0-toy_hint-unoptimized", "1-toy_retriever-unoptimized"):
        results = results_of(runs, "sweep", job)
        row = rows[(results["pipeline"], "unoptimized", "")]
        assert float(row["mean"]) == results["test"]["mean"] and float(row["std"]) == results["test"]["std"]
        assert row["runs"] == "1" and row["metric"] == results["metric"]
    # Two seeds of the same pipeline x method: averaged, std over their means, count 2.
    hint = rows[("toy_hint", "optimas", "")]
    assert (float(hint["mean"]), float(hint["std"]), hint["runs"]) == (statistics.fmean([0.5, 0.6]),
                                                                         statistics.pstdev([0.5, 0.6]), "2")
    baseline = results_of(runs, "sweep", "0-toy_hint-unoptimized")["test"]["mean"]
    gain = 100 * (statistics.fmean([0.5, 0.6]) - baseline) / baseline
    assert float(hint["optimas_vs_best_baseline_pct"]) == gain and hint["best_baseline"] == "Unoptimized"


def test_results_json_states_the_proposer(runs):
    results = results_of(runs, "sweep", "0-toy_hint-unoptimized")
    assert "proposer" in results and results["proposer"] is None  # Unoptimized searches no instructions


def test_ablation_values_get_their_own_columns(runs):
    rows = {(r["pipeline"], r["variant"]): r for r in read_csv(runs / "report" / "table2.csv") if r["method"] == "optimas"}
    assert float(rows[("toy_retriever", "budget.fresh_size=10")]["mean"]) == 0.3
    assert float(rows[("toy_retriever", "budget.fresh_size=20")]["mean"]) == 0.25
    text = (runs / "report" / "report.md").read_text()
    assert "Optimas [fresh_size=10]" in text and "Optimas [fresh_size=20]" in text


def test_markdown_bolds_the_best_of_each_row(runs):
    line = next(x for x in (runs / "report" / "report.md").read_text().splitlines() if x.startswith("| toy_hint |"))
    assert "**0.5500 ± 0.0500 (×2)**" in line
    assert "| 0.4200 [" in line and "| **0.4200" not in line  # the unoptimized baseline with its CI, not bold
    assert "| 0.4400 [0.2600, 0.6200]† (×2) |" in line  # the ablation: a paired gain that excludes 0
    assert "+31.0% vs Unoptimized" in line


def test_table3_costs_equal_the_ledgers(runs):
    rows = {(r["pipeline"], r["method"], r["variant"]): r for r in read_csv(runs / "report" / "table3.csv")}
    for job in ("0-toy_hint-unoptimized", "1-toy_retriever-unoptimized"):
        ledger = results_of(runs, "sweep", job)["ledger"]
        row = rows[(results_of(runs, "sweep", job)["pipeline"], "unoptimized", "")]
        assert float(row["system_runs"]) == ledger["runs"] and int(row["lm_tokens"]) == ledger["tokens"]
        assert float(row["executed_runs"]) == 0.0 and float(row["paper_runs"]) == 0.0  # only final validation and test
    hint = rows[("toy_hint", "optimas", "")]
    assert float(hint["system_runs"]) == 43.0 and float(hint["executed_runs"]) == 23.0  # mean of 22.5, 23.5
    assert float(hint["paper_runs"]) == 20.5  # mean of 20, 21: the paper's accounting, side by side
    assert float(hint["lm_tokens"]) == 12345.5
    # dollars and compute beside runs and tokens: means of the two seeds; unpriced calls are shown, not $0
    assert (float(hint["usd"]), float(hint["unpriced_calls"]), float(hint["compute_seconds"])) == (0.375, 1.0, 10.5)
    table3 = (runs / "report" / "report.md").read_text().split("Table 3")[1]
    line = next(x for x in table3.splitlines() if x.startswith("| toy_hint | Optimas |"))
    assert "$0.3750 + 1 unpriced calls" in line and "10.5" in line


def test_table4_alignment_per_pipeline(runs):
    rows = {(r["pipeline"], r["variant"]): r for r in read_csv(runs / "report" / "table4.csv")}
    hint = rows[("toy_hint", "lrf=minilm")]  # the two optimas seeds; the train-lrf run used another backbone
    assert float(hint["lrf_accuracy"]) == statistics.fmean([0.75, 0.775]) and hint["runs"] == "2"
    assert float(hint["judge_accuracy"]) == 0.475 and hint["judge_runs"] == "2" and hint["pairs"] == "32"
    other = rows[("toy_hint", "lrf=other_backbone")]
    assert other["judge_accuracy"] == "" and other["judge_runs"] == "0"  # no judge ran: empty, not zero
    assert float(other["lrf_accuracy"]) == 0.75 and other["measured_on"] == "train"
    retriever = {k: v for k, v in rows.items() if k[0] == "toy_retriever"}
    assert set(retriever) == {("toy_retriever", "budget.fresh_size=10"), ("toy_retriever", "budget.fresh_size=20")}
    text = (runs / "report" / "report.md").read_text()
    assert "| **76.25% ± 1.25 (×2)** | 47.50% ± 0.00 (×2) | 90.00% | 32 test · 2 n/a† |" in text
    assert "| **75.00%** | n/a | n/a | 16 train pairs* · 1 n/a† |" in text
    assert float(hint["judge_parse_rate"]) == 0.9 and hint["indistinguishable"] == "4"
    assert hint["components_without_test"] == "2"
    components = read_csv(runs / "report" / "table4_components.csv")
    assert {float(c["pairwise_accuracy"]) for c in components if c["component"] == "hinter"} == {0.8, 0.8 + 0.05}
    router = [c for c in components if c["component"] == "router"]
    assert {(c["pairwise_accuracy"], c["trained"], c["indistinguishable"], c["tied"]) for c in router} == {("", "5", "2", "1")}
    assert {c["no_test"] for c in router} == {"5 pairs, fewer than the 20 a test split needs"}


def test_broken_runs_are_listed_with_their_reason(runs):
    text = (runs / "report" / "report.md").read_text()
    left = {Path(r["folder"]).name: r["reason"] for r in read_csv(runs / "report" / "runs.csv") if r["status"] == "left out"}
    assert set(left) == {"killed", "half-written", "no-test"}
    assert "no results.json" in left["killed"]
    assert "not valid JSON" in left["half-written"]
    assert "lacks test.mean" in left["no-test"]
    for name, reason in left.items():
        assert name in text and reason.split(" (")[0] in text
    assert "3 left out" in text


def test_plots_are_written(runs):
    for name in ("validation_reward.png", "accuracy_vs_runs.png"):
        data = (runs / "report" / "plots" / name).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000
        assert f"plots/{name}" in (runs / "report" / "report.md").read_text()


def test_bad_folder_is_a_one_line_error(tmp_path, capsys):
    assert cli_main(["report", str(tmp_path / "nope")]) == 2
    assert "no such folder" in capsys.readouterr().err


def test_only_broken_runs_exit_1_and_still_list_them(tmp_path):
    write(tmp_path / "runs" / "a", "results.json", "{")
    assert cli_main(["report", str(tmp_path / "runs"), "--out", str(tmp_path / "out")]) == 1
    assert "not valid JSON" in (tmp_path / "out" / "report.md").read_text()


def _run(config: dict) -> Run:
    return Run(Path("x"), {"pipeline": "p", "method": "m", "config": config})


def test_variant_labels_ignore_seeds_and_name_swapped_groups():
    base = {"seed": 0, "data_dir": "/a", "budget": {"name": "small", "fresh_size": 6}, "lrf": {"name": "minilm", "lr": 1}}
    repeat = {**base, "seed": 1, "data_dir": "/b"}
    assert labels([_run(base), _run(repeat)]) == ["", ""]
    ablation = {**base, "budget": {"name": "small", "fresh_size": 10}}
    assert labels([_run(base), _run(ablation)]) == ["budget.fresh_size=6", "budget.fresh_size=10"]
    other_lrf = {**base, "lrf": {"name": "llama3_8b_lora", "lr": 2}}
    assert labels([_run(base), _run(other_lrf)]) == ["lrf=minilm", "lrf=llama3_8b_lora"]
    # the synthetic simulator's instance is the seed's draw: seeds 0-2 of a cell are its repeats, one column
    cell = {"seed": 0, "pipeline": {"name": "synthetic", "instance": 0, "options": 4}}
    draws = [{**cell, "seed": s, "pipeline": {**cell["pipeline"], "instance": s}} for s in (1, 2)]
    assert labels([_run(cell), *map(_run, draws)]) == ["", "", ""]
    wider = {**cell, "pipeline": {**cell["pipeline"], "options": 32}}
    assert labels([_run(cell), _run(wider)]) == ["pipeline.options=4", "pipeline.options=32"]


def test_validation_plot_points_come_from_the_history(tmp_path):
    from optimas_cli.report.plots import rejected_points, validation_curve
    from optimas_cli.report.runs import Run

    history = fake_optimas({"config": {}}, seed=0, mean=0.8)["history"]
    run = Run(folder=tmp_path / "run", results={"history": history, "splits": {"val": 5}})
    assert validation_curve(run) == ([0, 1, 2, 3], pytest.approx([0.42, 0.42, 0.52, 0.52]), "mean")
    assert rejected_points(run) == [(1, pytest.approx(0.38))]  # iteration 3 kept its value: nothing validated


def test_paired_table_gives_cis_effective_repeats_and_the_gain_over_unoptimized(runs):
    rows = {(r["pipeline"], r["method"], r["variant"]): r for r in read_csv(runs / "report" / "table2_paired.csv")}
    base = rows[("toy_hint", "unoptimized", "")]
    traced = read_predictions(runs / "sweep" / "0-toy_hint-unoptimized" / PREDICTIONS)
    per_example = [r["score"] for r in traced if r["split"] == "test" and r["repeat"] == 0]
    assert float(base["mean"]) == pytest.approx(statistics.fmean(per_example))
    assert float(base["ci_low"]) < float(base["mean"]) < float(base["ci_high"])
    # greedy toy: the 3 test repeats gave the same outputs, so they are 1 effective repeat
    assert (base["repeats"], base["effective_repeats"], base["delta"]) == ("3", "1", "")
    ablation = rows[("toy_hint", "global_reward", "")]
    assert ablation["runs"] == "2" and ablation["examples"] == base["examples"] == str(len(per_example))
    # seeds gained 0.01 and 0.03 on every example: the paired difference is their mean, and resampling the
    # seeds (not only the examples) spans their two gains
    assert [float(ablation[k]) for k in ("delta", "delta_low", "delta_high")] == pytest.approx([0.02, 0.01, 0.03])
    assert ablation["delta_excludes_zero"] == "True"
    text = (runs / "report" / "report.md").read_text()
    assert "| toy_hint | Global reward | — | 2 | 5 | 6 (2 effective) | 0.4400 |" in text  # — : no prompt search
    assert ablation["proposer"] == "—"
    assert "| +0.0200 | [+0.0100, +0.0300] †; seeds [-0.1071, +0.1471] |" in text


def test_runs_without_traces_report_ci_as_na_with_the_reason(runs):
    rows = {(r["pipeline"], r["method"], r["variant"]): r for r in read_csv(runs / "report" / "table2_paired.csv")}
    old = rows[("toy_hint", "optimas", "")]
    assert old["ci_low"] == old["delta"] == ""
    assert old["note"] == "CI n/a: 2 of 2 runs: no predictions.jsonl.gz (a run from before per-example traces)"
    line = next(x for x in (runs / "report" / "report.md").read_text().splitlines()
                if x.startswith("| toy_hint | Optimas |"))
    assert "| n/a | n/a | n/a |" in line and "no predictions.jsonl.gz" in line


def test_gate_plot_shows_each_decision_with_its_delta_and_ci(tmp_path):
    from optimas_cli.report.plots import gate_points, plot_gate

    history = fake_optimas({"config": {}}, seed=0, mean=0.8)["history"]
    history[0]["gate"] = {"rule": "paired", "alpha": 0.1, "accepted": False, "delta": -0.04, "ci_low": -0.1,
                          "ci_high": 0.02, "n": 5}
    history[1]["gate"] = {"rule": "paired", "alpha": 0.1, "accepted": True, "delta": 0.1, "ci_low": 0.04,
                          "ci_high": 0.16, "n": 5}
    run = Run(folder=tmp_path / "run", results={"pipeline": "p", "method": "optimas", "history": history})
    assert gate_points(run) == [(1, -0.04, -0.1, 0.02, False), (2, 0.1, 0.04, 0.16, True)]  # 3: nothing judged
    path = plot_gate([run], tmp_path / "gate.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert plot_gate([Run(tmp_path, {"pipeline": "p", "method": "m", "history": []})], tmp_path / "none.png") is None


def test_optimas_delta_compares_the_default_run_not_the_best_variant():
    from optimas_cli.report.formatting import Summary
    from optimas_cli.report.paper_tables import _improvement

    summaries = {("unoptimized", ""): Summary.of([0.5], 0.0),
                 ("optimas", "method.gate=paired"): Summary.of([0.9], 0.0),   # the better variant...
                 ("optimas", "method.gate=strict"): Summary.of([0.6], 0.0)}   # ...but this one is the default
    gain, base, ours = _improvement(summaries)
    assert ours == ("optimas", "method.gate=strict") and base == ("unoptimized", "") and gain == pytest.approx(20.0)
    del summaries[("optimas", "method.gate=strict")]
    assert _improvement(summaries) == (None, None, None)  # no default run: no Δ, not the best variant's


def traced_run(folder: Path, method: str, scores: list[float], **results) -> Run:
    """A run folder holding only what the verdict tables read: results.json and test traces."""
    TraceSink(folder / PREDICTIONS).write(
        {"key": f"q{i}", "split": "test", "repeat": 0, "score": s, "output": {"answer": str(s)}}
        for i, s in enumerate(scores))
    data = {"pipeline": results.pop("pipeline", "p"), "method": method, "metric": "accuracy",
            "test": {"mean": statistics.fmean(scores), "std": 0.0, "scores": [statistics.fmean(scores)], "n": len(scores)},
            "ledger": {"runs": 1.0, "tokens": 0, "calls": 0}, "config": {"seed": results.pop("seed", 0)}, **results}
    return Run(folder=folder, results=data)


def test_verdicts_give_the_paired_gain_its_evidence_and_the_mean_per_baseline(tmp_path):
    from optimas_cli.report.render import markdown
    from optimas_cli.report.targets import gain_table, mean_table

    base = [0.0] * 10 + [1.0] * 10
    gate = {"rule": "strict", "delta": 0.1, "ci_low": 0.0, "ci_high": 0.2, "n": 10}
    lrf = {"components": {"solver": {"pairs": {"collected": 7}, "n_pairs": 0},
                          "analyst": {"pairs": {"collected": 0}, "n_pairs": 0}},
           "mean_pairwise_accuracy": None}
    runs = [
        traced_run(tmp_path / "u", "unoptimized", base),
        # two seeds that each fix 8 of the 10 failures: a gain the test set can tell from noise
        *(traced_run(tmp_path / f"o{seed}", "optimas", [1.0] * 8 + [0.0] * 2 + [1.0] * 10, seed=seed, lrf=lrf,
                     history=[{"iteration": 1, "component": "solver", "kind": "prompt", "accepted": True, "gate": gate},
                              {"iteration": 2, "component": "analyst", "accepted": False}])
          for seed in (0, 1)),
        traced_run(tmp_path / "s", "single_llm", [1.0] * 20),
        # a second pipeline where Optimas changes nothing
        traced_run(tmp_path / "u2", "unoptimized", base, pipeline="q"),
        traced_run(tmp_path / "o2", "optimas", base, pipeline="q", lrf=lrf, history=[]),
    ]
    gains = gain_table(runs, "src")
    rows = {r[0]: r for r in gains.csv_rows}
    assert rows["p"][1:6] == [2, pytest.approx(0.4), pytest.approx(0.2), pytest.approx(0.6), True]
    assert rows["p"][6] is None  # no floor declared for the pipeline: nothing blocks the verdict
    assert rows["p"][7] == "solver=14 analyst=0" and rows["p"][9:11] == [4, 2]
    assert rows["q"][2:6] == [0.0, 0.0, 0.0, False]
    text = markdown(gains)
    assert "solver prompt (seed 1, it. 1) +0.100 [+0.000, +0.200]" in text
    assert "on 1 of 2 pipeline(s)" in text
    means = {r[0]: r for r in mean_table(runs, "src").csv_rows}
    # Optimas averages (0.9 + 0.5) / 2 over p and q against Unoptimized's 0.5, and 0.9 against Single LLM's 1.0 on p
    assert means["unoptimized"][4:] == ["p q", 0.5, pytest.approx(0.7), True]
    assert means["single_llm"][4:] == ["p", 1.0, pytest.approx(0.9), False]
    assert "not shown at least that of 1 baseline(s) above the floors: Single LLM" in markdown(mean_table(runs, "src"))


def test_ablation_verdict_pairs_seeds_and_weighs_what_each_side_spent(tmp_path):
    from optimas_cli.report.render import markdown
    from optimas_cli.report.targets import matched_table

    def spent(runs: float, cap: float | None = None) -> dict:
        return {"ledger": {"runs": runs, "tokens": 0, "calls": 0, **({"caps": {"max_runs": cap}} if cap else {})}}

    accepted = [{"iteration": 1, "accepted": True, "runs_so_far": 40.0},
                {"iteration": 2, "accepted": False, "runs_so_far": 100.0}]
    runs = [
        traced_run(tmp_path / "o0", "optimas", [1.0] * 6 + [0.0] * 4, seed=0, history=accepted, **spent(100.0)),
        traced_run(tmp_path / "o1", "optimas", [1.0] * 4 + [0.0] * 6, seed=1, history=accepted, **spent(110.0)),
        traced_run(tmp_path / "g0", "global_reward", [1.0] * 2 + [0.0] * 8, seed=0, **spent(90.0, 100.0)),
        traced_run(tmp_path / "g1", "global_reward", [1.0] * 2 + [0.0] * 8, seed=1, **spent(112.0, 110.0)),
        traced_run(tmp_path / "g2", "global_reward", [1.0] * 10, seed=2, **spent(1.0)),  # no Optimas seed 2
        # an ablation that spent less than Optimas needed to reach its tested configuration
        traced_run(tmp_path / "n0", "optimas_no_adapt", [0.0] * 10, seed=0, **spent(30.0, 100.0)),
    ]
    rows = {r[1]: r for r in matched_table(runs, "src").csv_rows}
    # seeds 0 and 1 only; per-example means over them: Optimas 0.5, global reward 0.2, paired +0.3
    assert rows["global_reward"][3:6] == ["0 1", pytest.approx(0.5), pytest.approx(0.2)]
    assert rows["global_reward"][6] == pytest.approx(0.3)
    assert rows["global_reward"][9:] == ["100.0 110.0", "40.0 40.0", "90.0 112.0", "100.0 110.0", True]
    assert rows["optimas_no_adapt"][3] == "0" and rows["optimas_no_adapt"][-1] is False  # 40 runs > its 30
    text = markdown(matched_table(runs, "src"))
    assert "| 100.0 (40.0) / 110.0 (40.0) | 90.0 (100) / 112.0 (110) | yes |" in text
    assert "in 1 of 2 comparison(s)" in text
    assert matched_table(runs[:2], "src") is None  # no ablation run: no table


def test_parse_failures_of_several_seeds_are_summed_into_one_line(tmp_path):
    from optimas_cli.report.parse_failures import parse_failure_table

    def counted(seed: int, count: int) -> Run:
        return traced_run(tmp_path / f"r{seed}", "optimas", [1.0], seed=seed, parse_failures={
            "solver": {"test": {"count": count, "executions": 60, "rate": count / 60}}})

    table = parse_failure_table([counted(0, 3), counted(1, 0)], "src")
    assert table.rows == [["p", "Optimas", "solver", "2", "2.50% (3)", "120"]]
    assert [r[5] for r in table.csv_rows] == [3, 0]  # the CSV keeps a line per run


def test_a_variant_showing_the_shared_optimizer_defaults_is_the_default_run():
    from optimas_cli.report.paper_tables import _is_default

    assert _is_default("method.optimizer.weights.steps=2, method.gate=strict")
    assert not _is_default("method.optimizer.weights.steps=4")


def test_the_verdict_compares_optimas_only_with_baselines_that_searched_the_same_candidates(tmp_path):
    from optimas_cli.report.paper_tables import table2_paired
    from optimas_cli.report.render import markdown
    from optimas_cli.report.targets import mean_table

    lm_variant = "method.optimizer.prompt.proposer=lm, proposer=lm"  # what variants.py labels a proposer=lm run
    runs = [
        traced_run(tmp_path / "u", "unoptimized", [0.0] * 10, proposer=None),
        traced_run(tmp_path / "om", "optimas", [1.0] * 8 + [0.0] * 2, proposer="mixed"),
        traced_run(tmp_path / "d", "dspy", [1.0] * 9 + [0.0], proposer="mixed"),
        traced_run(tmp_path / "t", "textgrad", [1.0] * 2 + [0.0] * 8, proposer="lm"),
    ]
    rows = {(r[0], r[3]): r for r in mean_table(runs, "src").csv_rows}
    # DSPy searched the pool too: compared with the mixed Optimas run (and ahead of it)
    assert rows[("dspy", "mixed")][2:] == ["mixed", "mixed", "p", 0.9, 0.8, False]
    assert rows[("unoptimized", "mixed")][2:] == [None, "mixed", "p", 0.0, 0.8, True]
    # TextGrad searched LM-written instructions only: no Optimas run did, so it is not compared at all
    assert rows[("textgrad", None)][2:] == ["lm", None, "p", 0.2, None, None]
    text = markdown(mean_table(runs, "src"))
    assert "1 baseline(s) above the floors: DSPy (vs Optimas mixed)" in text and "Not compared" in text and "TextGrad (lm)" in text
    assert "proposer=lm`" in text
    # a proposer=lm Optimas run: TextGrad meets it; a baseline without a prompt search meets both Optimas runs
    lm_run = traced_run(tmp_path / "ol", "optimas", [1.0] * 5 + [0.0] * 5, proposer="lm")
    lm_run.variant = lm_variant
    rows = {(r[0], r[3]): r for r in mean_table([*runs, lm_run], "src").csv_rows}
    assert rows[("textgrad", "lm")][2:] == ["lm", "lm", "p", 0.2, 0.5, True]
    assert set(rows) == {("unoptimized", "mixed"), ("unoptimized", "lm"), ("dspy", "mixed"), ("textgrad", "lm")}
    # Table 2's rows state each method's proposer
    paired = {r[1]: r[2] for r in table2_paired([*runs, lm_run], "src").rows}
    assert paired == {"Unoptimized": "—", "Optimas": "mixed", "DSPy": "mixed", "TextGrad": "lm",
                      "Optimas [prompt.proposer=lm, proposer=lm]": "lm"}  # the header's shortest distinct keys


def test_runs_recorded_before_the_proposer_get_the_one_their_version_searched():
    from optimas_cli.report.proposers import proposer_of

    loop = {"method": "optimas", "config": {"lm": {"model": "local/smollm2-135m-instruct"},
                                            "method": {"optimizer": {"prompt": {"proposer": "auto"}}}}}
    assert proposer_of(loop) == "mixed"  # auto, on the embedded model
    loop["config"]["lm"]["model"] = "openai/gpt-4o-mini"
    assert proposer_of(loop) == "lm"
    assert proposer_of({"method": "dspy"}) == proposer_of({"method": "textgrad"}) == "lm"
    assert proposer_of({"method": "unoptimized", "config": {}}) is None
    assert proposer_of({"method": "dspy", "proposer": "mixed"}) == "mixed"  # recorded: as recorded


def test_table3_shows_each_methods_score_and_run_cap_beside_its_spend(tmp_path):
    from optimas_cli.report.paper_tables import table3

    def ledger(runs: float, cap: float | None) -> dict:
        return {"runs": runs, "paper_runs": runs, "calls": 3, "tokens": 10, "by_phase": {},
                "caps": {"max_runs": cap} if cap is not None else {}}

    runs = [traced_run(tmp_path / "o", "optimas", [1.0, 0.0], ledger=ledger(50.0, None)),
            traced_run(tmp_path / "d", "dspy", [0.0, 0.0], ledger=ledger(52.5, 50.0))]
    table = table3(runs, "src")
    rows = {r[1]: r for r in table.rows}
    assert rows["Optimas"][3:7] == ["0.5000", "50", "50", "—"]
    assert rows["DSPy"][3:7] == ["0.0000", "52.5", "52.5", "50"]
    csv_rows = {r[1]: dict(zip(table.csv_headers, r, strict=True)) for r in table.csv_rows}
    assert (csv_rows["dspy"]["test_mean"], csv_rows["dspy"]["max_runs"]) == (0.0, 50.0)
