"""GRPO's memory savings (optim/weights.py) change no result: activation checkpointing and small log-prob tiles."""
from __future__ import annotations

import torch
import transformers.modeling_utils
from safetensors.torch import load_file
from trl.kernels import chunked_logprob

from optimas_cli.optim import weights
from optimas_cli.optim.settings import WeightsSettings
from tests.test_optim_weights import SEARCH, LetterReward, Reviewer


def _train(tiny_model, out_dir) -> dict[str, torch.Tensor]:
    cfg = WeightsSettings(work_dir=str(out_dir), steps=1, prompts_per_step=1, num_generations=4, learning_rate=1e-2)
    weights.train_adapter(Reviewer(tiny_model), None, SEARCH, LetterReward(), weights.resolve_base_model(tiny_model),
                          out_dir, cfg, seed=5, max_completion_length=8)
    return load_file(f"{out_dir}/adapter_model.safetensors")


def test_grpo_checkpoints_activations_and_trains_the_same_adapter_as_without(tiny_model, tmp_path, monkeypatch):
    real_checkpoint = transformers.modeling_utils.checkpoint
    calls = []

    def counted(function, *args, **kwargs):
        calls.append(function)
        return real_checkpoint(function, *args, **kwargs)

    monkeypatch.setattr(transformers.modeling_utils, "checkpoint", counted)
    checkpointed = _train(tiny_model, tmp_path / "checkpointed")
    assert calls, "the GRPO loss ran without activation checkpointing"

    # The same step with every layer's activations held (what checkpointing recomputes instead).
    monkeypatch.setattr(transformers.modeling_utils, "checkpoint",
                        lambda function, *args, use_reentrant=None, **kwargs: function(*args, **kwargs))
    held = _train(tiny_model, tmp_path / "held")
    assert checkpointed.keys() == held.keys()
    assert all(torch.equal(checkpointed[k], held[k]) for k in held)


def test_grpo_computes_log_probs_on_small_tiles(tiny_model, tmp_path, monkeypatch):
    real_forward = chunked_logprob.ChunkedLogProbFunction.forward
    tiles = []

    def spy(ctx, *args, **kwargs):
        tiles.append(chunked_logprob.TOKEN_CHUNK_SIZE)
        return real_forward(ctx, *args, **kwargs)

    monkeypatch.setattr(chunked_logprob.ChunkedLogProbFunction, "forward", staticmethod(spy))
    before = chunked_logprob.TOKEN_CHUNK_SIZE
    _train(tiny_model, tmp_path / "adapter")
    assert tiles and set(tiles) == {min(before, weights.LOGPROB_TILE_TOKENS)}
    assert chunked_logprob.TOKEN_CHUNK_SIZE == before  # restored for anyone else using trl


def test_small_log_prob_tiles_give_the_same_log_probs_entropies_and_gradients():
    gen = torch.Generator().manual_seed(0)
    hidden = torch.randn(300, 64, generator=gen)
    weight = torch.randn(500, 64, generator=gen)
    targets = torch.randint(0, 500, (300,), generator=gen)

    def run():
        h = hidden.clone().requires_grad_(True)
        logprobs, entropy, *_ = chunked_logprob.ChunkedLogProbFunction.apply(
            h, weight, None, targets, 0.7, 128, None, 1.0, ("entropy",))
        (logprobs.sum() + 0.1 * entropy.sum()).backward()
        return logprobs.detach(), entropy.detach(), h.grad

    whole = run()
    with weights.small_logprob_tiles(tokens=64):  # 300 tokens in 5 tiles
        assert chunked_logprob.TOKEN_CHUNK_SIZE == 64
        tiled = run()
    assert all(torch.equal(a, b) for a, b in zip(whole, tiled, strict=True))
