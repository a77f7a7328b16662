"""textgrad: the real textgrad package's loss / backward / TGD over the compound system's prompts."""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from optimas_cli.methods.textgrad import (  # tg via the method: it picks the log folder
    RunLMEngine,
    TextGrad,
    TextGradGraph,
    backward_by_depth,
    tg,
)
from optimas_cli.system import RunContext, RunLedger
from optimas_cli.system.caps import BudgetCaps
from optimas_cli.system.run_folder import RunFolder
from tests.fakes import ScriptedLM
from tests.test_methods_toys import (
    GOOD_INSTRUCTION,
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


def test_the_graph_links_each_output_to_its_instruction_and_upstream_outputs():
    pipeline = capitals()
    system = pipeline.system
    traj = system.run(pipeline.splits.train[:1], system.default_config(), RunContext(RunLedger(2), lm=capitals_lm()))[0]
    params = {n: tg.Variable(system.default_config()[n], role_description=f"instruction of {n}") for n in system.order}
    final = TextGradGraph(pipeline, params).final_output(traj)
    assert final.value == "answer: I am not sure."
    upstream = [v for v in final.predecessors if v.requires_grad and v is not params["answerer"]]
    assert params["answerer"] in final.predecessors and len(upstream) == 1
    assert upstream[0].value == "question: Tell me about France." and params["asker"] in upstream[0].predecessors


def test_optimizes_the_capitals_toy_through_the_run_lm(tmp_path):
    pipeline = capitals()
    lm = capitals_lm()
    outcome, test, ctx = optimize_and_test(TextGrad(budget=smoke_budget(iterations=2)), pipeline, pipeline.splits,
                                           lm, tmp_path)
    assert outcome.config["answerer"] == GOOD_INSTRUCTION and test["mean"] == 1.0
    info = outcome.extras["textgrad"]
    assert info["implementation"] == "textgrad 0.1.8" and info["parse_failures"] == 0
    assert outcome.history[0].accepted and outcome.history[0].val_after == 2.0
    tags = {component for component, _ in lm.requests}
    assert {"textgrad.loss", "textgrad.backward", "textgrad.optimizer"} <= tags
    assert sum(c == "textgrad.loss" for c, _ in lm.requests) == 2 * 3  # one critique per batch example
    assert ctx.ledger.equivalent_runs("validation") > 0


def test_an_update_that_lowers_validation_is_reverted(tmp_path):
    pipeline = capitals()
    pipeline.system.components["answerer"].default = GOOD_INSTRUCTION  # start from the best instruction
    lm = ScriptedLM(lambda req: capitals_reply(req) or scripted_reply(req, "Reply politely."))
    outcome, test, _ = optimize_and_test(TextGrad(budget=smoke_budget()), pipeline, pipeline.splits, lm, tmp_path)
    assert outcome.config["answerer"] == GOOD_INSTRUCTION and test["mean"] == 1.0
    assert outcome.history[0].val_candidate == 0.0 and not outcome.history[0].accepted


def untagged_rewrites(tmp_path, rewrite: str, **settings):
    """A TextGrad run on the capitals toy whose every update reply lacks TGD's tags: (outcome, console text)."""
    from io import StringIO

    from rich.console import Console

    pipeline = capitals()

    def answer(req):
        if "<IMPROVED_VARIABLE>" in req.messages[0]["content"]:
            return rewrite
        return capitals_reply(req) or scripted_reply(req)

    console = Console(file=StringIO(), width=400)
    outcome, _, _ = optimize_and_test(TextGrad(budget=smoke_budget(), console=console, **settings), pipeline,
                                      pipeline.splits, ScriptedLM(answer), tmp_path)
    return outcome, console.file.getvalue()


def test_an_update_reply_without_tags_is_a_counted_parse_failure(tmp_path):
    outcome, printed = untagged_rewrites(tmp_path, "Here is a better instruction: be precise.")
    assert outcome.extras["textgrad"]["parse_failures"] == 2 * 2  # two steps, two prompt components
    assert outcome.config == capitals().system.default_config()
    assert all(h.component is None for h in outcome.history)
    # said as what happened, not as a validation verdict ("val 0.000 → 0.000 rejected" before)
    assert all(h.note == "no update: TGD's rewrite had no <IMPROVED_VARIABLE> tags" for h in outcome.history)
    assert "nothing validated: no update: TGD's rewrite had no <IMPROVED_VARIABLE> tags" in printed
    assert "rejected" not in printed and "does not follow TextGrad's update format" not in printed  # 2 steps only


def test_a_run_whose_lm_writes_no_tagged_rewrite_says_so_once_after_three_steps(tmp_path):
    """The embedded 135M model spent 25 TextGrad steps on Amazon writing rewrites TGD could not read;
    the run said nothing of it but one "no update" line per step."""
    outcome, printed = untagged_rewrites(tmp_path, "The feedback provided in the <FEEDBACK> tags is sent to the user.",
                                         steps=4)
    assert outcome.extras["textgrad"]["parse_failures"] == 4 * 2
    assert printed.count("does not follow TextGrad's update format") == 1
    assert "none of the 6 rewrites of the first 3 steps" in printed


@needs_pubmedqa
def test_runs_end_to_end_on_pubmedqa(tmp_path):
    pipeline, splits = pubmedqa_smoke()
    outcome, test, _ = optimize_and_test(TextGrad(budget=smoke_budget(), batch_size=2), pipeline, splits,
                                         pubmedqa_lm(pipeline), tmp_path)
    default = pipeline.system.default_config()
    assert outcome.config["solver_model_selector"] == default["solver_model_selector"]
    assert len(outcome.history) == 2 and test["n"] == 4
    assert outcome.extras["textgrad"]["lm_calls"]["backward"] > 0


def _deterministic_feedback(req):
    """A reply that depends only on the request, so two backward walks can be compared."""
    return capitals_reply(req) or f"feedback #{sum(map(ord, req.messages[-1]['content'])) % 997}"


def _graph_with_losses(lm):
    pipeline = capitals()
    system = pipeline.system
    ctx = RunContext(RunLedger(2), lm=lm)
    trajs = system.run(pipeline.splits.train[:3], system.default_config(), ctx)
    params = {n: tg.Variable(system.default_config()[n], requires_grad=True, role_description=f"instruction of {n}")
              for n in system.order}
    engine = RunLMEngine(ctx, "textgrad.backward")
    graph = TextGradGraph(pipeline, params)
    losses = [graph.loss(t, 0.0, RunLMEngine(ctx, "textgrad.loss")) for t in trajs]
    return tg.sum(losses), params, engine


def test_backward_by_depth_gives_textgrads_own_gradients_in_fewer_lm_batches():
    sequential_root, sequential, engine = _graph_with_losses(ScriptedLM(_deterministic_feedback))
    sequential_root.backward(engine)
    concurrent_root, concurrent, engine = _graph_with_losses(ScriptedLM(_deterministic_feedback))
    with ThreadPoolExecutor(8) as pool:
        backward_by_depth(concurrent_root, engine, pool)
    for name in sequential:
        assert sorted(g.value for g in concurrent[name].gradients) == sorted(g.value for g in sequential[name].gradients)
        assert concurrent[name].gradients
    # three examples' calls at each depth went to the LM together
    assert max(engine.batcher.batch_sizes) == 3 and sum(engine.batcher.batch_sizes) == engine.calls


def test_a_step_sends_the_batchs_critiques_and_backward_calls_to_the_lm_together(tmp_path):
    pipeline = capitals()
    lm = capitals_lm()
    outcome, _, _ = optimize_and_test(TextGrad(budget=smoke_budget(iterations=2), batch_size=3), pipeline,
                                      pipeline.splits, lm, tmp_path)
    batches = outcome.extras["textgrad"]["lm_batches"]
    assert batches["loss"] == [3, 3]  # one LM batch of 3 critiques a step, not 3 calls one after another
    assert max(batches["backward"]) == 3
    assert len([c for c, r in lm.requests if c == "textgrad.backward"]) == sum(batches["backward"])


def test_textgrads_candidates_are_lm_written(tmp_path):
    pipeline = capitals()
    assert TextGrad(budget=smoke_budget()).prompt_proposer(pipeline, RunContext(RunLedger(2))) == "lm"


def capped(pipeline, max_runs: float) -> RunContext:
    ctx = RunContext(RunLedger(len(pipeline.system)), lm=capitals_lm())
    ctx.caps = BudgetCaps(max_runs=max_runs, spent=lambda: {"max_runs": ctx.ledger.equivalent_runs()})
    return ctx


def test_a_matched_cost_run_takes_as_many_steps_as_its_cap_pays_for(tmp_path):
    pipeline = capitals()
    ctx = capped(pipeline, 9.0)
    method = TextGrad(budget=smoke_budget(max_runs_from="optimas"), batch_size=3)
    outcome = method.optimize(pipeline, pipeline.splits, ctx.replace(phase="optimize"), RunFolder(tmp_path / "m"))
    assert outcome.extras["textgrad"]["steps_planned"] == 3  # each step runs the system on its 3 examples: 9 runs
    # 2 runs of validation, then a step of 3 + 2 re-validated: a second step's 3 runs would cross the cap (caps
    # are exact: a step whose known cost does not fit is not started). The planned end of a matched run, not a
    # stop (no `stopped`, no "continue with a raised cap"); `steps` counts the steps the history holds.
    assert ctx.caps.stopped is None and len(outcome.history) == 1 and ctx.ledger.equivalent_runs() == 7.0
    assert outcome.extras["textgrad"]["steps"] == 1
    plain = capped(pipeline, 9.0)  # without budget.max_runs_from a cap is a limit: its second step would cross it
    outcome = TextGrad(budget=smoke_budget(), batch_size=3).optimize(pipeline, pipeline.splits,
                                                                    plain.replace(phase="optimize"),
                                                                    RunFolder(tmp_path / "p"))
    assert outcome.extras["textgrad"]["steps"] == 1 and plain.caps.stopped.cap == "max_runs"


def test_the_engines_tokens_land_under_the_phase_of_their_context():
    lm = ScriptedLM("feedback")
    engine = RunLMEngine(RunContext(RunLedger(1), lm=lm, phase="local_optimization"), "textgrad.loss")
    assert engine("what is wrong?") == "feedback"
    assert lm.phases == ["local_optimization"]  # before: every TextGrad call was charged to phase "-"


def test_a_killed_run_resumes_after_its_last_step_as_if_never_stopped(tmp_path):
    """A run stopped after step 1 and started again in its folder goes on from its checkpoint (instructions,
    minibatch order, history, accounts) and ends as an uninterrupted run ends; before,
    a resume replayed every finished step (Amazon: ~165 s a step, its update prompts missing the cache)."""
    from io import StringIO

    from rich.console import Console

    pipeline = capitals()

    def run(steps: int, folder, console=None):
        lm = capitals_lm()
        ctx = RunContext(ledger=RunLedger(len(pipeline.system)), lm=lm)
        RunFolder(folder).restore_accounts(ctx)  # as `optimas run ... resume=<folder>` builds its context
        method = TextGrad(budget=smoke_budget(iterations=steps), console=console)
        return method.optimize(pipeline, pipeline.splits, ctx.replace(phase="optimize"), RunFolder(folder)), ctx, lm

    whole, whole_ctx, whole_lm = run(3, tmp_path / "whole")
    run(1, tmp_path / "killed")
    console = Console(file=StringIO(), width=200)
    resumed, resumed_ctx, resumed_lm = run(3, tmp_path / "killed", console)
    assert "resumed after step 1" in console.file.getvalue()

    def comparable(history):
        return [(e.iteration, e.component, e.val_candidate, e.accepted, e.runs_so_far) for e in history]

    assert whole.history[0].accepted  # step 1 changed the instructions the resumed run must start from
    assert comparable(resumed.history) == comparable(whole.history) and resumed.config == whole.config
    assert resumed_ctx.ledger.equivalent_runs() == whole_ctx.ledger.equivalent_runs()
    assert resumed.extras["textgrad"]["lm_calls"] == whole.extras["textgrad"]["lm_calls"]

    def updates(lm):  # TGD's prompts: the current instruction and this step's feedback
        # (as lines: TextGrad orders an update's feedback by iterating a set of objects)
        return [sorted("\n".join(m["content"] for m in req.messages).splitlines())
                for component, req in lm.requests if component == "textgrad.optimizer"]

    assert sum(c == "textgrad.loss" for c, _ in resumed_lm.requests) == 2 * 3  # steps 2 and 3 only
    assert updates(resumed_lm) == updates(whole_lm)[-len(updates(resumed_lm)):]
