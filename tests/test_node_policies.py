"""NodePolicies scores what generation sampled: the end-of-turn token only where generation ended."""
from __future__ import annotations

import pytest
import torch

from optimas_cli.optim.node_policies import NodePolicies, Segment


def logprob(model, tokenizer, prompt: str, completion: str, end_of_turn: bool) -> float:
    """log p(completion [+ end-of-turn] | prompt) from transformers' own loss, prompt tokens masked out."""
    prompt_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
    completion_ids = tokenizer(completion, add_special_tokens=False)["input_ids"]
    completion_ids += [tokenizer.eos_token_id] if end_of_turn else []
    ids = torch.tensor([prompt_ids + completion_ids])
    labels = torch.tensor([[-100] * len(prompt_ids) + completion_ids])
    with torch.no_grad():
        loss = model(input_ids=ids, labels=labels).loss
    return -float(loss) * len(completion_ids)


def test_a_completion_cut_at_max_tokens_is_scored_without_an_end_of_turn_token(tiny_model_dir):
    # Before: every completion was scored with an end-of-turn token appended, so a reply cut at
    # max_tokens was trained as if the model had chosen to stop there.
    from transformers import AutoModelForCausalLM, AutoTokenizer

    policies = NodePolicies(str(tiny_model_dir), {"reader": None})
    prompt = policies.render([{"role": "user", "content": "Does aspirin lower fever?"}])
    completion = "It lowers fever in"
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    cut, ended = policies.reference_logprobs([Segment(prompt, completion, ended=False),
                                              Segment(prompt, completion, ended=True)]).tolist()
    assert cut == pytest.approx(logprob(base, tokenizer, prompt, completion, end_of_turn=False), abs=1e-3)
    assert ended == pytest.approx(logprob(base, tokenizer, prompt, completion, end_of_turn=True), abs=1e-3)
    assert cut > ended  # the end-of-turn term is a log-probability below 0
    assert policies.reference_logprobs([(prompt, completion)]).tolist() == pytest.approx([ended], abs=1e-5)
