"""The report pools replicates, never copies: runs with the same seed and settings count once (the
others are listed as duplicates), and variant headers stay short enough to read."""
from __future__ import annotations

import csv
import json
import os
import statistics
from pathlib import Path

from optimas_cli.report.cli import write_report
from optimas_cli.report.paper_tables import short_variant
from optimas_cli.report.runs import load_runs
from optimas_cli.system.traces import PREDICTIONS, TraceSink


def write_run(folder: Path, *, seed: int, scores: list[float], method: str = "optimas", when: float = 0.0,
              **settings) -> None:
    folder.mkdir(parents=True)
    TraceSink(folder / PREDICTIONS).write(
        {"key": f"q{i}", "split": "test", "repeat": 0, "score": s, "output": {"answer": str(s)}}
        for i, s in enumerate(scores))
    mean = statistics.fmean(scores)
    results = {"pipeline": "toy_hint", "method": method, "metric": "f1",
               "test": {"mean": mean, "std": 0.0, "scores": [mean], "n": len(scores)},
               "ledger": {"runs": 1.0, "tokens": 0, "calls": 0},
               "config": {"seed": seed, "method": {"name": method, **settings}}}
    (folder / "results.json").write_text(json.dumps(results))
    os.utime(folder / "results.json", (when, when))


def table2_rows(out: Path) -> list[dict]:
    with (out / "table2.csv").open() as handle:
        return list(csv.DictReader(handle))


def test_runs_with_the_same_seed_and_settings_count_once(tmp_path):
    seed0 = [0.0, 1.0, 0.0, 1.0, 1.0, 0.0]
    seed1 = [1.0, 1.0, 0.0, 1.0, 0.0, 1.0]
    for sweep in ("a", "b", "c"):  # three sweeps ran the same seed-0 cell
        write_run(tmp_path / sweep / "seed0", seed=0, scores=seed0, when=1000.0 + ord(sweep))
    write_run(tmp_path / "a" / "seed1", seed=1, scores=seed1, when=900.0)
    found = load_runs([str(tmp_path)])
    text = write_report(found, tmp_path / "report")

    (row,) = table2_rows(tmp_path / "report")
    assert row["runs"] == "2"  # seeds 0 and 1, not four runs
    assert float(row["mean"]) == statistics.fmean([statistics.fmean(seed0), statistics.fmean(seed1)])
    # The newest copy counts; the other two are listed, each with the run that was counted instead.
    kept = (tmp_path / "c" / "seed0").resolve()
    assert sorted(d.folder.parent.name for d in found.duplicates) == ["a", "b"]
    assert all(d.kept == kept for d in found.duplicates)
    assert "### Duplicate runs (not counted)" in text and f"| {tmp_path.resolve() / 'a' / 'seed0'} | {kept} |" in text
    with (tmp_path / "report" / "runs.csv").open() as handle:
        status = {Path(r["folder"]).parent.name + "/" + Path(r["folder"]).name: r["status"] for r in csv.DictReader(handle)}
    assert status["a/seed0"] == status["b/seed0"] == f"duplicate of {kept}" and status["c/seed0"] == "ok"


def test_other_settings_with_the_same_seed_are_not_duplicates(tmp_path):
    write_run(tmp_path / "strict", seed=0, scores=[0.0, 1.0], gate="strict")
    write_run(tmp_path / "paired", seed=0, scores=[1.0, 1.0], gate="paired")
    found = load_runs([str(tmp_path)])
    write_report(found, tmp_path / "report")
    assert found.duplicates == []
    assert sorted(r["variant"] for r in table2_rows(tmp_path / "report")) == ["method.gate=paired", "method.gate=strict"]


def test_variant_headers_keep_the_shortest_distinct_key_and_cut_long_values():
    assert short_variant("method.optimizer.prompt.candidates=4, budget=small") == "candidates=4, budget=small"
    # Two keys that end alike keep as much of their path as tells them apart.
    assert short_variant("method.temperature=0.7, lm.temperature=0") == "method.temperature=0.7, lm.temperature=0"
    long = "lm.model=hosted_vllm/meta-llama/Llama-3.1-8B-Instruct"
    assert short_variant(long) == "model=hosted_vllm/meta-llama/…"
    assert len(short_variant(long)) == len("model=") + 24
