"""conf/method/<baseline>.yaml instantiate (as the runner does) into methods sized by the budget group."""
from __future__ import annotations

import pytest
from hydra.utils import instantiate
from omegaconf import OmegaConf

from optimas_cli.methods.dspy_mipro import DSPyMIPRO
from optimas_cli.methods.global_reward import GlobalReward
from optimas_cli.methods.hbc import HBC
from optimas_cli.methods.llmselector import LLMSelector
from optimas_cli.methods.textgrad import TextGrad
from tests.test_methods_toys import ROOT


def build(method: str, budget: str = "small"):
    cfg = OmegaConf.create({
        "seed": 3,
        "budget": OmegaConf.load(ROOT / "conf" / "budget" / f"{budget}.yaml"),
        "method": OmegaConf.load(ROOT / "conf" / "method" / f"{method}.yaml"),
    })
    return instantiate(cfg.method, _convert_="all")


@pytest.mark.parametrize("name, cls", [("global_reward", GlobalReward), ("hbc", HBC), ("dspy", DSPyMIPRO),
                                       ("textgrad", TextGrad), ("llmselector", LLMSelector)])
def test_each_baseline_config_builds_its_method(name, cls):
    method = build(name)
    assert isinstance(method, cls) and method.name == name


def test_budget_sizes_reach_the_methods():
    small = OmegaConf.load(ROOT / "conf" / "budget" / "small.yaml")
    dspy = build("dspy")
    assert (dspy.num_candidates, dspy.num_trials, dspy.seed) == (small.num_candidates + 1, small.iterations, 3)
    assert build("textgrad").steps == small.iterations
    selector = build("llmselector")
    assert (selector.rounds, selector.sample_size) == (small.iterations, small.search_size)
    loop = build("global_reward")
    assert loop.budget["iterations"] == small.iterations and loop.adapt_enabled is False
    hbc = build("hbc", "paper")
    assert hbc.budget["search_size"] == 50 and hbc.embedder_cfg["backbone"] == "minilm"


@pytest.mark.parametrize("name", ["optimas", "optimas_no_adapt", "global_reward", "hbc"])
def test_every_local_optimizer_method_gets_the_same_prompt_proposer_and_optimizer_lm(name, tmp_path):
    from hydra import compose, initialize_config_dir

    from optimas_cli.system.run_folder import RunFolder

    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        cfg = compose("config", overrides=[f"method={name}", "method.optimizer_lm=openai/gpt-4o-mini"])
    method = instantiate(cfg.method, _convert_="all")
    prompt = method._optimizer_settings(RunFolder(tmp_path))["prompt"]
    assert prompt["proposer"] == "auto" and prompt["lm"] == "openai/gpt-4o-mini"
