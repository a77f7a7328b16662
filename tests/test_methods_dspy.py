"""dspy: the real DSPy MIPROv2 (instructions + few-shot demos) over the compound system, through the run's LM."""
from __future__ import annotations

import copy
from types import SimpleNamespace

import pytest

from optimas_cli.errors import UserError
from optimas_cli.methods.dspy_mipro import PROPOSER_TAG, CompoundProgram, DSPyMIPRO, SystemRuntime
from optimas_cli.system import CompoundSystem, ConfigKind, Metric, Pipeline, RunContext, RunLedger, Splits
from optimas_cli.system.caps import BudgetCaps
from optimas_cli.system.run_folder import RunFolder
from optimas_pipelines.toys import retriever
from tests.fakes import ScriptedLM
from tests.test_methods_toys import (
    CAPITALS,
    GOOD_INSTRUCTION,
    Answerer,
    capitals,
    capitals_lm,
    capitals_reply,
    needs_pubmedqa,
    optimize_and_test,
    pubmedqa_lm,
    pubmedqa_smoke,
    scripted_reply,
    smoke_budget,
)


def test_optimizes_the_instructions_of_the_capitals_toy(tmp_path):
    pipeline = capitals()
    lm = capitals_lm()
    outcome, test, ctx = optimize_and_test(DSPyMIPRO(budget=smoke_budget(iterations=3)), pipeline, pipeline.splits,
                                           lm, tmp_path)
    info = outcome.extras["dspy"]
    assert info["status"] == "optimized" and info["parse_failures"] == 0 and info["lm_proposals"] == "used"
    assert info["num_candidates"] == 3 and info["num_trials"] == 3  # smoke: 2 new instructions + the original
    assert outcome.config["answerer"] == GOOD_INSTRUCTION and test["mean"] == 1.0
    assert info["best_val_mean"] == 1.0
    # the default program is evaluated first, then one evaluation per trial
    assert outcome.history[0].proposal == pipeline.system.default_config().to_dict()
    assert outcome.history[0].val_candidate == 0.0 and max(h.val_after for h in outcome.history) == 2.0
    # DSPy's own calls went through the run's LM layer, tagged as the proposer
    assert info["proposer_calls"] > 0
    assert sum(component == PROPOSER_TAG for component, _ in lm.requests) == info["proposer_calls"]
    phases = ctx.ledger.to_dict()["by_phase"]
    assert phases["validation"]["runs"] > 0 and phases["local_optimization"]["runs"] > 0


def learns_from_examples() -> tuple[Pipeline, ScriptedLM]:
    """One answerer whose LM names the capital only when its prompt shows worked examples: no
    instruction helps, demonstrations do."""
    answerer = Answerer("answerer", "Answers the question in one word.", inputs=("question",), outputs=("answer",),
                        kind=ConfigKind.PROMPT, default="Reply to the question.")
    system = CompoundSystem([answerer], inputs=("question",), outputs=("answer",))
    rows = [{"question": f"What is the capital of {c}?", "answer": k} for c, k in CAPITALS]
    metric = Metric("exact_match", lambda ex, out: float(out["answer"] == ex["answer"]))
    pipeline = Pipeline("toy_examples", system, Splits(rows[:6], rows[6:8], rows[8:]), metric)

    def answer(request):
        user = request.messages[-1]["content"]
        if user.startswith("Question: "):
            capital = next(k for c, k in CAPITALS if c in user)
            return capital if "Examples:" in request.messages[0]["content"] else "I am not sure."
        return scripted_reply(request, "Reply to the question briefly.")

    return pipeline, ScriptedLM(answer)


def test_mipro_bootstraps_demos_into_the_configuration_by_default(tmp_path):
    pipeline, lm = learns_from_examples()
    method = DSPyMIPRO(budget=smoke_budget(iterations=4))
    outcome, test, _ = optimize_and_test(method, pipeline, pipeline.splits, lm, tmp_path)
    info = outcome.extras["dspy"]
    assert info["few_shot"] and info["max_bootstrapped_demos"] == info["max_labeled_demos"] == 4
    assert info["demos"]["answerer"] > 0 and "Examples:\n\nquestion: What is the capital of" in outcome.config["answerer"]
    assert info["best_val_mean"] == 1.0 and test["mean"] == 1.0  # the test run reads the demos from the config


