"""Bad values through the CLI (issue 18 item 9): one clear line on stderr, exit 2, no results.json."""
from __future__ import annotations

import gzip
import json

import pytest

from tests.cli_runner import optimas

TOY = ["pipeline=toy_retriever", "method=unoptimized"]


def assert_refused(proc, run_dir, expected: str) -> None:
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and expected in lines[0], proc.stderr
    assert not (run_dir / "results.json").exists()


@pytest.mark.parametrize(
    "override, expected",
    [
        ("budget.train_size=abc", "budget.train_size='abc' is not an integer"),
        ("budget.test_size=-1", "budget.test_size=-1 must be at least 1"),
        ("budget.val_size=0", "budget.val_size=0 must be at least 1"),
        ("repeats=0", "repeats must be at least 1, got 0"),
        ("lm.temperature=5", "lm.temperature=5 is outside [0.0, 2.0]"),
        ("lrf.collect.temperature=-1", "lrf.collect.temperature=-1 is outside [0.0, 2.0]"),
        ("seed=abc", "seed='abc' is not an integer"),  # issue 26 item 10: was a ValueError traceback
    ],
)
def test_bad_value_is_refused_before_any_work(tmp_path, override, expected):
    run_dir = tmp_path / "run"
    proc = optimas("run", *TOY, override, f"hydra.run.dir={run_dir}", cwd=tmp_path)
    assert_refused(proc, run_dir, expected)
    assert not run_dir.exists()  # refused on the command line: Hydra never made the run folder


def test_an_unwritable_run_folder_is_one_line(tmp_path):
    """Issue 26 item 10: hydra.run.dir=/proc/x was Hydra's FileNotFoundError traceback."""
    proc = optimas("run", *TOY, "hydra.run.dir=/proc/x", cwd=tmp_path)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "cannot write the run folder /proc/x" in lines[0], proc.stderr


def test_temperature_range_is_the_providers(tmp_path):
    run_dir = tmp_path / "run"
    proc = optimas("run", *TOY, "lm=anthropic", "lm.temperature=1.5", f"hydra.run.dir={run_dir}", cwd=tmp_path)
    assert_refused(proc, run_dir, "outside [0.0, 1.0], the range anthropic/")


def test_every_job_of_a_sweep_is_checked(tmp_path):
    """The command line composes every job of the sweep: a bad value in job 1 stops it before job 0 runs."""
    sweep = tmp_path / "sweep"
    proc = optimas("run", "-m", *TOY, "repeats=1,0", f"hydra.sweep.dir={sweep}", cwd=tmp_path)
    assert_refused(proc, sweep, "repeats must be at least 1, got 0")
    assert not sweep.exists()


def _bigcodebench_rows(n: int) -> bytes:
    row = {"task_id": "BigCodeBench/0", "complete_prompt": "def f():\n", "instruct_prompt": "Write f.",
           "canonical_solution": "    return 1\n", "code_prompt": "def f():\n", "test": "pass", "entry_point": "f",
           "doc_struct": "{}", "libs": "[]"}
    return b"".join(json.dumps({**row, "task_id": f"BigCodeBench/{i}"}).encode() + b"\n" for i in range(n))


@pytest.mark.parametrize(
    "damage, expected",
    [
        (lambda data: gzip.compress(data)[:-30], "is truncated or corrupt"),
        (lambda data: gzip.compress(data.replace(b"Write f.", b"Write \xff.", 1)), "line 1 is not UTF-8 text (byte 0xff)"),
    ],
    ids=["truncated_gzip", "non_utf8_byte"],
)
def test_damaged_data_file_is_one_line(tmp_path, damage, expected):
    folder = tmp_path / "data" / "bigcodebench"
    folder.mkdir(parents=True)
    (folder / "BigCodeBench-v0.1.0.jsonl.gz").write_bytes(damage(_bigcodebench_rows(200)))
    run_dir = tmp_path / "run"
    proc = optimas("run", "pipeline=bigcodebench", "method=unoptimized", "budget=smoke",
                   f"data_dir={tmp_path / 'data'}", f"hydra.run.dir={run_dir}", cwd=tmp_path)
    assert_refused(proc, run_dir, expected)
    assert "BigCodeBench-v0.1.0.jsonl.gz" in proc.stderr and len(proc.stderr) < 400
