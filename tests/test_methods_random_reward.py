"""random_reward: Algorithm 1 with a seeded random number in place of r_k; only the gate decides."""
from __future__ import annotations

import pytest

from optimas_cli.methods.global_reward import RandomReward
from optimas_cli.methods.scorers import RandomScorer
from optimas_pipelines.toys import retriever
from tests.test_methods_toys import optimize_and_test, smoke_budget

INPUTS = [{"question": f"q{i}"} for i in range(6)]
OUTPUTS = [{"answer": f"a{i}"} for i in range(6)]


def test_a_score_is_fixed_by_seed_component_input_and_output_alone():
    scorer = RandomScorer(seed=0)
    scores = scorer.score("reader", INPUTS, OUTPUTS)
    assert all(0.0 <= s < 1.0 for s in scores) and len(set(scores)) == len(scores)
    # the same pair scores the same alone, in another batch, in another order
    assert scorer.score("reader", INPUTS[3:4], OUTPUTS[3:4]) == [scores[3]]
    assert scorer.score("reader", INPUTS[::-1], OUTPUTS[::-1]) == scores[::-1]
    assert RandomScorer(seed=0).score("reader", INPUTS, OUTPUTS) == scores  # across instances (and resumes)
    assert RandomScorer(seed=1).score("reader", INPUTS, OUTPUTS) != scores
    assert scorer.score("writer", INPUTS, OUTPUTS) != scores
    assert scorer.score("reader", INPUTS, [{"answer": "other"}] * 6) != scores


def test_the_gate_alone_keeps_what_the_random_proposals_improve(tmp_path):
    pipeline = retriever.build()
    method = RandomReward(budget=smoke_budget(iterations=6), seed=0)
    outcome, test, _ = optimize_and_test(method, pipeline, pipeline.splits, None, tmp_path)
    history = outcome.history
    assert len(history) == 6 and outcome.lrf is None
    assert outcome.extras["random_reward"]["scorer"].startswith("a seeded random number")
    assert any(h.val_candidate is not None for h in history)  # a random proposal reached the gate
    # optimizer.choice.scale=relative: only values the random score ranks at least as high as the current one
    # (on this 2-value toy, once its favourite is accepted nothing else is proposed)
    assert all(h.local_score >= h.baseline_local_score for h in history)
    for before, after in zip(history, history[1:], strict=False):
        assert after.val_before == pytest.approx(before.val_after)  # the configuration only changes on accept
    for entry in history:
        assert entry.val_after >= entry.val_before
        if entry.accepted:
            assert entry.val_candidate > entry.val_before
