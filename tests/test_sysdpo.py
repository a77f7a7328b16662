"""SysDPO's factorized loss (both estimators) and REINFORCE's policy gradient on the tiny model's LoRA adapters."""
from __future__ import annotations

import math

import pytest
import torch

from optimas_cli.optim.node_policies import NodePolicies
from optimas_cli.optim.reinforce import reinforce_step
from optimas_cli.optim.sysdpo import SysDPOTrainer, direct_pairs, optimizer_steps, sampling_pairs

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
    pairs = direct_pairs(trajectories, scores)
    assert len(pairs) == 3  # the winner against each of the three tied losers; ties among losers skipped
    before = {n: p.detach().clone() for n, p in policies.model.named_parameters() if "lora_" in n}
    optimizer = torch.optim.AdamW(policies.parameters, lr=5e-3)
    log = SysDPOTrainer(policies, pairs, beta=0.5, optimizer=optimizer).train(steps=4, batch_size=3)
    assert log["margin_before"] == 0.0  # fresh adapters (B = 0) are the reference
    assert log["margin_after"] > 0.5 and log["losses"][-1] < log["losses"][0]
    moved = {n.split(".")[-2] for n, p in policies.model.named_parameters() if "lora_" in n
             and not torch.equal(p, before[n])}
    assert {READER, ANSWERER} <= moved  # one loss trains both nodes' adapters


def lora_grads(policies: NodePolicies, node: str) -> list[torch.Tensor]:
    return [p.grad if p.grad is not None else torch.zeros_like(p)
            for n, p in policies.model.named_parameters() if "lora_" in n and n.split(".")[-2] == node]


def test_sampling_with_one_intermediate_cancels_its_terms_exactly(tiny_model_dir, tiny_adapter_dir):
    """Seed 003: at k = 1 the intermediate's p(y^1 | x) is on both sides of the margin and cancels, so the
    reader gets no gradient; a second sampled intermediate makes it learn."""
    policies = NodePolicies(str(tiny_model_dir), {READER: str(tiny_adapter_dir), ANSWERER: str(tiny_adapter_dir)})
    x = chat(policies, "Does aspirin lower fever?")
    notes = ("It lowers fever in most trials.", "The abstract is about cats.")
    prompts = [chat(policies, f"Notes: {y} Answer yes or no.") for y in notes]
    win, lose = "Answer: yes", "Answer: no"
    one = [{READER: (x, notes[0]), ANSWERER: (prompts[0], z)} for z in (win, lose)]
    [pair] = sampling_pairs(one, [1.0, 0.0], final_node=ANSWERER)
    trainer = SysDPOTrainer(policies, [pair], beta=1.0, optimizer=torch.optim.SGD(policies.parameters, lr=0.0))
    chosen, rejected = trainer.logratios([0])
    answers = [(prompts[0], win), (prompts[0], lose)]
    answerer = policies.logprobs(ANSWERER, answers) - policies.reference_logprobs(answers)
    assert float((chosen - rejected)[0]) == pytest.approx(float(answerer[0] - answerer[1]), abs=1e-5)
    policies.model.zero_grad()
    trainer.train(steps=1, batch_size=1)
    assert all(torch.count_nonzero(g) == 0 for g in lora_grads(policies, READER))  # exactly zero, not small
    assert any(torch.count_nonzero(g) > 0 for g in lora_grads(policies, ANSWERER))

    two = [{READER: (x, y), ANSWERER: (prompt, z)} for y, prompt in zip(notes, prompts, strict=True) for z in (win, lose)]
    [pair] = sampling_pairs(two, [1.0, 0.0, 1.0, 0.0], final_node=ANSWERER)
    policies.model.zero_grad()
    SysDPOTrainer(policies, [pair], beta=1.0, optimizer=torch.optim.SGD(policies.parameters, lr=0.0)).train(1, 1)
    assert any(torch.count_nonzero(g) > 0 for g in lora_grads(policies, READER))


