"""method=gepa: the real gepa package's gepa.optimize over the prompt components, through the run's LM layer,
its system runs in the run ledger and capped by the run cap, gated on validation, seeded, listed by the report."""
from __future__ import annotations

import hashlib
import signal
from io import StringIO

import pytest
from rich.console import Console

from optimas_cli.errors import UserError
from optimas_cli.methods.gepa import GEPA
from optimas_cli.methods.gepa_adapter import REFLECTION_TAG
from optimas_cli.system import RunContext, RunLedger
from optimas_cli.system.caps import BudgetCaps
from optimas_cli.system.results_file import read_results
from optimas_cli.system.run_folder import RunFolder
from optimas_pipelines.synthetic.components import instruction
from optimas_pipelines.synthetic.spec import STRATEGIES
from optimas_pipelines.synthetic.system import build
from optimas_pipelines.toys import model_selector
from tests.cli_runner import optimas
from tests.fakes import ScriptedLM
from tests.test_methods_toys import (
    GOOD_INSTRUCTION,
    capitals,
    capitals_reply,
    optimize_and_test,
    smoke_budget,
)

GEPA_ASKS = "Provide the new instructions within ``` blocks."  # the end of GEPA's reflection prompt


def reflection_lm(rewrite) -> ScriptedLM:
    """The capitals toy's components, and GEPA's reflection answered with `rewrite(prompt)` in a ``` block."""

    def answer(req):
        reply = capitals_reply(req)
        if reply is not None:
            return reply
        prompt = req.messages[-1]["content"]
        assert GEPA_ASKS in prompt, f"unexpected request: {prompt[:200]}"
        return f"Here it is:\n```\n{rewrite(prompt)}\n```"

    return ScriptedLM(answer)


def test_gepa_finds_the_capitals_instruction_with_its_reflection_through_the_run_lm(tmp_path):
    pipeline, lm = capitals(), reflection_lm(lambda prompt: GOOD_INSTRUCTION)
    console = Console(file=StringIO(), width=300)
    outcome, test, ctx = optimize_and_test(GEPA(smoke_budget(iterations=3), console=console), pipeline,
                                           pipeline.splits, lm, tmp_path)
    info = outcome.extras["gepa"]
    assert outcome.config["answerer"] == GOOD_INSTRUCTION and test["mean"] == 1.0
    assert info["implementation"] == "gepa 0.1.4" and info["changed"] == ["answerer"] and info["kept_candidate"] == 1
    # every reflection went through the run's LM client, tagged and in the optimization's phase
    reflections = [req for component, req in lm.requests if component == REFLECTION_TAG]
    assert len(reflections) == info["reflection_calls"] > 0
    assert all("Feedback" in r.messages[-1]["content"] and "exact_match" in r.messages[-1]["content"]
               for r in reflections)
    # one entry per judged proposal: the asker's rewrite fails GEPA's minibatch test, the answerer's is validated
    assert [(e.component, e.val_candidate, e.accepted, e.val_after) for e in outcome.history] == [
        (["asker"], None, False, 0.0), (["answerer"], 2.0, True, 2.0)]
    assert "rejected by GEPA on its training minibatch" in outcome.history[0].note
    assert "accepted" in console.file.getvalue()
    # validation: the seed in full (2 x 2 components), then the child re-ran only its answerer (2)
    validation = ctx.ledger.to_dict()["by_phase"]["validation"]
    assert validation["component_executions"] == {"asker": 2, "answerer": 4}
    assert ctx.ledger.equivalent_runs("local_optimization") > 0


def test_proposals_that_never_beat_the_initial_configuration_leave_it_unchanged(tmp_path):
    pipeline = capitals()
    outcome, test, _ = optimize_and_test(GEPA(smoke_budget(iterations=3)), pipeline, pipeline.splits,
                                         reflection_lm(lambda prompt: "Reply politely."), tmp_path)
    assert outcome.config == pipeline.system.default_config() and test["mean"] == 0.0
    assert outcome.history and not any(e.accepted for e in outcome.history)
    assert outcome.extras["gepa"]["changed"] == [] and outcome.extras["gepa"]["kept_candidate"] == 0