def test_instructions_only_is_an_option(tmp_path):
    pipeline, lm = learns_from_examples()
    method = DSPyMIPRO(budget=smoke_budget(iterations=4), few_shot=False)
    outcome, test, _ = optimize_and_test(method, pipeline, pipeline.splits, lm, tmp_path)
    info = outcome.extras["dspy"]
    assert info["demos"] == {"answerer": 0} and "Examples:" not in outcome.config["answerer"]
    assert info["best_val_mean"] == 0.0 and test["mean"] == 0.0


def test_unparseable_proposer_replies_are_counted_and_the_search_goes_on_without_them(tmp_path):
    """MIPROv2's proposer raises on an unparseable reply; its LM candidates are dropped and the trials
    search what is left: the original instruction and the pool (here, a shipped alternative)."""
    pipeline = capitals()
    pipeline.system.components["answerer"].alternatives = (GOOD_INSTRUCTION,)
    lm = ScriptedLM(lambda req: capitals_reply(req) or "Sure! The instruction could be clearer.")
    method = DSPyMIPRO(budget=smoke_budget(iterations=4), proposer="mixed", few_shot=False)
    outcome, test, _ = optimize_and_test(method, pipeline, pipeline.splits, lm, tmp_path)
    info = outcome.extras["dspy"]
    assert info["parse_failures"] > 0 and info["parse_failure_excerpts"][0].startswith("Sure!")
    assert info["status"] == "optimized" and info["lm_proposals"].startswith("failed, dropped: AdapterParseError")
    assert len(outcome.history) > 1  # the trials ran
    assert outcome.config["answerer"] == GOOD_INSTRUCTION and test["mean"] == 1.0


def test_without_a_pool_a_failed_proposer_leaves_the_original_instructions(tmp_path):
    pipeline = capitals()
    lm = ScriptedLM(lambda req: capitals_reply(req) or "Sure! The instruction could be clearer.")
    method = DSPyMIPRO(budget=smoke_budget(), proposer="lm", few_shot=False)
    outcome, test, _ = optimize_and_test(method, pipeline, pipeline.splits, lm, tmp_path)
    assert outcome.extras["dspy"]["lm_proposals"].startswith("failed, dropped")
    assert outcome.config == pipeline.system.default_config() and test["mean"] == 0.0


def test_program_copies_share_the_system_and_cache_but_not_the_instructions():
    pipeline = capitals()
    ctx = RunContext(ledger=RunLedger(2), lm=capitals_lm())
    runtime = SystemRuntime(pipeline, ["asker", "answerer"], ctx, set())
    program = CompoundProgram(runtime)
    clone = program.deepcopy()
    assert clone.runtime is runtime and runtime.predictor(clone, "answerer") is not runtime.predictor(program, "answerer")
    assert [name for name, _ in clone.named_predictors()] == ["asker", "answerer"]
    answerer = runtime.predictor(clone, "answerer")
    answerer.signature = answerer.signature.with_instructions(GOOD_INSTRUCTION)
    assert runtime.prompt_values(program)["answerer"] == "Reply to the question."
    assert runtime.prompt_values(clone)["answerer"] == GOOD_INSTRUCTION
    assert clone(country="Peru").answer == "Lima" and program(country="Peru").answer == "I am not sure."
    runs = ctx.ledger.equivalent_runs()
    copy.deepcopy(clone)(country="Peru")  # cached: no new execution
    assert ctx.ledger.equivalent_runs() == runs


def test_a_pipeline_without_prompt_components_is_a_user_error(tmp_path):
    pipeline = retriever.build()
    with pytest.raises(UserError, match="prompt components"):
        optimize_and_test(DSPyMIPRO(budget=smoke_budget()), pipeline, pipeline.splits, None, tmp_path)


