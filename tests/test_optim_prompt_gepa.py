"""optimizer.prompt.proposer=gepa: GEPA's reflective proposer and Pareto pool over one component's search inputs,
r_k its metric, its reflections through the run's LM layer, inside Algorithm 1 and within the run cap."""
from __future__ import annotations

import hashlib
import io

import numpy as np
import pytest
from rich.console import Console

from optimas_cli.errors import UserError
from optimas_cli.methods.optimas import Optimas
from optimas_cli.optim import optimize_component
from optimas_cli.optim.prompt import propose
from optimas_cli.system import RunContext, RunLedger
from optimas_cli.system.caps import BudgetCaps, BudgetExhausted
from optimas_cli.system.run_folder import RunFolder
from optimas_pipelines.synthetic.components import instruction
from optimas_pipelines.synthetic.spec import STRATEGIES
from optimas_pipelines.synthetic.system import build
from tests.fakes import ScriptedLM
from tests.test_methods_gepa import GEPA_ASKS
from tests.test_methods_toys import smoke_budget
from tests.test_optim_prompt import SEARCH, KeywordReward, Writer

GEPA = {"proposer": "gepa", "num_candidates": 2, "num_steps": 1}  # two GEPA iterations


def reflecting(reply) -> ScriptedLM:
    """An LM that answers GEPA's reflection prompt (and nothing else) with `reply(prompt)` in a ``` block."""

    def answer(req):
        prompt = req.messages[-1]["content"]
        assert GEPA_ASKS in prompt, f"unexpected request: {prompt[:200]}"
        return f"A better one:\n```\n{reply(prompt)}\n```"

    return ScriptedLM(answer)


def test_gepas_candidate_improves_r_k_and_its_reflections_go_through_the_lm_layer_as_the_optimizer():
    lm = reflecting(lambda prompt: "Be concise: answer in a few words.")
    ctx = RunContext(ledger=RunLedger(4), lm=lm, phase="local_optimization")
    proposal = optimize_component(Writer(), "Answer the question.", SEARCH, KeywordReward(), ctx, {"prompt": GEPA},
                                  rng=np.random.default_rng(0))
    assert proposal.value == "Be concise: answer in a few words." and proposal.details["improved"]
    assert proposal.local_score == pytest.approx(0.9) and proposal.baseline_score == pytest.approx(0.1)
    # one reflection per GEPA iteration, tagged like the OPRO meta-prompt, showing r_k as the feedback
    assert [tag for tag, _ in lm.requests] == ["writer.optimizer"] * 2 == ["writer.optimizer"] * \
        proposal.details["reflection_calls"]
    first = lm.requests[0][1].messages[-1]["content"]
    assert "Answer the question." in first and "scored it 0.100" in first and "[Answer the question.] q" in first
    # the current instruction on all 5 inputs, the child on its minibatch and then the rest; the second
    # iteration's parent (the child) and its identical rewrite are cached: nothing runs again
    assert ctx.ledger.executions["local_optimization"] == {"writer": 10} and proposal.details["executions"] == 10
    assert proposal.details["pareto_front"] == [1]  # the child is best on every input: the seed is dominated


class SplitReward:
    """r_k: 0.5 everywhere under the current instruction; 'alpha' scores 1.0 on q0 but 0.3 on the others."""

    def score(self, name, inputs, outputs):
        def one(answer: str) -> float:
            if "alpha" not in answer:
                return 0.5
            return 1.0 if answer.endswith("q0") else 0.3
        return [one(o["answer"]) for o in outputs]


def test_the_pareto_pool_is_per_input_and_the_candidate_returned_is_the_best_mean():
    """'Use alpha.' wins on one input and loses on two (its sum 1.6 beats 1.5, so it joins the pool): both it
    and the current instruction stay on the Pareto front, and the better mean is returned."""
    three = SEARCH[:3]  # GEPA's minibatch of 3 is then every input: the child's acceptance is not left to chance
    ctx = RunContext(ledger=RunLedger(4), lm=reflecting(lambda prompt: "Use alpha."))
    proposal = propose(Writer(), "Answer the question.", three, SplitReward(), ctx,
                       {**GEPA, "num_candidates": 1}, rng=np.random.default_rng(0))
    assert proposal.details["pareto_front"] == [0, 1]
    assert [(c["prompt"], c["parents"]) for c in proposal.details["candidates"]] == [("Use alpha.", [0])]
    assert proposal.value == "Use alpha." and proposal.local_score == pytest.approx(1.6 / 3)
    assert proposal.baseline_score == pytest.approx(0.5)


def test_the_current_instruction_is_kept_when_no_candidate_beats_it():
    ctx = RunContext(ledger=RunLedger(4), lm=reflecting(lambda prompt: "Reply politely."))
    proposal = propose(Writer(), "Be concise.", SEARCH, KeywordReward(), ctx, GEPA, rng=np.random.default_rng(0))
    assert proposal.value == "Be concise." and not proposal.details["improved"]
    assert proposal.local_score == proposal.baseline_score == pytest.approx(0.9)
    assert proposal.details["candidates"] == []  # rejected on its minibatch, never in the pool


