"""budget=cpu (issue 24): its sizes, its weights block sizing GRPO for every loop method only, its live-KV cap."""
from __future__ import annotations

from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from optimas_cli.conf import CONF_DIR
from optimas_cli.flows.setup import build_budget
from optimas_cli.optim.settings import WeightsSettings, typed


def composed(*overrides: str):
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return compose("config", overrides=list(overrides))


def grpo(cfg) -> WeightsSettings:
    return typed(WeightsSettings, OmegaConf.to_container(cfg.method.optimizer.weights, resolve=True), "weights")


def test_budget_cpu_trains_on_the_papers_50_and_sizes_grpo_to_learn():
    cfg = composed("pipeline=amazon", "budget=cpu", "method=global_reward")
    budget = build_budget(cfg)
    assert (budget.train_size, budget.val_size, budget.test_size) == (50, 60, 200)
    settings = grpo(cfg)
    assert (settings.steps, settings.prompts_per_step, settings.num_generations) == (6, 2, 4)
    assert settings.held_out_fraction == 0.25


def test_other_budgets_keep_the_default_grpo_sizes_and_a_command_line_value_wins():
    assert grpo(composed("pipeline=amazon", "budget=small")).steps == 2
    assert grpo(composed("pipeline=amazon", "budget=cpu", "method.optimizer.weights.steps=3")).steps == 3


def test_budget_cpu_lets_more_rows_decode_together_and_make_runs_budget_keeps_the_default():
    assert composed("pipeline=amazon", "budget=cpu").lm.local.max_live_tokens == 32768
    assert composed("budget=small").lm.local.max_live_tokens == 12288  # make run's 3 GB
    assert composed("budget=cpu", "lm.local.max_live_tokens=4096").lm.local.max_live_tokens == 4096
    assert build_budget(composed("budget=cpu")).max_live_tokens == 32768
