"""Damaged, killed and capped run folders in `optimas show` and `optimas report` (issue 26 items 9 and
12): one line naming the file and what is wrong, never a traceback; the report lists each folder with
its reason, marks runs a cap stopped, and names a test-skipped run as such."""
from __future__ import annotations

import csv
import gzip
import json
import shutil
from pathlib import Path

import pytest

from optimas_cli.cli import main
from optimas_cli.system.results_file import read_results
from optimas_cli.system.run_folder import RunFolder

TOY = ["pipeline=toy_hint", "method=unoptimized"]


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("finished") / "run"
    assert main(["run", *TOY, f"hydra.run.dir={folder}"]) == 0
    return folder


def traces(folder: Path) -> list[bytes]:
    return gzip.decompress((folder / "predictions.jsonl.gz").read_bytes()).splitlines()


def first_test(folder: Path) -> dict:
    return next(json.loads(line) for line in traces(folder) if json.loads(line)["split"] == "test")


def damaged(finished: Path, tmp_path: Path, name: str, data: bytes) -> Path:
    folder = tmp_path / "damaged"
    shutil.copytree(finished, folder)
    (folder / name).write_bytes(data)
    return folder


def trace_damage(finished: Path) -> dict[str, bytes]:
    raw, line = b"\n".join(traces(finished)) + b"\n", first_test(finished)
    one = lambda record: gzip.compress(json.dumps(record).encode() + b"\n")  # noqa: E731
    return {
        "cut short": gzip.compress(raw)[:-40],
        "not gzip": b"plain text",
        "not UTF-8": gzip.compress(raw.replace(b'"', b'\xff"', 1)),
        "not JSON": gzip.compress(raw + b'{"key": \n'),
        "a list": gzip.compress(b"[1, 2]\n" + raw),
        "score as text": one({**line, "score": "high"}),
        "no key": one({k: v for k, v in line.items() if k != "key"}),
        "components as a list": one({**line, "components": []}),
        "repeat as text": one({**line, "repeat": "x"}),
    }


TRACE_REASONS = {"cut short": "is damaged", "not gzip": "is damaged: Not a gzipped file", "not UTF-8": "is not UTF-8",
                 "not JSON": "is not JSON", "a list": "a list, not a JSON object", "score as text": "'score' is 'high'",
                 "no key": "'key' is missing", "components as a list": "'components' is []",
                 "repeat as text": "'repeat' is 'x'"}


@pytest.mark.parametrize("kind", sorted(TRACE_REASONS))
def test_show_on_damaged_traces_is_one_line_naming_the_file(finished, tmp_path, capsys, kind):
    folder = damaged(finished, tmp_path, "predictions.jsonl.gz", trace_damage(finished)[kind])
    assert main(["show", str(folder)]) == 2  # before: 8 of these 9 were tracebacks
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "predictions.jsonl.gz" in lines[0] and TRACE_REASONS[kind] in lines[0], lines


RESULTS_DAMAGE = {"cut short": (lambda text: text[:100].encode(), "is not valid JSON"),
                  "not UTF-8": (lambda text: text.encode().replace(b'"pipeline"', b'"pipe\xffline"'), "is not UTF-8"),
                  "a list": (lambda text: b"[]", "does not hold a JSON object")}


@pytest.mark.parametrize("kind", sorted(RESULTS_DAMAGE))
def test_show_on_a_damaged_results_json_is_one_line_naming_it(finished, tmp_path, capsys, kind):
    damage, reason = RESULTS_DAMAGE[kind]
    folder = damaged(finished, tmp_path, "results.json", damage((finished / "results.json").read_text()))
    assert main(["show", str(folder)]) == 2  # before: a traceback each
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "results.json" in lines[0] and reason in lines[0], lines


def report_rows(tmp_path: Path, *folders: Path) -> tuple[dict[str, dict], str]:
    out = tmp_path / "report"
    main(["report", *map(str, folders), "--out", str(out)])
    with open(out / "runs.csv") as handle:
        rows = {Path(r["folder"]).name: r for r in csv.DictReader(handle)}
    return rows, (out / "report.md").read_text()