def test_a_search_stops_before_an_execution_that_would_cross_the_run_cap():
    """The current instruction's 5 inputs cost 5/4 runs, a child's minibatch 3/4: a cap of 1.25 + 0.5 leaves room
    for the first and raises before the second, never after it."""
    lm = reflecting(lambda prompt: "Be concise: answer in a few words.")
    ctx = RunContext(ledger=RunLedger(4), lm=lm, phase="local_optimization")
    ctx.caps = BudgetCaps(max_runs=1.75, spent=lambda: {"max_runs": ctx.ledger.equivalent_runs()})
    with pytest.raises(BudgetExhausted, match="would be crossed"):
        propose(Writer(), "Answer the question.", SEARCH, KeywordReward(), ctx, GEPA, rng=np.random.default_rng(0))
    assert ctx.ledger.equivalent_runs() == 1.25 and lm.requests == []  # no reflection whose child could not run


def test_gepa_is_algorithm_1s_proposer_only():
    from optimas_cli.optim.prompt import resolve_proposer

    ctx = RunContext(ledger=RunLedger(2))
    assert resolve_proposer("gepa", None, ctx, ("auto", "gepa")) == "gepa"
    with pytest.raises(UserError, match="proposer=") as error:
        resolve_proposer("gepa", None, ctx)  # DSPy's candidate sources, and the top-level `proposer`
    assert "\n" not in str(error.value)


# -- inside Algorithm 1 -----------------------------------------------------------------------------------------
def prompt_chain():
    """The simulator with K=3 prompt components: no LM in the system, only the proposer's reflection calls one."""
    return build(components=3, kinds="prompt", options=8, input_types=2, noise=0.0, instance=1, train_size=8,
                 val_size=6, test_size=6)


def strategy_writer() -> ScriptedLM:
    """A reflection naming a strategy picked by a hash of its prompt: reproducible, and varied."""

    def answer(req):
        digest = hashlib.sha256(req.messages[-1]["content"].encode()).digest()
        return f"```\n{instruction(STRATEGIES[digest[0] % len(STRATEGIES)])}\n```"

    return ScriptedLM(answer)


def optimas_with_gepa(tmp_path, cap: float | None, lm=None, iterations: int = 6, **prompt):
    pipeline = prompt_chain()
    ctx = RunContext(ledger=RunLedger(len(pipeline.system)), lm=lm or strategy_writer())
    if cap is not None:
        ctx.caps = BudgetCaps(max_runs=cap, spent=lambda: {"max_runs": ctx.ledger.equivalent_runs()})
    method = Optimas(budget=smoke_budget(iterations=iterations), lrf={"name": "oracle"}, seed=0,
                     optimizer={"prompt": {"proposer": "gepa", **prompt}}, console=Console(file=io.StringIO()))
    try:
        outcome = method.optimize(pipeline, pipeline.splits, ctx.replace(phase="optimize"), RunFolder(tmp_path))
    except BudgetExhausted:  # as flows/run.py: a stop before the loop had a configuration keeps the default
        outcome = None
    return outcome, ctx, pipeline


def test_in_algorithm_1_gepa_finds_accepted_updates(tmp_path):
    outcome, ctx, pipeline = optimas_with_gepa(tmp_path, None)
    assert any(e.accepted for e in outcome.history), [e.note for e in outcome.history]
    assert outcome.history[-1].val_after > outcome.history[0].val_before
    assert Optimas(smoke_budget(), lrf={}, optimizer={"prompt": {"proposer": "gepa"}}).prompt_proposer(
        pipeline, ctx) == "gepa"  # what results.json records as the run's proposer


@pytest.mark.parametrize("share", [0.3, 0.55, 0.8])
def test_in_algorithm_1_a_capped_run_never_crosses_its_cap(share, tmp_path):
    _, free, _ = optimas_with_gepa(tmp_path / "free", None)
    cap = round(share * free.ledger.equivalent_runs(), 2)
    outcome, ctx, _ = optimas_with_gepa(tmp_path / "capped", cap)
    assert ctx.ledger.equivalent_runs() <= cap  # exact: not even one batch past it
    assert ctx.caps.stopped is not None and ctx.caps.stopped.cap == "max_runs"
    assert outcome is None or all(e.runs_so_far <= cap for e in outcome.history if e.accepted)


def test_in_algorithm_1_every_reflection_is_a_call_in_the_lm_usage_ledger(tiny_lm, tmp_path):
    """The real LM client on the tiny model: each local search makes one reflection per GEPA iteration (smoke:
    2 candidates x 1 step), each counted in the usage ledger under its component's optimizer tag."""
    outcome, ctx, pipeline = optimas_with_gepa(tmp_path, None, lm=tiny_lm, iterations=3, max_tokens=12)
    usage = tiny_lm.usage.to_dict()["by_component"]
    searched = [e.component for e in outcome.history]
    assert len(searched) == 3
    assert {name: row["calls"] for name, row in usage.items()} == {
        f"{name}.optimizer": 2 * searched.count(name) for name in set(searched)}
