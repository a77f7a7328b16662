"""Experiment sweeps (conf/experiment/) expand to the paper's grids, and the joblib and submitit_local
launchers run a real sweep with a results.json in every job folder."""
from __future__ import annotations

import itertools
import json

import pytest
import yaml
from hydra import compose, initialize_config_dir
from hydra.core.override_parser.overrides_parser import OverridesParser

from optimas_cli.conf import CONF_DIR, options
from tests.cli_runner import optimas

PIPELINES = ["hotpotqa", "pubmedqa", "stark_prime", "bigcodebench", "amazon"]
TABLE2_METHODS = ["unoptimized", "single_llm", "dspy", "textgrad", "hbc", "optimas"]


def experiment_override(name: str) -> str:
    """`experiment=X` once conf/config.yaml lists an `experiment` default, `+experiment=X` until then."""
    defaults = yaml.safe_load((CONF_DIR / "config.yaml").read_text()).get("defaults", [])
    listed = any(isinstance(d, dict) and any(k.split("@")[0].removeprefix("optional ") == "experiment" for k in d)
                 for d in defaults)
    return f"experiment={name}" if listed else f"+experiment={name}"


def sweep_jobs(name: str) -> tuple[list[dict], dict]:
    """The jobs `optimas run -m experiment=<name>` launches: one override dict per job, and the config."""
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose(config_name="config", overrides=[experiment_override(name)], return_hydra_config=True)
        params = dict(cfg.hydra.sweeper.params or {})
        parser = OverridesParser.create()
        axes = []
        for key, value in params.items():
            override = parser.parse_overrides([f"{key}={value}"])[0]
            values = list(override.sweep_string_iterator()) if override.is_sweep_override() else [str(override.value())]
            axes.append([(key, v) for v in values])
        jobs = [dict(combo) for combo in itertools.product(*axes)]
        # Every swept value composes (no unknown option or key hides in a sweep); once per value, not
        # per job: the group options do not depend on each other.
        first = {axis[0][0]: axis[0][1] for axis in axes}
        for key, value in {kv for axis in axes for kv in axis[1:]} | set(first.items()):
            job = {**first, key: value}
            compose(config_name="config", overrides=[experiment_override(name), *[f"{k}={v}" for k, v in job.items()]])
    return jobs, cfg


def test_every_experiment_is_listed():
    assert set(options("experiment")) >= {"table2", "table2_llmselector", "table4", "ablation_fresh_size",
                                           "ablation_candidates", "ablation_lrf_backbone", "ablation_train_fraction"}


def test_table2_is_every_pipeline_times_every_method_on_a_small_budget():
    jobs, cfg = sweep_jobs("table2")
    assert sorted((j["pipeline"], j["method"]) for j in jobs) == sorted(itertools.product(PIPELINES, TABLE2_METHODS))
    assert cfg.budget.name == "small" and cfg.lm.model.startswith("local/") and cfg.task == "run"


def test_llmselector_runs_on_pubmedqa_only():
    jobs, _ = sweep_jobs("table2_llmselector")
    assert jobs == [{"pipeline": "pubmedqa", "method": "llmselector"}]


def test_weights_methods_run_on_the_pipelines_with_lora_components():
    jobs, cfg = sweep_jobs("table2_weights")
    assert sorted((j["pipeline"], j["method"]) for j in jobs) == sorted(
        itertools.product(["amazon", "collab_chain"], ["sysdpo", "reinforce"]))
    assert cfg.budget.name == "small"


def test_table4_trains_the_lrf_of_every_pipeline():
    jobs, cfg = sweep_jobs("table4")
    assert sorted(j["pipeline"] for j in jobs) == sorted(PIPELINES)
    assert cfg.task == "train-lrf"


@pytest.mark.parametrize("name, key, values", [
    ("ablation_fresh_size", "budget.fresh_size", ["10", "20", "30", "40"]),
    ("ablation_candidates", "budget.num_candidates", ["3", "5", "7", "10"]),
    ("ablation_train_fraction", "lrf.train_fraction", ["0.125", "0.25", "0.5", "1.0"]),
    ("ablation_lrf_backbone", "lrf", ["minilm", "llama3_8b_lora"]),
])
def test_ablation_sweeps_cover_the_papers_values(name, key, values):
    jobs, cfg = sweep_jobs(name)
    assert [j[key] for j in jobs] == values
    assert all(j["pipeline"] == "hotpotqa" for j in jobs)
    if name == "ablation_train_fraction":
        # fractions of the paper's 50 inputs, every one split with one seed: one fixed test set of pairs
        assert cfg.budget.name == "paper" and cfg.budget.train_size == 50 and cfg.lrf.min_test_pairs == 20
    if name in ("ablation_train_fraction", "ablation_lrf_backbone"):
        assert cfg.task == "train-lrf"  # alignment, measured by train-lrf runs
    else:
        assert all(j["method"] == "optimas" for j in jobs)


TOY_SCORES = {"toy_hint": 0.42, "toy_retriever": 0.2625}


@pytest.mark.parametrize("launcher", [
    ["hydra/launcher=joblib", "hydra.launcher.n_jobs=2"],
    ["hydra/launcher=submitit_local", "hydra.launcher.timeout_min=10"],
], ids=["joblib", "submitit_local"])
def test_launchers_run_a_real_sweep_with_results_in_every_job(tmp_path, launcher):
    sweep = tmp_path / "sweep"
    proc = optimas("run", "-m", experiment_override("table2"), "pipeline=toy_hint,toy_retriever", "method=unoptimized",
                   *launcher, f"hydra.sweep.dir={sweep}", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    jobs = sorted(p.name for p in sweep.iterdir() if p.is_dir() and not p.name.startswith("."))
    assert jobs == ["0-toy_hint-unoptimized", "1-toy_retriever-unoptimized"]
    for job in jobs:
        results = json.loads((sweep / job / "results.json").read_text())
        assert results["test"]["mean"] == pytest.approx(TOY_SCORES[results["pipeline"]], abs=1e-4)
        assert results["config"]["budget"]["name"] == "small"  # the experiment's budget reached the job