def test_sampling_scores_the_preferred_and_rejected_output_under_the_same_intermediates(tiny_model_dir,
                                                                                     tiny_adapter_dir):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    policies = NodePolicies(str(tiny_model_dir), {READER: str(tiny_adapter_dir), ANSWERER: str(tiny_adapter_dir)})
    x = chat(policies, "Does aspirin lower fever?")
    (y1, p1), (y2, p2) = [(y, chat(policies, f"Notes: {y} Answer yes or no."))
                          for y in ("It lowers fever in most trials.", "The abstract is about cats.")]
    win, lose = "Answer: yes", "Answer: no"
    # k = 2 intermediates, one answer each: y1 led to the preferred answer, y2 to the rejected one.
    trajectories = [{READER: (x, y1), ANSWERER: (p1, win)}, {READER: (x, y2), ANSWERER: (p2, lose)}]
    [direct] = direct_pairs(trajectories, [1.0, 0.0])
    assert (direct.chosen, direct.rejected) == ([trajectories[0]], [trajectories[1]])  # different intermediates
    [pair] = sampling_pairs(trajectories, [1.0, 0.0], final_node=ANSWERER)
    assert pair.chosen == [{READER: (x, y1), ANSWERER: (p1, win)}, {READER: (x, y2), ANSWERER: (p2, win)}]
    assert pair.rejected == [{READER: (x, y1), ANSWERER: (p1, lose)}, {READER: (x, y2), ANSWERER: (p2, lose)}]

    # log p^(z | x) = log sum_alpha p(y^alpha | x) p(z | y^alpha), checked against plain transformers.
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    adapted = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32),
                                        tiny_adapter_dir)
    lp = lambda prompt, completion: independent_logprob(adapted, tokenizer, prompt, completion)  # noqa: E731
    expected = [math.log(math.exp(lp(x, y1) + lp(p1, z)) + math.exp(lp(x, y2) + lp(p2, z))) for z in (win, lose)]
    trainer = SysDPOTrainer(policies, [pair], beta=0.1, optimizer=torch.optim.SGD(policies.parameters, lr=0.0))
    with torch.no_grad():
        assert trainer.estimates([0])[0].tolist() == pytest.approx(expected, abs=1e-3)


def test_sampling_with_a_fixed_final_component_sums_the_intermediates_that_reach_each_output():
    """Amazon: the decider (no adapter, greedy) writes the answer; p(z | y^alpha) is 1 where alpha led to z."""
    paths = [{"analyzer": ("x", f"summary {i // 2}"), "profiler": (f"p{i // 2}", f"notes {i}")} for i in range(4)]
    answers = ['{"answer": 1}', '{"answer": 2}', '{"answer": 1}', '{"answer": 3}']
    pairs = sampling_pairs(paths, [1.0, 0.0, 1.0, 0.0], final_node=None, outputs=answers)
    assert [(p.chosen, p.rejected, p.gap) for p in pairs] == [([paths[0], paths[2]], [paths[1]], 1.0),
                                                             ([paths[0], paths[2]], [paths[3]], 1.0)]
    assert len(direct_pairs(paths, [1.0, 0.0, 1.0, 0.0])) == 4  # trajectory pairs: each winner against each loser


def test_the_final_output_node_is_the_trainable_writer_of_the_system_output():
    from optimas_cli.methods.sysdpo import final_output_node
    from optimas_cli.system import CompoundSystem, ConfigKind
    from optimas_pipelines.amazon.system import build_system
    from optimas_pipelines.collab_chain.system import Answerer, EvidenceReader

    amazon = build_system("local/tiny", None, 8, 8, 8)
    assert final_output_node(amazon, ["session_analyzer", "candidate_profiler"]) is None  # the decider writes it
    reader = EvidenceReader(name="evidence_reader", description="", inputs=("question", "context"), outputs=("notes",),
                            kind=ConfigKind.WEIGHTS, default=None, base_model="local/tiny")
    answerer = Answerer(name="answerer", description="", inputs=("question", "notes"), outputs=("answer",),
                        kind=ConfigKind.WEIGHTS, default=None, base_model="local/tiny")
    chain = CompoundSystem([reader, answerer], inputs=("question", "context"), outputs=("answer",))
    assert final_output_node(chain, ["evidence_reader", "answerer"]) == "answerer"


def test_one_optimizer_keeps_its_state_across_trainers(tiny_model_dir):
    policies = NodePolicies(str(tiny_model_dir), {READER: None, ANSWERER: None}, {"r": 4, "alpha": 8})
    trajectories, scores = toy_trajectories(policies)
    optimizer = torch.optim.AdamW(policies.parameters, lr=5e-3)
    first = SysDPOTrainer(policies, direct_pairs(trajectories, scores), 0.5, optimizer).train(steps=2, batch_size=3)
    second = SysDPOTrainer(policies, direct_pairs(trajectories, scores), 0.5, optimizer).train(steps=2, batch_size=3)
    assert (first["optimizer_steps"], second["optimizer_steps"], optimizer_steps(optimizer)) == (2, 4, 4)


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
