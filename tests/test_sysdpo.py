"""SysDPO's factorized loss and REINFORCE's policy gradient on the tiny model's LoRA adapters."""
from __future__ import annotations

import math

import pytest
import torch

from optimas_cli.optim.node_policies import NodePolicies
from optimas_cli.optim.reinforce import reinforce_step
from optimas_cli.optim.sysdpo import SysDPOTrainer, preference_pairs

READER, ANSWERER = "reader", "answerer"


def chat(policies: NodePolicies, text: str) -> str:
    return policies.render([{"role": "user", "content": text}])


def independent_logprob(model, tokenizer, prompt: str, completion: str) -> float:
    """log p(completion + end-of-turn | prompt) from transformers' own loss, prompt tokens masked out."""
    prompt_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
    completion_ids = tokenizer(completion, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
    ids = torch.tensor([prompt_ids + completion_ids])
    labels = torch.tensor([[-100] * len(prompt_ids) + completion_ids])
    with torch.no_grad():
        loss = model(input_ids=ids, labels=labels).loss
    return -float(loss) * len(completion_ids)


def test_joint_log_ratio_of_a_two_node_dag_is_the_sum_of_the_node_log_ratios(tiny_model_dir, tiny_adapter_dir):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    policies = NodePolicies(str(tiny_model_dir), {READER: str(tiny_adapter_dir), ANSWERER: str(tiny_adapter_dir)})
    x = chat(policies, "Does aspirin lower fever?")
    y = "It lowers fever in most trials."
    prompt_z = chat(policies, f"Notes: {y} Answer yes or no.")
    z = "Answer: yes"
    trajectory = {READER: (x, y), ANSWERER: (prompt_z, z)}
    joint = policies.trajectory_logprobs([trajectory]) - policies.trajectory_logprobs([trajectory], reference=True)

    # log p(tau) = log p(y | x) + log p(z | y), each scored by plain transformers with and without the adapter
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    reference = {seg: independent_logprob(base, tokenizer, *seg) for seg in trajectory.values()}
    adapted = PeftModel.from_pretrained(base, tiny_adapter_dir)
    policy = {seg: independent_logprob(adapted, tokenizer, *seg) for seg in trajectory.values()}
    node_ratios = [policy[seg] - reference[seg] for seg in trajectory.values()]
    assert abs(node_ratios[0]) > 1e-3 and abs(node_ratios[1]) > 1e-3  # the adapter changes both nodes
    assert float(joint[0].detach()) == pytest.approx(sum(node_ratios), abs=1e-3)

    # Two trajectories sharing the reader's output (k = 1 at the reader): its terms cancel in the DPO margin.
    other = {READER: (x, y), ANSWERER: (prompt_z, "Answer: no")}
    h = policies.trajectory_logprobs([trajectory, other]) - policies.trajectory_logprobs([trajectory, other], reference=True)
    answerer_only = (policies.logprobs(ANSWERER, [trajectory[ANSWERER], other[ANSWERER]])
                     - policies.reference_logprobs([trajectory[ANSWERER], other[ANSWERER]]))
    assert float(h[0] - h[1]) == pytest.approx(float(answerer_only[0] - answerer_only[1]), abs=1e-4)


def test_segments_of_different_lengths_score_together_as_they_would_alone(tiny_model_dir, tiny_adapter_dir):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    policies = NodePolicies(str(tiny_model_dir), {READER: str(tiny_adapter_dir)})
    # six rows of different prompt and completion lengths: left padding, tail-only logits, chunks of 4
    segments = [(chat(policies, "Does aspirin lower fever? " * (n + 1)), "Answer: yes" + " indeed" * n) for n in range(6)]
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    alone = [independent_logprob(base, tokenizer, *seg) for seg in segments]
    assert policies.reference_logprobs(segments).tolist() == pytest.approx(alone, abs=1e-3)


def toy_trajectories(policies: NodePolicies) -> tuple[list[dict], list[float]]:
    """Four trajectories of one input (2 reader notes x 2 answers); the final metric prefers 'yes' after note A."""
    x = chat(policies, "Does aspirin lower fever?")
    trajectories, scores = [], []
    for note, note_score in (("Trials show it lowers fever.", 1.0), ("The abstract is about cats.", 0.0)):
        prompt = chat(policies, f"Notes: {note} Answer yes or no.")
        for answer, answer_score in (("Answer: yes", 1.0), ("Answer: no", 0.0)):
            trajectories.append({READER: (x, note), ANSWERER: (prompt, answer)})
            scores.append(note_score * answer_score)
    return trajectories, scores


def test_a_few_sysdpo_steps_raise_the_preferred_trajectories_margin_on_both_nodes(tiny_model_dir):
    policies = NodePolicies(str(tiny_model_dir), {READER: None, ANSWERER: None}, {"r": 4, "alpha": 8})
    trajectories, scores = toy_trajectories(policies)
    pairs = preference_pairs(trajectories, scores)
    assert len(pairs) == 3  # the winner against each of the three tied losers; ties among losers skipped
    before = {n: p.detach().clone() for n, p in policies.model.named_parameters() if "lora_" in n}
    log = SysDPOTrainer(policies, pairs, beta=0.5, learning_rate=5e-3).train(steps=4, batch_size=3)
    assert log["margin_before"] == 0.0  # fresh adapters (B = 0) are the reference
    assert log["margin_after"] > 0.5 and log["losses"][-1] < log["losses"][0]
    moved = {n.split(".")[-2] for n, p in policies.model.named_parameters() if "lora_" in n
             and not torch.equal(p, before[n])}
    assert {READER, ANSWERER} <= moved  # one loss trains both nodes' adapters


def test_reinforce_raises_the_probability_of_the_rewarded_trajectory(tiny_model_dir):
    policies = NodePolicies(str(tiny_model_dir), {READER: None, ANSWERER: None}, {"r": 4, "alpha": 8})
    trajectories, rewards = toy_trajectories(policies)

    def expected_reward() -> float:  # under the policy, restricted to these four trajectories
        with torch.no_grad():
            weights = torch.softmax(policies.trajectory_logprobs(trajectories), dim=0)
        return float((weights * torch.tensor(rewards)).sum())

    optimizer = torch.optim.AdamW(policies.parameters, lr=5e-3)
    start = expected_reward()
    for _ in range(3):
        log = reinforce_step(policies, optimizer, trajectories, rewards)
    assert log["baseline"] == 0.25 and log["loss"] is not None
    # The random model finds the rewarded pair of texts unlikely (~1e-5 of the four's mass): compare in log space.
    assert math.log(expected_reward() / start) > 1.0
    # Equal rewards carry no signal: no step is taken.
    assert reinforce_step(policies, optimizer, trajectories, [1.0] * 4)["loss"] is None
