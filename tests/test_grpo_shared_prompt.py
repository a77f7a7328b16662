"""GRPO's loss forward with each prompt computed once (optim/shared_prompt.py) gives trl's log-probs,
entropies and gradients, up to float rounding."""
from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from accelerate import Accelerator
from peft import LoraConfig, get_peft_model
from transformers import AutoModelForCausalLM
from trl import GRPOTrainer
from trl.trainer.utils import add_fused_lm_head

from optimas_cli.optim.shared_prompt import (
    packed_group,
    prompt_groups,
    shared_prompt_logps,
    streams_supported,
)

PAD = 0


@pytest.fixture
def lora_model(tiny_model_dir):
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    add_fused_lm_head(model, temperature=0.7, outputs=("log_probs", "entropy"))  # as GRPOTrainer patches it
    model = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules="all-linear", task_type="CAUSAL_LM"))
    for name, p in model.named_parameters():
        if "lora_B" in name:  # a trained adapter, so the LoRA path changes the log-probs
            torch.nn.init.normal_(p, std=0.5)
    return model


def _batch(vocab: int):
    """Two prompts of 5 and 3 tokens (left padded), 3 completions each of up to 4 tokens (right padded)."""
    gen = torch.Generator().manual_seed(1)
    prompts = [torch.randint(5, vocab, (5,), generator=gen), torch.randint(5, vocab, (3,), generator=gen)]
    rows, masks = [], []
    for prompt in prompts:
        for length in (4, 2, 3):
            completion = torch.randint(5, vocab, (4,), generator=gen)
            pad = 5 - len(prompt)
            rows.append(torch.cat([torch.full((pad,), PAD), prompt, completion.masked_fill(torch.arange(4) >= length, PAD)]))
            masks.append(torch.cat([torch.zeros(pad), torch.ones(len(prompt)), (torch.arange(4) < length).float()]))
    return torch.stack(rows), torch.stack(masks).long()


def _trl_logps(model, ids, mask, k):
    owner = SimpleNamespace(accelerator=Accelerator(cpu=True))
    logps, entropies, _ = GRPOTrainer._get_per_token_logps_and_entropies(owner, model, ids, mask, k, compute_entropy=True)
    return logps, entropies


def _with_gradients(model, compute):
    model.zero_grad()
    logps, entropies = compute()
    (logps.sum() + 0.1 * entropies.sum()).backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    return logps.detach(), entropies.detach(), grads


def test_shared_prompt_log_probs_entropies_and_gradients_match_trls_rows(lora_model):
    ids, mask = _batch(lora_model.config.vocab_size)
    k = 4
    trl_logps, trl_entropies, trl_grads = _with_gradients(lora_model, lambda: _trl_logps(lora_model, ids, mask, k))
    logps, entropies, grads = _with_gradients(lora_model, lambda: shared_prompt_logps(lora_model, ids, mask, k))
    assert logps.shape == (6, k) and entropies.shape == (6, k)
    torch.testing.assert_close(logps, trl_logps, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(entropies, trl_entropies, rtol=1e-5, atol=1e-5)
    assert (logps[mask[:, -k:] == 0] == 0).all()  # padded completion tokens are not scored, as in trl
    assert grads.keys() == trl_grads.keys() and len(grads) > 0
    for name in grads:  # sums in another order: compared against each tensor's scale
        scale = float(trl_grads[name].abs().max())
        torch.testing.assert_close(grads[name], trl_grads[name], rtol=1e-4, atol=1e-4 * scale)


def test_rows_are_grouped_by_their_prompts_real_tokens():
    ids = torch.tensor([[0, 7, 8], [9, 7, 8], [0, 7, 8], [0, 0, 5]])
    mask = torch.tensor([[0, 1, 1], [1, 1, 1], [0, 1, 1], [0, 0, 1]])
    assert prompt_groups(ids, mask) == [[0, 2], [1], [3]]


def test_a_packed_group_holds_the_prompt_once_and_each_completion_as_its_own_stream():
    prompt = torch.tensor([11, 12, 13])
    completions = torch.tensor([[21, 22], [31, 32]])
    ids, sees, positions, labels, starts = packed_group(prompt, completions, torch.tensor([[1, 1], [1, 0]]))
    assert ids.tolist() == [[11, 12, 13, 21, 13, 31]]
    assert positions.tolist() == [[0, 1, 2, 3, 2, 3]]
    assert labels.tolist() == [[-100, -100, 21, 22, 31, -100]]
    assert starts == [2, 4]
    # the second stream sees the shared prompt and itself, never the first stream
    assert sees[0, 0, 5].tolist() == [True, True, False, False, True, True]
    assert sees[0, 0, 3].tolist() == [True, True, True, True, False, False]


def test_sliding_window_models_keep_trls_rows():
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    config = Gemma3TextConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                              num_attention_heads=2, num_key_value_heads=1, head_dim=8, sliding_window=4,
                              layer_types=["sliding_attention", "full_attention"])
    assert not streams_supported(Gemma3ForCausalLM(config))


def test_grpo_training_scores_its_completions_through_the_shared_prompt(tiny_model, tmp_path, monkeypatch):
    from optimas_cli.optim import shared_prompt
    from tests.test_grpo_memory import _train

    real, shapes = shared_prompt.shared_prompt_logps, []

    def spy(model, input_ids, attention_mask, logits_to_keep):
        shapes.append(tuple(input_ids.shape))
        return real(model, input_ids, attention_mask, logits_to_keep)

    monkeypatch.setattr(shared_prompt, "shared_prompt_logps", spy)
    _train(tiny_model, tmp_path / "adapter")
    assert shapes and shapes[0][0] == 4  # one prompt's 4 completions, in one call
