"""Optimas' method-level settings: the paper's scheduler by default, Stage 2 inside the budget's data."""
from __future__ import annotations

import pytest
from hydra import compose, initialize_config_dir

from optimas_cli.conf import CONF_DIR
from optimas_cli.errors import UserError
from optimas_cli.flows.setup import budget_splits, build_budget, build_method, build_pipeline
from optimas_cli.system.budget import Budget
from optimas_cli.system.results_file import read_results


def composed(*overrides: str):
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return compose("config", overrides=["pipeline=toy_retriever", "method=optimas", *overrides])


def test_the_default_optimas_run_draws_uniformly_over_every_component():
    method = build_method(composed(), build_budget(composed()))
    assert method.scheduler == "uniform" and method.skip_unpaired is False


@pytest.mark.parametrize("pool, expected", [("train", slice(0, 2)), ("beyond_train", slice(2, None))])
def test_stage2_fresh_inputs_stay_inside_the_budget_unless_asked(pool, expected):
    cfg = composed("budget.train_size=2", f"method.stage2_pool={pool}")
    pipeline = build_pipeline(cfg)
    splits = budget_splits(pipeline, build_budget(cfg))
    method = build_method(cfg, build_budget(cfg))
    assert method._fresh_pool(pipeline, splits) == list(pipeline.splits.train[expected])


def test_a_mistyped_budget_key_is_one_clear_error():
    with pytest.raises(UserError, match=r"budget\.itertions"):
        build_budget(composed("+budget.itertions=3"))
    with pytest.raises(UserError, match=r"budget\.train_size='abc' is not an integer"):
        build_budget(composed("budget.train_size=abc"))
    with pytest.raises(UserError, match=r"budget\.val_size=-1 must be at least 1"):
        build_budget(composed("budget.val_size=-1"))


def test_every_method_gets_the_typed_budget():
    cfg = composed()
    for method in ("optimas", "global_reward", "hbc", "textgrad", "dspy", "llmselector", "unoptimized"):
        cfg_m = composed(f"method={method}")
        assert isinstance(build_method(cfg_m, build_budget(cfg)).budget, Budget), method


def test_a_mistyped_optimizer_key_fails_before_anything_is_spent(tmp_path):
    from optimas_cli.optim.loop import LoopSettings

    budget = build_budget(composed())
    with pytest.raises(UserError, match=r"optimizer\.choice\.temprature"):
        LoopSettings.from_budget(budget, "uniform", {"choice": {"temprature": 0.5}}, 0, str(tmp_path))
    with pytest.raises(UserError, match=r"optimizer\.weigths"):
        LoopSettings.from_budget(budget, "uniform", {"weigths": {}}, 0, str(tmp_path))
    settings = LoopSettings.from_budget(budget, "uniform", {"weights": {"steps": "2"}}, 7, str(tmp_path))
    assert settings.optimizer["weights"].steps == 2 and settings.optimizer["choice"].seed == 7


def test_a_stage1_without_pairs_ends_with_the_system_unchanged_and_says_why(tmp_path):

    from optimas_cli.cli import main

    # an epsilon above any reward gap: every pair of candidates is a tie
    assert main(["run", "pipeline=toy_retriever", "method=optimas", "budget=smoke", "lrf.collect.epsilon=10",
                 f"hydra.run.dir={tmp_path / 'run'}"]) == 0
    results = read_results(tmp_path / "run")
    assert "no preference pairs" in results["no_pairs"] and results["history"] == []
    assert results["test"]["per_example"] == results["test_initial"]["per_example"]
    assert results["test_gain"]["delta"] == 0.0
    components = results["lrf"]["components"]
    assert components and all(c["pairs"]["collected"] == 0 and c["pairwise_accuracy"] is None
                              for c in components.values())
    assert any(c["pairs"]["tied"] > 0 for c in components.values())

