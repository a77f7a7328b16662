"""`optimas report` draws accuracy against cost per pipeline (plots/pareto.png) and writes its numbers to
pareto.csv: a row per method with its mean test score, 95% CI, number of runs, executed optimization runs
and LM tokens, and a row per floor, each the value the report's own tables computed."""
from __future__ import annotations

import csv
from pathlib import Path

import pytest

from optimas_cli.data_files import local_file
from optimas_cli.report.cli import write_report
from optimas_cli.report.plots import _frontier_rows
from optimas_cli.report.runs import find_run_folders, load_runs

RUNS = Path(__file__).resolve().parent.parent / "docs" / "results" / "pubmedqa-cpu" / "runs"  # packed: runs.runs.tar.xz


def read_csv(path: Path) -> list[dict]:
    with path.open() as handle:
        return list(csv.DictReader(handle))


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("report")
    write_report(load_runs([str(RUNS)]), out)
    return out


def test_pareto_csv_has_a_row_per_method_and_per_floor_with_the_tables_values(report):
    rows = read_csv(report / "pareto.csv")
    methods = {r["method"]: r for r in rows if r["kind"] == "method"}
    assert set(methods) == {p.name.split("-")[1] for p in find_run_folders([str(RUNS)])}  # unoptimized, single_llm, ...
    floors_table = read_csv(report / "table2_floors.csv")
    for name, row in methods.items():
        same = next(r for r in floors_table if r["method"] == name)
        assert (row["score"], row["ci_low"], row["ci_high"], row["runs"]) == (
            same["mean"], same["ci_low"], same["ci_high"], same["runs"])
        cost = next(r for r in read_csv(report / "table3.csv") if r["method"] == name)
        assert float(row["executed_runs"]) == pytest.approx(float(cost["executed_runs"]))
        assert float(row["lm_tokens"]) == pytest.approx(float(cost["lm_tokens"]))
    assert methods["optimas"]["runs"] == "3" and float(methods["optimas"]["ci_low"]) < float(methods["optimas"]["score"])
    floors = {r["method"]: r["score"] for r in rows if r["kind"] == "floor"}
    assert floors == {r["method"]: r["mean"] for r in floors_table if r["method"].startswith("floor:")}
    if local_file(None, "pubmedqa", "ori_pqal.json") is not None:  # the floors need the pipeline's data
        assert floors["floor:majority 'yes'"] == "0.5" and "floor:chance" in floors


def test_the_plot_is_written_and_linked_from_the_report(report):
    png = report / "plots" / "pareto.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
    assert "(plots/pareto.png)" in (report / "report.md").read_text()


def test_the_frontier_is_the_cheapest_row_for_its_score():
    rows = [["p", "method", m, "", m, 1, score, None, None, runs, None, ""]
            for m, score, runs in (("a", 0.5, 0.0), ("b", 0.4, 10.0), ("c", 0.6, 20.0), ("d", 0.6, 30.0))]
    assert [r[2] for r in _frontier_rows(rows, 9)] == ["a", "c"]  # b: worse and dearer than a; d: dearer than c
