"""Seeds are seeds, not extra examples: a repeated seed never narrows an interval, the seed-level interval
is Student's t over the seeds' own means, and each seed's gain is paired with its own initial
configuration when no Unoptimized run of that seed exists."""
from __future__ import annotations

import csv
import json
import statistics
from pathlib import Path

import pytest

from optimas_cli.report.cli import write_report
from optimas_cli.report.runs import load_runs
from optimas_cli.stats import mean_ci, mean_ci_over_runs, seed_interval, t_quantile
from optimas_cli.system.traces import PREDICTIONS, TraceSink


def test_identical_seeds_give_the_one_seed_interval():
    scores = [0.0, 1.0, 1.0, 0.0, 1.0, 0.0, 0.0, 1.0]
    one = mean_ci_over_runs([scores])
    assert one == mean_ci(scores)
    assert mean_ci_over_runs([scores, scores]) == one
    assert mean_ci_over_runs([scores] * 5) == one


def test_seeds_that_disagree_are_wider_than_pooled_examples():
    a, b = [1.0] * 8 + [0.0] * 2, [0.0] * 8 + [1.0] * 2
    pooled = mean_ci(a + b)  # the seeds counted as 20 examples: what the report must not do
    both = mean_ci_over_runs([a, b])
    assert both.estimate == 0.5
    assert both.high - both.low > 1.5 * (pooled.high - pooled.low)


def test_runs_of_different_lengths_are_refused():
    with pytest.raises(ValueError, match="same examples"):
        mean_ci_over_runs([[1.0, 0.0], [1.0]])


def test_the_seed_interval_is_student_t_over_the_seed_means():
    assert t_quantile(0.975, 1) == pytest.approx(12.7062, abs=1e-3)
    assert t_quantile(0.975, 2) == pytest.approx(4.3027, abs=1e-3)
    assert t_quantile(0.975, 30) == pytest.approx(2.0423, abs=1e-3)
    means = [8 / 99, 13 / 99, 0.0]  # the Amazon budget=cpu Optimas seeds' gains over their initial configuration
    ci = seed_interval(means)
    half = 4.3027 * statistics.stdev(means) / 3 ** 0.5
    assert (ci.low, ci.high) == pytest.approx((statistics.fmean(means) - half, statistics.fmean(means) + half), abs=1e-4)
    assert seed_interval([0.3]) is None  # one seed says nothing about seed-to-seed spread


def write_run(folder: Path, *, method: str, seed: int, scores: list[float], initial: list[float] | None = None):
    folder.mkdir(parents=True)
    sink = TraceSink(folder / PREDICTIONS)
    for split, values in (("test", scores), ("test_initial", initial or [])):
        sink.write({"key": f"q{i}", "split": split, "repeat": 0, "score": s, "output": {"answer": str(s)}}
                   for i, s in enumerate(values))
    mean = statistics.fmean(scores)
    (folder / "results.json").write_text(json.dumps({
        "pipeline": "toy_hint", "method": method, "metric": "f1",
        "test": {"mean": mean, "std": 0.0, "scores": [mean], "n": len(scores)},
        "ledger": {"runs": 1.0, "tokens": 0, "calls": 0}, "config": {"seed": seed, "method": {"name": method}}}))


def paired_rows(out: Path) -> dict[str, dict]:
    with (out / "table2_paired.csv").open() as handle:
        return {r["method"]: r for r in csv.DictReader(handle)}


def test_a_repeated_seed_does_not_narrow_the_report_interval(tmp_path):
    scores = [0.0, 1.0, 1.0, 0.0, 1.0, 0.0]
    write_run(tmp_path / "one" / "s0", method="optimas", seed=0, scores=scores)
    write_run(tmp_path / "two" / "s0", method="optimas", seed=0, scores=scores)
    write_run(tmp_path / "two" / "s1", method="optimas", seed=1, scores=scores)
    write_report(load_runs([str(tmp_path / "one")]), tmp_path / "r1")
    write_report(load_runs([str(tmp_path / "two")]), tmp_path / "r2")
    one, two = paired_rows(tmp_path / "r1")["optimas"], paired_rows(tmp_path / "r2")["optimas"]
    assert two["runs"] == "2"
    assert (two["ci_low"], two["ci_high"]) == (one["ci_low"], one["ci_high"])


def test_each_seed_is_paired_with_its_own_initial_configuration(tmp_path):
    # Unoptimized ran seed 0 only; seed 1's gain is measured against its own initial configuration.
    base = [0.0, 0.0, 1.0, 0.0, 0.0, 1.0, 0.0, 0.0]
    write_run(tmp_path / "u0", method="unoptimized", seed=0, scores=base)
    write_run(tmp_path / "o0", method="optimas", seed=0, scores=[1.0] * 8, initial=base)
    write_run(tmp_path / "o1", method="optimas", seed=1, scores=[0.0] * 8, initial=[0.0] * 8)
    text = write_report(load_runs([str(tmp_path)]), tmp_path / "r")
    row = paired_rows(tmp_path / "r")["optimas"]
    gains = [1.0 - statistics.fmean(base), 0.0]  # seed 0 against Unoptimized, seed 1 against its initial config
    assert float(row["delta"]) == pytest.approx(statistics.fmean(gains))
    assert "seeds [" in text and "vs Unoptimized / initial config" in text