@needs_pubmedqa
def test_runs_end_to_end_on_pubmedqa(tmp_path):
    pipeline, splits = pubmedqa_smoke()
    lm = pubmedqa_lm(pipeline, instruction="Summarize the evidence that answers the question.")
    outcome, test, _ = optimize_and_test(DSPyMIPRO(budget=smoke_budget()), pipeline, splits, lm, tmp_path)
    info = outcome.extras["dspy"]
    assert info["status"] == "optimized" and info["components"] == ["context_analyst", "problem_solver"]
    default = pipeline.system.default_config()
    for name in ("context_model_selector", "solver_model_selector"):  # not prompt components: left alone
        assert outcome.config[name] == default[name]
    assert all(isinstance(outcome.config[n], str) and outcome.config[n] for n in info["components"])
    assert info["parse_failures"] == 0
    # The labeled rows show question -> answer, which the solver's demos keep; they carry no summary, so
    # the analyst gets none (and no run scored, so nothing was bootstrapped).
    assert "Examples:\n\nquestion: " in outcome.config["problem_solver"]
    assert "Examples:" not in outcome.config["context_analyst"]
    # The default program scores 0 on validation: the solver stays on smollm2, which the scripted LM
    # makes wrong on every row; the best trial's gain (an answer parsed as 'maybe') was accepted strictly.
    assert outcome.history[0].val_candidate == 0.0
    best = max(h.val_candidate for h in outcome.history)
    assert info["best_val_mean"] == best / len(splits.val) and any(h.accepted for h in outcome.history)
    assert test["n"] == 4 and test["mean"] == 0.0  # the test rows are yes/no only


def test_dspy_prints_go_to_the_run_log_not_the_terminal(capsys, caplog):
    from optimas_cli.methods.dspy_mipro import dspy_logs_to_run_log

    with caplog.at_level("INFO", logger="dspy"), dspy_logs_to_run_log():
        print("PROGRAM DESCRIPTION: a raw proposer prompt")
        print("partial line", end="")
        print(" finished")
    assert capsys.readouterr().out == ""
    logged = list(dict.fromkeys(r.getMessage() for r in caplog.records if r.name == "dspy"))
    assert logged == ["PROGRAM DESCRIPTION: a raw proposer prompt", "partial line finished"]


# -- the candidate space (Table 2 like with like) and budget caps ----------------------------------
def capitals_with_a_pool() -> tuple[Pipeline, ScriptedLM]:
    """The capitals toy whose answerer ships the instruction that works, while the LM only ever proposes
    one that does not: only a search that draws from the pipeline's pool can find it."""
    pipeline = capitals()
    pipeline.system.components["answerer"].alternatives = (GOOD_INSTRUCTION,)
    return pipeline, capitals_lm(instruction="Reply to the question briefly.")


@pytest.mark.parametrize("proposer, found", [("mixed", True), ("lm", False)])
def test_mixed_adds_the_pipelines_instruction_pool_to_miprov2s_candidates(tmp_path, proposer, found):
    pipeline, lm = capitals_with_a_pool()
    method = DSPyMIPRO(budget=smoke_budget(), num_trials=8, few_shot=False, proposer=proposer)
    outcome, test, ctx = optimize_and_test(method, pipeline, pipeline.splits, lm, tmp_path)
    info = outcome.extras["dspy"]
    assert info["proposer"] == proposer == method.prompt_proposer(pipeline, ctx)
    # the answerer's pool: its alternative and the original plus a format constraint; the asker's: the constraint
    assert info["pool_candidates"] == ({"asker": 1, "answerer": 2} if found else {"asker": 0, "answerer": 0})
    assert (outcome.config["answerer"] == GOOD_INSTRUCTION) is found and test["mean"] == float(found)


