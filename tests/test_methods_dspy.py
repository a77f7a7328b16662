"""dspy: the real DSPy MIPROv2 (instructions + few-shot demos) over the compound system, through the run's LM."""
from __future__ import annotations

import copy

import pytest

from optimas_cli.errors import UserError
from optimas_cli.methods.dspy_mipro import PROPOSER_TAG, CompoundProgram, DSPyMIPRO, SystemRuntime
from optimas_cli.system import CompoundSystem, ConfigKind, Metric, Pipeline, RunContext, RunLedger, Splits
from pipelines.toys import retriever
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
    assert info["status"] == "optimized" and info["parse_failures"] == 0
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


def test_unparseable_proposer_replies_are_counted_not_fatal(tmp_path):
    pipeline = capitals()
    lm = ScriptedLM(lambda req: capitals_reply(req) or "Sure! The instruction could be clearer.")
    outcome, test, _ = optimize_and_test(DSPyMIPRO(budget=smoke_budget()), pipeline, pipeline.splits, lm, tmp_path)
    info = outcome.extras["dspy"]
    assert info["parse_failures"] > 0 and info["parse_failure_excerpts"][0].startswith("Sure!")
    assert info["status"] == "failed" and "AdapterParseError" in info["error"]
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
