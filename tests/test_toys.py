"""Chapter 5's toys reproduce the chapter's misaligned scores under their naive local metrics."""
from __future__ import annotations

import pytest

from optimas_cli.system import RunContext, RunLedger
from optimas_cli.system.evaluate import evaluate
from optimas_pipelines.toys import hint, model_selector, retriever


@pytest.mark.parametrize(
    "module, expected, naive_pick",
    [(retriever, 0.2625, "A"), (model_selector, 2 / 6, "X"), (hint, 0.42, "short")],
)
def test_naive_policy_gives_the_chapter_score(module, expected, naive_pick):
    pipeline = module.build()
    system = pipeline.system
    ctx = RunContext(ledger=RunLedger(len(system)))
    result = evaluate(pipeline, system.default_config(), pipeline.splits.test, ctx)
    assert result["mean"] == pytest.approx(expected)
    trajs = system.run(pipeline.splits.test, system.default_config(), ctx)
    assert {t.state["used_option"] for t in trajs} == {naive_pick}


@pytest.mark.parametrize("module, aligned", [(retriever, 0.85), (model_selector, 5 / 6), (hint, 0.81)])
def test_best_per_query_choice_reaches_the_aligned_score(module, aligned):
    """The ceiling an aligned LRF can reach: the best option on every query."""
    pipeline = module.build()
    best = [max(ex["reward"].values()) for ex in pipeline.splits.test]
    assert sum(best) / len(best) == pytest.approx(aligned)
