"""Sampling noise is independent across requests and reproducible per run (lm/sampling.py), for every
consumer of the seeds: plain calls, branching rollouts (REINFORCE, SysDPO's temperature arm) and
Stage 1's candidates with their Monte Carlo downstream repeats."""
from __future__ import annotations

import os
import subprocess
import sys
from collections import defaultdict

import pytest
from transformers import AutoTokenizer

from optimas_cli.lm.client import LMClient
from optimas_cli.lm.sampling import sample_seed
from optimas_cli.lm.types import LMRequest
from optimas_cli.lrf.collect import collect_pairs
from optimas_cli.optim.rollouts import Branching, sample_rollouts
from optimas_cli.system import CompoundSystem, ConfigKind, RunContext, RunLedger
from optimas_pipelines.collab_chain.system import Answerer, EvidenceReader

PROMPT_A, PROMPT_B = "What is the capital of France?", "Name a colour."


def chat(text: str) -> list[dict]:
    return [{"role": "user", "content": text}]


def shared_seeds(seen: dict[str, set[int]]) -> dict[int, int]:
    """seed -> how many different prompts were sampled with it (only seeds used by more than one)."""
    prompts_of = defaultdict(set)
    for prompt, seeds in seen.items():
        for seed in seeds:
            prompts_of[seed].add(prompt)
    return {seed: len(prompts) for seed, prompts in prompts_of.items() if len(prompts) > 1}


def chain(tiny_model) -> CompoundSystem:
    """SysDPO's collaboration chain (two LoRA nodes) on the tiny model, with short budgets."""
    reader = EvidenceReader(name="evidence_reader", description="notes", inputs=("question", "context"),
                            outputs=("notes",), kind=ConfigKind.WEIGHTS, default=None, base_model=tiny_model,
                            max_tokens=6)
    answerer = Answerer(name="answerer", description="answer", inputs=("question", "notes"), outputs=("answer",),
                        kind=ConfigKind.WEIGHTS, default=None, base_model=tiny_model, max_tokens=4)
    return CompoundSystem([reader, answerer], inputs=("question", "context"), outputs=("answer",))


EXAMPLES = [{"question": "Does aspirin help?", "context": "Aspirin reduced pain in 60% of patients."},
            {"question": "Is coffee harmful?", "context": "No harm was found in 2,000 coffee drinkers."}]


def test_same_seed_samples_of_two_prompts_agree_no_more_than_independent_samples(tiny_model, tiny_model_dir):
    # Before: one (seed, sample index) drew the same Gumbel noise for every prompt, so two unrelated
    # prompts agreed on 0.88 of their tokens against 0.12 for independent draws (64 samples, T=1).
    lm = LMClient(model=tiny_model, temperature=1.0, max_tokens=16, cache=False)
    n = 64
    a = [r.texts[0] for r in lm.complete([LMRequest(chat(PROMPT_A), seed=0, sample_index=i) for i in range(n)])]
    b = [r.texts[0] for r in lm.complete([LMRequest(chat(PROMPT_B), seed=0, sample_index=i) for i in range(2 * n)])]
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)

    def agreement(x: str, y: str) -> float:
        p, q = (tokenizer(t, add_special_tokens=False)["input_ids"] for t in (x, y))
        return sum(s == t for s, t in zip(p, q, strict=False)) / max(1, min(len(p), len(q)))

    same = sum(agreement(a[i], b[i]) for i in range(n)) / n
    independent = sum(agreement(a[i], b[n + i]) for i in range(n)) / n
    # per-sample agreement has a standard deviation of ~0.12, so each mean's standard error is ~0.015
    assert abs(same - independent) < 0.08, (same, independent)


def test_a_run_reproduces_its_samples_and_another_run_seed_draws_others(tiny_model):
    requests = [LMRequest(chat(q), seed=3, sample_index=i) for q in (PROMPT_A, PROMPT_B) for i in range(3)]

    def draw(seed: int) -> list[str]:
        lm = LMClient(model=tiny_model, temperature=1.0, max_tokens=8, cache=False)
        return [r.texts[0] for r in lm.complete([LMRequest(r.messages, seed=seed, sample_index=r.sample_index)
                                                 for r in requests])]

    assert draw(3) == draw(3)
    assert draw(3) != draw(4)


def test_sample_seeds_do_not_depend_on_the_process_hash_salt():
    messages = chat(PROMPT_A)
    here = sample_seed(5, messages, 2, 1)
    code = f"from optimas_cli.lm.sampling import sample_seed; print(sample_seed(5, {messages!r}, 2, 1))"
    for salt in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": salt}
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
        assert int(out.stdout) == here
    assert sample_seed(5, chat(PROMPT_B), 2, 1) != here  # the request is part of the key


@pytest.mark.parametrize("branching, rollouts", [(Branching(k=1, sampling="temperature"), 2),  # REINFORCE
                                                 (Branching(k=2, sampling="temperature"), 1)])  # SysDPO, T arm
def test_rollouts_sample_each_node_and_each_input_from_its_own_stream(tiny_model, tiny_lm, seeds_by_prompt,
                                                                      branching, rollouts):
    system = chain(tiny_model)
    ctx = RunContext(ledger=RunLedger(len(system)), lm=tiny_lm, phase="local_optimization", seed=0)
    result = sample_rollouts(system, EXAMPLES, system.default_config(), ctx, ["evidence_reader", "answerer"],
                             branching, rollouts=rollouts)
    assert len(result) == len(EXAMPLES) * rollouts * branching.k ** 2
    # reader and answerer of one rollout, and one stream's calls on the two inputs, each sampled their
    # own prompt with their own seeds (before: every prompt of stream r shared stream r's seeds)
    assert len(seeds_by_prompt) >= 2 * len(EXAMPLES)
    assert shared_seeds(seeds_by_prompt) == {}


def test_stage1_candidates_and_downstream_repeats_sample_each_prompt_from_its_own_stream(tiny_model, tiny_lm,
                                                                                          seeds_by_prompt):
    system = chain(tiny_model)
    ctx = RunContext(ledger=RunLedger(len(system)), lm=tiny_lm, phase="lrf_collection", seed=0)
    collect_pairs(system, system.default_config(), "evidence_reader", EXAMPLES, ctx, lambda ex, out: 0.0,
                  num_candidates=3, mc_repeats=2, temperature=1.0, downstream_temperature=1.0)
    # candidate i of each input and repeat r of each candidate's downstream: before, each index's
    # seed was shared by every input's (and every candidate's) prompt
    assert len(seeds_by_prompt) >= len(EXAMPLES) * 2
    assert shared_seeds(seeds_by_prompt) == {}


def test_sampled_cache_rows_of_the_earlier_seeding_are_not_served_but_greedy_rows_still_are():
    import hashlib
    import json

    from optimas_cli.lm.cache import call_key

    def earlier_key(temperature: float) -> str:  # call_key before the seeding took the request in
        sampled = temperature > 0
        fields = {"model": "m", "api_base": None, "messages": chat(PROMPT_A), "temperature": temperature,
                  "max_tokens": 8, "stop": [], "adapter": None, "seed": 1 if sampled else None,
                  "sample": [2, 0] if sampled else None}
        return hashlib.sha256(json.dumps(fields, sort_keys=True, ensure_ascii=False).encode()).hexdigest()

    assert call_key("m", chat(PROMPT_A), 1.0, 8, [], 1, 2, 0) != earlier_key(1.0)
    assert call_key("m", chat(PROMPT_A), 0.0, 8, [], 1, 2, 0) == earlier_key(0.0)
