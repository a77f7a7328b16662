"""conf/method/<baseline>.yaml instantiate (as the runner does) into methods sized by the budget group."""
from __future__ import annotations

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from optimas_cli.flows.setup import build_budget, build_method
from optimas_cli.methods.dspy_mipro import DSPyMIPRO
from optimas_cli.methods.global_reward import GlobalReward, RandomReward
from optimas_cli.methods.hbc import HBC
from optimas_cli.methods.llmselector import LLMSelector
from optimas_cli.methods.reinforce import Reinforce
from optimas_cli.methods.sysdpo import SysDPO
from optimas_cli.methods.textgrad import TextGrad
from tests.test_methods_toys import ROOT


def composed(*overrides: str):
    """The config the runner composes (method files may pull shared groups in through their defaults)."""
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        return compose("config", overrides=list(overrides))


def build(method: str, budget: str = "small"):
    cfg = composed(f"method={method}", f"budget={budget}", "seed=3")
    return build_method(cfg, build_budget(cfg))


@pytest.mark.parametrize("name, cls", [("global_reward", GlobalReward), ("hbc", HBC), ("dspy", DSPyMIPRO),
                                       ("textgrad", TextGrad), ("llmselector", LLMSelector),
                                       ("sysdpo", SysDPO), ("reinforce", Reinforce),
                                       ("random_reward", RandomReward)])
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
    assert loop.budget.iterations == small.iterations and loop.gate == "strict"
    hbc = build("hbc", "paper")
    assert hbc.budget.search_size == 50 and hbc.embedder_cfg["backbone"] == "minilm"


def test_weights_methods_read_the_budget_and_their_options():
    sysdpo = build("sysdpo", "smoke")
    assert sysdpo.budget.iterations == 2 and sysdpo.budget.search_size == 4
    assert (sysdpo.branching.sampling, sysdpo.branching.k, sysdpo.branching.diversity_penalty) == ("dbs", 2, 20.0)
    assert build("reinforce").rollouts == 4


@pytest.mark.parametrize("name", ["optimas", "optimas_no_adapt", "global_reward", "hbc", "random_reward"])
def test_every_local_optimizer_method_gets_the_same_prompt_proposer_and_optimizer_lm(name, tmp_path):
    from optimas_cli.optim.loop import LoopSettings

    def settings(method_name: str):
        cfg = composed(f"method={method_name}", "method.optimizer_lm=openai/gpt-4o-mini")
        method = build_method(cfg, build_budget(cfg))
        return LoopSettings.from_budget(method.budget, method.scheduler, method.optimizer, method.seed,
                                        str(tmp_path), optimizer_lm=method.optimizer_lm).optimizer

    ours = settings(name)
    assert ours["prompt"]["proposer"] == "auto" and ours["prompt"]["lm"] == "openai/gpt-4o-mini"
    # every optimizer setting (GRPO's sizes included) is the same, so Table 2 compares the scoring only
    assert ours == settings("optimas")


@pytest.mark.parametrize("budget", sorted(p.stem for p in (ROOT / "conf" / "budget").glob("*.yaml")))
def test_every_budget_takes_every_cap(budget):
    """A cap missing from one budget file makes `budget.<cap>=...` a Hydra error there (budget=cpu once
    lacked max_runs_from, so its matched-cost runs could not be started as documented)."""
    from optimas_cli.flows.matched import CAP_KEYS
    cfg = composed(f"budget={budget}", *(f"budget.{key}=null" for key in CAP_KEYS))
    assert all(OmegaConf.select(cfg, f"budget.{key}", default="missing") is None for key in CAP_KEYS)
