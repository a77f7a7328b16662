"""The command line: the toy runs end to end, writes results.json, and bad input exits 2 in one line."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.cli_runner import optimas


@pytest.mark.parametrize(
    "pipeline, score", [("toy_retriever", 0.2625), ("toy_model_selector", 0.3333), ("toy_hint", 0.42)]
)
def test_unoptimized_toy_run_writes_results(tmp_path, pipeline, score):
    out = tmp_path / "run"
    proc = optimas("run", f"pipeline={pipeline}", "method=unoptimized", f"hydra.run.dir={out}", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    last = proc.stdout.strip().splitlines()[-1]
    assert f"= {score:.4f}" in last and "results.json" in last
    results = json.loads((out / "results.json").read_text())
    for key in ("pipeline", "method", "metric", "test", "validation", "ledger", "config"):
        assert key in results
    assert results["test"]["mean"] == pytest.approx(score, abs=1e-4)
    assert set(results["test"]) >= {"mean", "std", "scores", "n"}
    assert set(results["ledger"]) >= {"runs", "calls", "tokens", "seconds"}
    assert results["config"]["pipeline"]["_target_"].startswith("optimas_pipelines.toys")
    assert (out / "config.yaml").exists() and (out / "optimas.log").exists()


@pytest.mark.parametrize(
    "args, expected",
    [
        (["run", "pipeline=nope"], "unknown pipeline 'nope'; available pipelines:"),
        (["run", "method=nope"], "unknown method 'nope'"),
        (["run", "no_such_key=1"], "bad override"),
        (["run", "pipeline=toy_hint=="], "cannot parse"),
        (["frobnicate"], "unknown command"),
    ],
)
def test_bad_input_is_one_clear_line_and_exit_2(tmp_path, args, expected):
    proc = optimas(*args, cwd=tmp_path)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and expected in lines[0], proc.stderr


def test_list_shows_every_group(tmp_path):
    from optimas_cli.conf import CONF_DIR, options

    proc = optimas("list", cwd=tmp_path)
    assert proc.returncode == 0
    assert "toy_retriever" in proc.stdout and "unoptimized" in proc.stdout and "smoke" in proc.stdout
    # every group folder of conf/, the optimizer group too (not a top-level choice, placed by the loop methods)
    listed = {line.split()[0]: line for line in proc.stdout.splitlines() if line.strip()}
    for group in (p.name for p in CONF_DIR.iterdir() if any(p.glob("*.yaml"))):
        assert all(name in listed.get(group + "s", "") for name in options(group)), f"{group}: {proc.stdout}"


def test_multirun_sweeps_over_comma_lists(tmp_path):
    proc = optimas("run", "-m", "pipeline=toy_hint,toy_retriever", "method=unoptimized",
                   f"hydra.sweep.dir={tmp_path / 'sweep'}", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    jobs = sorted(p.name for p in (tmp_path / "sweep").iterdir() if p.is_dir())
    assert jobs == ["0-toy_hint-unoptimized", "1-toy_retriever-unoptimized"]
    assert all((tmp_path / "sweep" / j / "results.json").exists() for j in jobs)


def test_hydra_flags_pass_through(tmp_path):
    proc = optimas("run", "--cfg", "job", "pipeline=toy_hint", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "pipeline:" in proc.stdout and "toys.hint" in proc.stdout


def test_missing_data_is_one_clear_line_and_exit_2(tmp_path):
    env = {**os.environ, "OPTIMAS_DATA_DIR": str(tmp_path / "empty"), "HF_HUB_OFFLINE": "1",
           "HF_DATASETS_OFFLINE": "1", "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    proc = subprocess.run([sys.executable, "-m", "optimas_cli.cli", "run", "pipeline=pubmedqa", "method=unoptimized",
                           f"hydra.run.dir={tmp_path / 'run'}"], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "PubMedQA not found" in lines[0] and "data_dir" in lines[0]