def test_pool_searches_the_pool_without_miprov2s_proposer(tmp_path):
    pipeline, lm = capitals_with_a_pool()
    outcome, test, _ = optimize_and_test(DSPyMIPRO(budget=smoke_budget(), num_trials=8, few_shot=False,
                                                   proposer="pool"), pipeline, pipeline.splits, lm, tmp_path)
    assert outcome.config["answerer"] == GOOD_INSTRUCTION and test["mean"] == 1.0
    assert not any(c == PROPOSER_TAG and "proposed_instruction" in r.messages[-1]["content"] for c, r in lm.requests)


def test_auto_is_mixed_for_an_embedded_lm_and_lm_otherwise():
    pipeline = capitals()
    local = RunContext(ledger=RunLedger(2), lm=SimpleNamespace(model="local/smollm2-135m-instruct"))
    api = RunContext(ledger=RunLedger(2), lm=SimpleNamespace(model="openai/gpt-4o-mini"))
    method = DSPyMIPRO(budget=smoke_budget())
    assert (method.prompt_proposer(pipeline, local), method.prompt_proposer(pipeline, api)) == ("mixed", "lm")


def capped(pipeline: Pipeline, lm, max_runs: float) -> RunContext:
    ctx = RunContext(ledger=RunLedger(len(pipeline.system)), lm=lm)
    ctx.caps = BudgetCaps(max_runs=max_runs, spent=lambda: {"max_runs": ctx.ledger.equivalent_runs()})
    return ctx


def optimize_capped(method, pipeline: Pipeline, ctx: RunContext, folder):
    outcome = method.optimize(pipeline, pipeline.splits, ctx.replace(phase="optimize"), RunFolder(folder))
    return outcome, outcome.extras["dspy"]


def test_a_run_cap_stops_miprov2_between_its_trials(tmp_path):
    pipeline = capitals()
    uncapped = RunContext(ledger=RunLedger(2), lm=capitals_lm())
    _, full = optimize_capped(DSPyMIPRO(budget=smoke_budget(), num_trials=10), pipeline, uncapped, tmp_path / "a")
    before_trials = 6.0  # the smoke budget's bootstrapping runs the 6 training rows once
    ctx = capped(pipeline, capitals_lm(), before_trials + 3)
    outcome, info = optimize_capped(DSPyMIPRO(budget=smoke_budget(), num_trials=10), pipeline, ctx, tmp_path / "b")
    assert uncapped.ledger.equivalent_runs() > before_trials + 3 + len(pipeline.splits.val)  # uncapped: all 10 trials
    assert ctx.caps.stopped is not None and ctx.caps.stopped.cap == "max_runs"
    spent = ctx.ledger.equivalent_runs()
    assert before_trials + 3 <= spent < before_trials + 3 + len(pipeline.splits.val)  # at most one trial past it
    assert len(outcome.history) < 11 and info["status"] == "optimized"


def test_a_matched_cost_run_sizes_its_trials_from_the_cap_and_spends_it(tmp_path):
    pipeline = capitals()
    ctx = capped(pipeline, capitals_lm(), 11.0)
    _, info = optimize_capped(DSPyMIPRO(budget=smoke_budget(max_runs_from="optimas")), pipeline, ctx, tmp_path / "m")
    # at the cheapest a trial re-runs one of the 2 components on the 2 validation rows: 11 runs pay for 11 trials
    assert info["num_trials"] == 11
    # the cap ended the search where it was meant to: the run's planned end, not a stop to resume from
    assert ctx.caps.stopped is None and 11.0 <= ctx.ledger.equivalent_runs() < 11.0 + len(pipeline.splits.val)
    # without budget.max_runs_from the cap is a limit only: budget.iterations trials, 10 runs, under the cap
    plain = capped(pipeline, capitals_lm(), 11.0)
    _, info = optimize_capped(DSPyMIPRO(budget=smoke_budget()), pipeline, plain, tmp_path / "p")
    assert info["num_trials"] == 2 and plain.caps.stopped is None and plain.ledger.equivalent_runs() == 10.0