def test_a_failing_reflection_lm_ends_the_run_with_its_error_instead_of_being_logged_past(tmp_path):
    """GEPA logs a reflection that raised and goes on; a run whose LM cannot answer would spend its budget
    on minibatches that propose nothing."""

    def unreachable(prompt):
        raise UserError("lm server at http://localhost:1 does not answer", "start it")

    pipeline = capitals()
    with pytest.raises(UserError, match="does not answer"):
        optimize_and_test(GEPA(smoke_budget(iterations=3)), pipeline, pipeline.splits, reflection_lm(unreachable),
                          tmp_path)


def prompt_chain(**settings):
    """The simulator with K=3 prompt components: no LM in the system, only GEPA's reflection calls one."""
    return build(**{"components": 3, "kinds": "prompt", "options": 8, "input_types": 2, "noise": 0.0, "instance": 1,
                    "train_size": 12, "val_size": 10, "test_size": 10, **settings})


def strategy_writer() -> ScriptedLM:
    """A reflection that names a strategy picked by a hash of its prompt: reproducible, and varied."""

    def answer(req):
        digest = hashlib.sha256(req.messages[-1]["content"].encode()).digest()
        return f"```\n{instruction(STRATEGIES[digest[0] % len(STRATEGIES)])}\n```"

    return ScriptedLM(answer)


def run(pipeline, folder, max_runs=None, budget=None, **settings):
    ctx = RunContext(ledger=RunLedger(len(pipeline.system)), lm=strategy_writer())
    if max_runs is not None:
        ctx.caps = BudgetCaps(max_runs=max_runs, spent=lambda: {"max_runs": ctx.ledger.equivalent_runs()})
    outcome = GEPA(budget or smoke_budget(iterations=8), **settings).optimize(pipeline, pipeline.splits, ctx,
                                                                               RunFolder(folder))
    return outcome, ctx


def test_a_cap_with_runs_left_but_too_few_for_the_next_evaluation_ends_gepa(tmp_path):
    def hung(*_):
        raise TimeoutError("GEPA went on after the cap refused its next evaluation")

    signal.signal(signal.SIGALRM, hung)
    signal.alarm(120)
    try:  # the seed's validation costs 10 runs; every later evaluation needs more than the 0.3 left
        outcome, ctx = run(prompt_chain(), tmp_path, max_runs=10.3, budget=smoke_budget(max_runs_from="optimas"))
    finally:
        signal.alarm(0)
    info = outcome.extras["gepa"]
    assert "max_runs" in info["ended"] and info["reflection_calls"] == 0 and ctx.ledger.equivalent_runs() <= 10.3


def test_the_run_cap_sizes_gepas_budget_and_is_never_crossed(tmp_path):
    pipeline = prompt_chain()
    outcome, ctx = run(pipeline, tmp_path, max_runs=40.0, budget=smoke_budget(max_runs_from="optimas"))
    info = outcome.extras["gepa"]
    assert info["max_metric_calls"] is None and info["until_cap"]  # no count that could bind before the cap
    spent = ctx.ledger.equivalent_runs()
    # stopped where GEPA's next evaluation (at most a validation pass of 10 runs) would have crossed it
    assert 40.0 - 10 < spent <= 40.0 and "max_runs" in info["ended"]
    assert ctx.caps.stopped is None  # the planned end of a run GEPA's budget is the cap of: no resume asked for
    assert spent == pytest.approx(ctx.ledger.equivalent_runs("validation") + ctx.ledger.equivalent_runs("local_optimization"))


def test_a_cap_below_an_explicit_metric_budget_stops_the_run(tmp_path):
    outcome, ctx = run(prompt_chain(), tmp_path, max_runs=25.0, max_metric_calls=1000)
    assert ctx.ledger.equivalent_runs() <= 25.0 and ctx.caps.stopped.cap == "max_runs"
    assert not outcome.extras["gepa"]["until_cap"] and outcome.extras["gepa"]["max_metric_calls"] == 1000


