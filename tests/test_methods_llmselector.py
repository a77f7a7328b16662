"""llmselector: greedy per-component model allocation, each allocation measured by real system runs."""
from __future__ import annotations

import pytest

from optimas_cli.errors import UserError
from optimas_cli.methods.llmselector import LLMSelector, is_model_choice
from optimas_cli.system.results_file import read_results
from optimas_pipelines.toys import model_selector, retriever
from tests.test_methods_toys import (
    GEMMA,
    needs_pubmedqa,
    optimize_and_test,
    pubmedqa_lm,
    pubmedqa_smoke,
    smoke_budget,
    two_models,
    two_models_lm,
)


def test_picks_the_model_that_is_always_right(tmp_path):
    pipeline = two_models()
    outcome, test, ctx = optimize_and_test(LLMSelector(budget=smoke_budget()), pipeline, pipeline.splits,
                                           two_models_lm(), tmp_path)
    assert outcome.config["model_selector"] == "strong" and test["mean"] == 1.0
    info = outcome.extras["llmselector"]
    assert info["allocation"] == {"model_selector": "strong"} and info["train_estimate"] == 1.0
    assert info["rounds_run"] == 2  # round 2 changes nothing and stops the search
    assert [h.proposal for h in outcome.history] == ["strong"] and outcome.history[0].accepted
    # on the 4-example sample: the default allocation, then one candidate (selector and solver re-run)
    assert ctx.ledger.equivalent_runs("local_optimization") == pytest.approx(4 + 4)


def test_on_the_chapter5_selector_it_picks_the_best_single_model(tmp_path):
    pipeline = model_selector.build()  # Y is right on 3 of 6 questions, X on 2: one model for all -> Y
    method = LLMSelector(budget=smoke_budget(), sample_size=6)
    outcome, test, _ = optimize_and_test(method, pipeline, pipeline.splits, None, tmp_path)
    assert outcome.config["model_selector"] == "Y" and test["mean"] == pytest.approx(0.5)


def test_pipelines_without_model_choices_are_a_user_error_naming_where_it_applies(tmp_path):
    pipeline = retriever.build()
    assert not is_model_choice(pipeline.system.components["retriever"])
    with pytest.raises(UserError, match="pubmedqa"):
        optimize_and_test(LLMSelector(budget=smoke_budget()), pipeline, pipeline.splits, None, tmp_path)
    with pytest.raises(UserError, match="not choice components"):
        optimize_and_test(LLMSelector(budget=smoke_budget(), components=["generator"]), pipeline, pipeline.splits,
                          None, tmp_path)


@needs_pubmedqa
def test_allocates_gemma_to_pubmedqas_solver(tmp_path):
    pipeline, splits = pubmedqa_smoke()
    outcome, test, _ = optimize_and_test(LLMSelector(budget=smoke_budget()), pipeline, splits,
                                         pubmedqa_lm(pipeline), tmp_path)
    info = outcome.extras["llmselector"]
    assert info["components"] == ["context_model_selector", "solver_model_selector"]
    assert outcome.config["solver_model_selector"] == GEMMA
    # the analyst's model does not change the scripted answers: no strict gain, the default stays
    assert outcome.config["context_model_selector"] == pipeline.system.default_config()["context_model_selector"]
    assert test["mean"] == 1.0 and info["sample_size"] == 4


def test_a_baseline_stops_at_a_budget_cap_and_still_reports(tmp_path):
    """Baselines honour the caps too: LLMSelector's first estimate already spends the one allowed run."""

    from tests.test_cli import optimas

    out = tmp_path / "run"
    proc = optimas("run", "pipeline=toy_model_selector", "method=llmselector", "budget=smoke", "budget.max_runs=1",
                   f"hydra.run.dir={out}", cwd=tmp_path)
    assert proc.returncode == 3, proc.stderr  # a cap's stop exits 3 in every task (issue 26 item 12: was 0 here)
    results = read_results(out)
    assert results["stopped"] == "max_runs" and results["history"] == [] and results["test"]["n"] > 0


def test_a_matched_cost_run_searches_until_its_allocation_converges_not_for_its_iterations(tmp_path):
    """budget.iterations=1, but matched (budget.max_runs_from): the confirming round runs too, as every matched
    method spends toward the reference's cap instead of stopping at budget.iterations."""
    from optimas_cli.system import RunContext, RunLedger
    from optimas_cli.system.caps import BudgetCaps
    from optimas_cli.system.run_folder import RunFolder

    pipeline = two_models()
    for matched, rounds in ((None, 1), ("optimas", 2)):
        ctx = RunContext(RunLedger(len(pipeline.system)), lm=two_models_lm())
        ctx.caps = BudgetCaps(max_runs=100.0, spent=lambda ctx=ctx: {"max_runs": ctx.ledger.equivalent_runs()})
        method = LLMSelector(budget=smoke_budget(iterations=1, max_runs_from=matched))
        outcome = method.optimize(pipeline, pipeline.splits, ctx.replace(phase="optimize"),
                                  RunFolder(tmp_path / str(matched)))
        assert outcome.extras["llmselector"]["rounds_run"] == rounds and ctx.caps.stopped is None
