"""global_reward: Algorithm 1 scored by the true global metric (downstream runs), no LRF, no Stage 2."""
from __future__ import annotations

import pytest

from optimas_cli.methods.global_reward import GlobalReward, with_global_choices
from optimas_cli.methods.scorers import GlobalRewardScorer
from optimas_cli.system import RunContext, RunLedger
from optimas_pipelines.toys import retriever
from tests.test_methods_toys import (
    GEMMA,
    GOOD_INSTRUCTION,
    capitals,
    capitals_lm,
    needs_pubmedqa,
    optimize_and_test,
    pubmedqa_lm,
    pubmedqa_smoke,
    smoke_budget,
)


def test_scorer_returns_the_global_reward_of_each_substituted_output():
    pipeline = with_global_choices(retriever.build())
    system, rows = pipeline.system, pipeline.splits.train
    ctx = RunContext(ledger=RunLedger(2), phase="local_optimization")
    scorer = GlobalRewardScorer(pipeline, ctx)
    scorer.observe(system.run(rows, system.default_config(), ctx), system.default_config())
    runs_before = ctx.ledger.equivalent_runs()
    inputs = [{"question": r["question"], "passages": r["passages"]} for r in rows]
    retr = system.components["retriever"]
    for value in ("A", "B"):
        outputs = retr.forward(inputs, value, ctx)
        assert scorer.score("retriever", inputs, outputs) == pytest.approx([r["reward"][value] for r in rows])
    # each score ran the downstream generator on 4 inputs: 2 x 4 executions of 1 of 2 components
    assert ctx.ledger.equivalent_runs() - runs_before == pytest.approx(4.0)
    with pytest.raises(RuntimeError, match="no cached trajectory"):
        scorer.score("retriever", [{"question": "unseen", "passages": {}}], [{"passage_id": "A", "passage": ""}])


def test_per_instance_choices_become_global_without_touching_the_original():
    original = retriever.build()
    view = with_global_choices(original)
    assert original.system.components["retriever"].per_instance
    assert not view.system.components["retriever"].per_instance
    assert view.splits is original.splits and view.metric is original.metric


def test_reaches_the_aligned_085_on_toy_retriever(tmp_path):
    """It sees the true reward: passage B is best on every query, 0.85 against the naive 0.2625."""
    pipeline = retriever.build()
    method = GlobalReward(budget=smoke_budget(iterations=4), seed=0)
    outcome, test, ctx = optimize_and_test(method, pipeline, pipeline.splits, None, tmp_path)
    assert outcome.config["retriever"] == "B"
    assert test["mean"] == pytest.approx(0.85)
    assert outcome.lrf is None and any(h.accepted for h in outcome.history)
    assert ctx.ledger.equivalent_runs("local_optimization") > 0  # the scorer's downstream runs are paid for
    assert outcome.extras["global_reward"]["scored_batches"] > 0


def test_prompt_components_reach_the_good_instruction(tmp_path):
    pipeline = capitals()
    method = GlobalReward(budget=smoke_budget(iterations=3), scheduler="round_robin")
    outcome, test, _ = optimize_and_test(method, pipeline, pipeline.splits, capitals_lm(), tmp_path)
    assert outcome.config["answerer"] == GOOD_INSTRUCTION
    assert test["mean"] == 1.0


@needs_pubmedqa
def test_runs_on_pubmedqa_and_finds_the_right_solver_model(tmp_path):
    pipeline, splits = pubmedqa_smoke()
    method = GlobalReward(budget=smoke_budget(iterations=3), scheduler="round_robin",
                          optimizer={"choice": {"temperature": 0.05}})
    outcome, test, ctx = optimize_and_test(method, pipeline, splits, pubmedqa_lm(pipeline), tmp_path)
    assert outcome.config["solver_model_selector"] == GEMMA
    assert test["mean"] == 1.0
    assert {"local_optimization", "validation", "test"} <= set(ctx.ledger.to_dict()["by_phase"])