def test_report_lists_damaged_folders_with_their_reason(finished, tmp_path):
    """Before: non-UTF-8 traces, a trace line that is not an object, a wrong-typed score or repeat, and a
    ledger.runs that is text were tracebacks of the whole report."""
    root = tmp_path / "runs"
    damage = trace_damage(finished)
    results = read_results(finished)
    for seed, kind in enumerate(("not UTF-8", "a list", "score as text", "repeat as text")):
        shutil.copytree(finished, root / kind.replace(" ", "_"))
        (root / kind.replace(" ", "_") / "predictions.jsonl.gz").write_bytes(damage[kind])
        # four seeds of one cell (copies with one seed would be one run and its duplicates)
        seeded = {**results, "config": {**results["config"], "seed": seed}}
        (root / kind.replace(" ", "_") / "results.json").write_text(json.dumps(seeded))
    for name, broken in {"runs_as_text": {**results, "ledger": {**results["ledger"], "runs": "many"}},
                         "scores_as_text": {**results, "test": {**results["test"], "scores": "x"}}}.items():
        shutil.copytree(finished, root / name)
        (root / name / "results.json").write_text(json.dumps(broken))
    rows, text = report_rows(tmp_path, root)
    assert rows["runs_as_text"]["status"] == "left out" and "ledger.runs is 'many'" in rows["runs_as_text"]["reason"]
    assert rows["scores_as_text"]["status"] == "left out" and "test.scores" in rows["scores_as_text"]["reason"]
    for kind in ("not_UTF-8", "a_list", "score_as_text", "repeat_as_text"):
        assert rows[kind]["status"] == "ok"  # its mean is in results.json; only its CI is n/a, with the reason
    assert "CI n/a: 4 of 4 runs: predictions.jsonl.gz line 1" in text  # (the four are averaged as seeds)


def test_report_marks_stopped_runs_and_names_a_test_skipped_one(finished, tmp_path):
    root = tmp_path / "runs"
    results = read_results(finished)
    shutil.copytree(finished, root / "capped_runs")
    (root / "capped_runs" / "results.json").write_text(json.dumps({**results, "stopped": "max_runs"}))
    skipped = {k: v for k, v in results.items() if k not in ("test", "validation", "test_initial", "test_gain")}
    shutil.copytree(finished, root / "capped_usd")
    (root / "capped_usd" / "results.json").write_text(json.dumps(
        {**skipped, "stopped": "max_usd", "test_skipped": "budget cap max_usd=1 reached (2 dollars spent); ..."}))
    rows, text = report_rows(tmp_path, root)
    assert rows["capped_runs"]["status"] == "stopped by budget.max_runs"
    assert "### Runs stopped by a budget cap" in text and "capped_runs | budget.max_runs" in text
    assert rows["capped_usd"]["reason"].startswith("test skipped: budget cap max_usd=1 reached")  # was "lacks test.mean"


def test_show_says_what_a_killed_capped_or_running_folder_is(finished, tmp_path, capsys):
    killed = tmp_path / "killed"
    killed.mkdir()
    (killed / "config.yaml").write_text("seed: 0\n")
    capped = tmp_path / "capped"
    shutil.copytree(finished, capped)
    (capped / "predictions.jsonl.gz").unlink()
    results = read_results(finished)
    (capped / "results.json").write_text(json.dumps({**results, "stopped": "max_usd", "test_skipped": "..."}))
    running = RunFolder(tmp_path / "running")
    (running.path / "config.yaml").write_text("seed: 0\n")
    running.lock()
    try:
        for folder, expected in [(killed, "did not finish (killed"), (capped, "stopped by budget.max_usd before the test"),
                                 (running.path, "still in progress")]:
            assert main(["show", str(folder)]) == 2
            lines = capsys.readouterr().err.strip().splitlines()
            assert len(lines) == 1 and expected in lines[0], lines  # before: "written before runs kept traces"
    finally:
        running.unlock()