def test_a_cap_before_the_seed_is_validated_keeps_the_initial_configuration(tmp_path):
    pipeline = prompt_chain()
    outcome, ctx = run(pipeline, tmp_path, max_runs=5.0, max_metric_calls=1000)  # the seed needs 10
    assert outcome.config == pipeline.system.default_config() and outcome.history == []
    assert ctx.ledger.equivalent_runs() == 0 and ctx.caps.stopped.cap == "max_runs"


def test_the_same_seed_gives_the_same_search_and_another_seed_another(tmp_path):
    pipeline = prompt_chain()
    searches = []
    for i, seed in enumerate((0, 0, 1)):
        outcome, ctx = run(pipeline, tmp_path / str(i), seed=seed)
        searches.append(([e.to_dict() for e in outcome.history], outcome.config.to_dict(), ctx.ledger.to_dict()["runs"]))
    assert searches[0] == searches[1] and searches[0][0] != searches[2][0]
    assert len(searches[0][0]) >= 3


def test_without_a_cap_gepas_budget_is_budget_iterations_proposals():
    method = GEPA(smoke_budget(iterations=4), reflection_minibatch_size=2)
    assert method.metric_calls(components=3, val_size=10, ctx=RunContext(RunLedger(3))) == (10 + 4 * (2 * 2 + 10), False)
    assert GEPA(smoke_budget(), max_metric_calls=7).metric_calls(3, 10, RunContext(RunLedger(3))) == (7, False)


def test_a_pipeline_without_prompt_components_is_refused_in_one_line(tmp_path):
    pipeline = model_selector.build()
    with pytest.raises(UserError, match="method gepa optimizes prompt components") as error:
        GEPA(smoke_budget()).optimize(pipeline, pipeline.splits, RunContext(RunLedger(len(pipeline.system)),
                                                                            lm=ScriptedLM()), RunFolder(tmp_path))
    assert "\n" not in str(error.value)


def test_choice_components_are_left_unchanged_and_listed(tmp_path):
    pipeline = build(components=3, kinds="mix", options=4, input_types=1, noise=0.0, instance=2, train_size=6,
                     val_size=6, test_size=6)
    outcome, _ = run(pipeline, tmp_path, budget=smoke_budget(iterations=3))
    left = outcome.extras["gepa"]["left_unchanged"]
    assert left and set(left.values()) == {"choice"}
    assert all(outcome.config[n] == pipeline.system.default_config()[n] for n in left)


def test_the_config_builds_gepa():
    from tests.test_methods_configs import build as build_method_named

    method = build_method_named("gepa")
    assert isinstance(method, GEPA) and method.name == "gepa" and method.seed == 3 and method.max_metric_calls is None


@pytest.mark.real_model
def test_a_capped_cli_run_reflects_with_the_embedded_model_and_the_report_lists_it(tmp_path):
    """Offline end to end: the simulator's prompt chain (no LM in the system), GEPA's reflection on SmolLM2."""
    out = tmp_path / "run"
    proc = optimas("run", "pipeline=synthetic", "pipeline.components=3", "pipeline.kinds=prompt",
                   "pipeline.input_types=1", "method=gepa", "method.max_tokens=48", "budget=smoke",
                   "budget.max_runs=20", "repeats=1", f"hydra.run.dir={out}", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    results = read_results(out)
    info = results["gepa"]
    assert results["method"] == "gepa" and results["proposer"] == "lm" and "stopped" not in results
    phases = results["ledger"]["by_phase"]
    assert phases["validation"]["runs"] + phases["local_optimization"]["runs"] <= 20
    # the reflection calls are in the run's LM ledger
    assert results["ledger"]["lm"]["by_component"][REFLECTION_TAG]["calls"] == info["reflection_calls"] > 0
    assert all(set(entry) >= {"iteration", "val_before", "val_after", "accepted", "runs_so_far"}
               for entry in results["history"])
    report = optimas("report", str(out), "--out", str(tmp_path / "report"), cwd=tmp_path)
    assert report.returncode == 0, report.stderr[-2000:]
    assert "| GEPA |" in (tmp_path / "report" / "report.md").read_text()
