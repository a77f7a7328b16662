"""Diverse beam search: a hand-computed toy, then the real LM layer on the tiny model."""
from __future__ import annotations

import math

import pytest
import torch

from optimas_cli.lm.local.diverse_beam import DiverseBeamSettings, diverse_beam_search
from optimas_cli.lm.types import LMRequest

EOS = 3
FIRST = [0.5, 0.3, 0.1, 0.1]  # the first token's distribution
AFTER = [0.1, 0.1, 0.1, 0.7]  # after any token, end-of-sequence is likely


class ToyScorer:
    """A fixed next-token distribution that depends only on whether anything was generated yet."""

    def __init__(self, rows: int):
        self.lengths = [0] * rows

    def _logprobs(self) -> torch.Tensor:
        return torch.log(torch.tensor([FIRST if n == 0 else AFTER for n in self.lengths]))

    def first(self) -> torch.Tensor:
        return self._logprobs()

    def advance(self, origins, tokens) -> torch.Tensor:
        self.lengths = [self.lengths[o] + 1 for o in origins.tolist()]
        return self._logprobs()


def search(penalty: float, prompts: int = 1) -> list[list[list[int]]]:
    settings = DiverseBeamSettings(groups=2, diversity_penalty=penalty, max_new_tokens=3)
    return diverse_beam_search(ToyScorer(prompts * 2), prompts, settings, eos_ids=[EOS])


def test_hamming_penalty_sends_the_second_group_to_another_token_by_hand():
    # Group 0 takes token 0 (p=.5), then ends (p=.7): score ln(.35)/2. Group 1 sees token 0 penalized by
    # the penalty (one earlier group chose it): ln(.5) - 20 < ln(.3), so it takes token 1, then ends.
    assert search(20.0) == [[[0, EOS], [1, EOS]]]
    # Without the penalty both groups are the same beam search: the same sequence twice.
    assert search(0.0) == [[[0, EOS], [0, EOS]]]
    # The switch happens exactly where ln(.5) - penalty drops below ln(.3): penalty = ln(5/3) = 0.51.
    threshold = math.log(0.5 / 0.3)
    assert search(threshold - 0.05)[0][1] == [0, EOS]
    assert search(threshold + 0.05)[0][1] == [1, EOS]
    # Prompts of a batch do not penalize each other.
    assert search(20.0, prompts=2) == [[[0, EOS], [1, EOS]]] * 2


def test_best_group_comes_first_and_max_tokens_cuts_running_beams():
    settings = DiverseBeamSettings(groups=2, diversity_penalty=20.0, max_new_tokens=1)
    found = diverse_beam_search(ToyScorer(2), 1, settings, eos_ids=[EOS])
    assert found == [[[0], [1]]]  # ln(.5) > ln(.3): group 0's sequence first


def distinct_rate(lm, tiny_model, prompts, **request) -> float:
    replies = lm.complete([LMRequest(messages=[{"role": "user", "content": p}], model=tiny_model, n=2,
                                     max_tokens=4, seed=7, **request) for p in prompts])
    return sum(len(set(r.texts)) == 2 for r in replies) / len(prompts)


PROMPTS = ["What is the capital of France?", "Numbers: 0 1 2", "The quick brown fox", "Answer briefly.",
           "A compound AI system", "Yes, no, maybe"]


def test_dbs_through_the_lm_layer_is_cached_and_more_distinct_than_sampling(tiny_lm, tiny_model):
    dbs = distinct_rate(tiny_lm, tiny_model, PROMPTS, diversity_penalty=20.0)
    # The random tiny model's next-token distribution is nearly flat; at temperature 0.1 it is as peaked
    # as a trained LM's at 1.0, which is where Monte Carlo draws near-duplicates (the seed's ablation).
    sampled = distinct_rate(tiny_lm, tiny_model, PROMPTS, temperature=0.1)
    assert dbs == 1.0 and dbs > sampled
    calls = tiny_lm.usage.to_dict()["by_component"]["-"]["calls"]
    again = tiny_lm.complete([LMRequest(messages=[{"role": "user", "content": PROMPTS[0]}], model=tiny_model, n=2,
                                        max_tokens=4, seed=7, diversity_penalty=20.0)])[0]
    assert again.cached and len(set(again.texts)) == 2
    assert tiny_lm.usage.to_dict()["by_component"]["-"]["calls"] == calls + 2


def test_dbs_first_group_is_the_greedy_beam(tiny_lm, tiny_model):
    # With one beam per group, group 0 is plain greedy decoding (it sees no penalty).
    request = {"messages": [{"role": "user", "content": "The quick brown fox"}], "model": tiny_model, "max_tokens": 5}
    greedy = tiny_lm.complete([LMRequest(**request)])[0].texts[0]
    candidates = tiny_lm.complete([LMRequest(**request, n=3, diversity_penalty=20.0)])[0].texts
    assert greedy in candidates and len(set(candidates)) == 3


def test_dbs_on_an_api_model_is_one_clear_error(tiny_lm):
    from optimas_cli.errors import UserError

    with pytest.raises(UserError, match="diverse beam search"):
        tiny_lm.complete([LMRequest(messages=[{"role": "user", "content": "hi"}], model="openai/gpt-4o-mini", n=2,
                                    diversity_penalty=20.0)])
