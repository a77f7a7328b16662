"""Weights optimizer: real GRPO steps on a tiny random causal LM with a tiny local reward."""
from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file

from optimas_cli.errors import UserError
from optimas_cli.flows.tiny_tasks import SEARCH, LetterReward, Reviewer
from optimas_cli.optim import optimize_component, weights
from optimas_cli.optim.settings import WeightsSettings
from optimas_cli.system.component import Component, ConfigKind
from optimas_cli.system.context import RunContext
from optimas_cli.system.ledger import RunLedger

SETTINGS = {"steps": 2, "prompts_per_step": 1, "num_generations": 4, "max_completion_length": 8, "learning_rate": 1e-2}


def _lora_tensors(folder) -> dict[str, torch.Tensor]:
    return load_file(f"{folder}/adapter_model.safetensors")


def test_grpo_steps_train_a_fresh_adapter_then_continue_it(tiny_model, tiny_lm, tmp_path, capsys):
    component, lrf = Reviewer(tiny_model), LetterReward()
    ctx = RunContext(ledger=RunLedger(1), lm=tiny_lm, phase="local_optimization", seed=3)
    cfg = {"weights": {**SETTINGS, "work_dir": str(tmp_path / "adapters")}}

    first = optimize_component(component, None, SEARCH, lrf, ctx, cfg)
    tensors = _lora_tensors(first.value)
    lora_b = [t for k, t in tensors.items() if "lora_B" in k]
    assert lora_b and any(t.abs().sum() > 0 for t in lora_b), "LoRA B starts at zero; a GRPO step must move it"
    log = json.loads(open(f"{first.value}/optimas_adapter.json").read())
    assert log["algorithm"] == "GRPO" and len(log["train_rewards"]) == 2
    assert "'reward'" not in capsys.readouterr().out  # per-step log dicts are kept, not printed
    assert first.local_score is not None and first.baseline_score is not None
    # GRPO's generations (steps x prompts_per_step x num_generations), then current vs new on the search inputs
    assert ctx.ledger.executions["local_optimization"]["reviewer"] == 2 * 1 * 4 + 2 * len(SEARCH)
    assert lrf.calls == 2 + 2  # r_k as the reward of each GRPO step's completions, then current vs new

    second = optimize_component(component, first.value, SEARCH, lrf, ctx, cfg)
    assert second.value != first.value and second.details["parent_adapter"] == first.value
    after = _lora_tensors(second.value)
    assert after.keys() == tensors.keys()
    assert any(not torch.equal(tensors[k], after[k]) for k in tensors), "continuing the adapter must change it"


def test_weights_component_without_the_contract_is_a_user_error(tiny_model, tmp_path):
    bare = Component(name="bare", description="x", inputs=("a",), outputs=("b",), kind=ConfigKind.WEIGHTS)
    ctx = RunContext(ledger=RunLedger(1))
    with pytest.raises(UserError, match="build_messages"):
        weights.propose(bare, None, SEARCH, LetterReward(), ctx, {"work_dir": str(tmp_path)})
    with pytest.raises(UserError, match="work_dir"):
        weights.propose(Reviewer(tiny_model), None, SEARCH, LetterReward(), ctx, {})


def test_base_model_is_a_folder_or_a_local_model_name(tiny_model, tiny_model_dir, tmp_path):
    assert weights.resolve_base_model(tiny_model) == str(tiny_model_dir.resolve())
    assert weights.resolve_base_model(str(tiny_model_dir)) == str(tiny_model_dir)
    with pytest.raises(UserError, match="unknown local model"):
        weights.resolve_base_model(str(tmp_path))


class BudgetedReviewer(Reviewer):
    """Deployed with its own completion budget, as LocalModelComponent subclasses are (Amazon: 128, 192)."""

    max_tokens = 12

    def forward(self, inputs, value, ctx):
        messages = [self.build_messages(x, value) for x in inputs]
        texts = ctx.complete(self.name, messages, model=self.base_model, adapter=value, max_tokens=self.max_tokens)
        return [self.parse_output(t) for t in texts]


def test_grpo_generates_with_the_budget_the_component_is_deployed_with(tiny_model, tiny_lm, tmp_path):
    # Before: GRPO generated optimizer.weights.max_completion_length (48) tokens whatever the component's
    # max_tokens, so r_k scored prefixes of (or more than) what the system evaluates.
    component = BudgetedReviewer(tiny_model)
    ctx = RunContext(ledger=RunLedger(1), lm=tiny_lm, phase="local_optimization", seed=3)
    settings = {k: v for k, v in SETTINGS.items() if k != "max_completion_length"}
    proposal = weights.propose(component, None, SEARCH, LetterReward(), ctx,
                               {**settings, "score_on_search": False, "work_dir": str(tmp_path)})
    assert proposal.details["max_completion_length"] == 12
    # the tiny random model rarely ends a reply: its longest completions run to the deployed budget
    assert max(proposal.details["completion_max_tokens"]) == 12

    capped = weights.completion_budget(component, ctx, WeightsSettings(max_completion_length=8))
    assert capped == 8  # an explicit cap still wins (and is warned about: r_k then scores prefixes)


def test_split_held_out_keeps_at_least_one_input_to_train_on():
    rows = [{"i": i} for i in range(8)]
    assert weights.split_held_out(rows, 0.25) == (rows[:6], rows[6:])
    assert weights.split_held_out(rows[:3], 0.25) == (rows[:3], [])  # a quarter of 3 is no whole input
    assert weights.split_held_out(rows[:1], 0.9) == (rows[:1], [])


def test_grpo_never_trains_on_the_held_out_inputs_and_records_r_k_on_them(tiny_model, tiny_lm, tmp_path, monkeypatch):
    component, lrf = Reviewer(tiny_model), LetterReward()
    ctx = RunContext(ledger=RunLedger(1), lm=tiny_lm, phase="local_optimization", seed=3)
    trained_on = []
    real = weights.train_adapter

    def spy(component, parent, search_inputs, *args):
        trained_on.extend(search_inputs)
        return real(component, parent, search_inputs, *args)

    monkeypatch.setattr(weights, "train_adapter", spy)
    cfg = {**SETTINGS, "work_dir": str(tmp_path / "adapters"), "held_out_fraction": 0.34}
    proposal = weights.propose(component, None, SEARCH, lrf, ctx, cfg)
    assert trained_on == SEARCH[:2]
    held = proposal.details["held_out"]
    before = LetterReward().score("reviewer", SEARCH[2:], component.forward(SEARCH[2:], None, ctx))
    after = LetterReward().score("reviewer", SEARCH[2:], component.forward(SEARCH[2:], proposal.value, ctx))
    assert held["n"] == 1 and held["r_k_before"] == before[0] and held["r_k_after"] == after[0]
    assert held["gain"] == pytest.approx(after[0] - before[0])
    assert proposal.details["seconds_per_step"] > 0
