"""The pool proposer: candidates from the pipeline's alternatives and structured edits, not the LM's writing."""
from __future__ import annotations

import numpy as np
import pytest

from optimas_cli.errors import UserError
from optimas_cli.optim import optimize_component
from optimas_cli.optim.prompt import propose, resolve_proposer
from optimas_cli.optim.prompt_pool import EXAMPLE_HEADER, add_constraint, pool_drafts, shorten
from optimas_cli.system.component import Component, ConfigKind
from optimas_cli.system.context import RunContext
from optimas_cli.system.ledger import RunLedger
from tests.fakes import ScriptedLM

SEARCH = [{"question": f"q{i}"} for i in range(4)]


class Answerer(Component):
    """Shows its instruction in its output so a reward can judge the instruction."""

    def __init__(self, alternatives=(), constraints=()):
        super().__init__(name="answerer", description="answers", inputs=("question",), outputs=("answer",),
                         kind=ConfigKind.PROMPT, default="Answer the question. Explain your reasoning.",
                         alternatives=alternatives, format_constraints=constraints)

    def forward(self, inputs, value, ctx):
        return [{"answer": f"{value} | {x['question']}"} for x in inputs]


class ShortAndTerse:
    """r_k: shorter instructions win, and 'three words' beats everything (what an F1 metric likes)."""

    def score(self, name, inputs, outputs):
        def one(text):
            instruction = text["answer"].split(" | ")[0]
            bonus = 2.0 if "three words" in instruction else 1.0 if "five words" in instruction else 0.0
            return bonus - len(instruction) / 1000
        return [one(o) + 0.01 * i for i, o in enumerate(outputs)]  # the last input scores highest


def test_pool_finds_a_better_instruction_without_any_lm_call():
    component = Answerer(alternatives=("Reply with the answer only.",), constraints=("Use at most three words.",))
    lm = ScriptedLM("<prompt>should never be asked</prompt>")
    ctx = RunContext(ledger=RunLedger(2), lm=lm)
    proposal = propose(component, component.default, SEARCH, ShortAndTerse(), ctx,
                       {"proposer": "pool", "num_candidates": 3, "num_steps": 2}, rng=np.random.default_rng(0))
    assert lm.requests == []
    assert "three words" in proposal.value and proposal.details["improved"]
    sources = {c["source"] for c in proposal.details["candidates"]}
    assert sources <= {"alternative", "constrain", "shorten", "example"} and len(sources) >= 3
    assert proposal.details["proposer"] == "pool"


def test_edits_compose_on_the_best_instruction_so_far():
    component = Answerer(constraints=("Use at most five words.", "Use at most three words."))
    ctx = RunContext(ledger=RunLedger(2), lm=ScriptedLM())
    proposal = propose(component, "Answer it.", SEARCH, ShortAndTerse(), ctx,
                       {"proposer": "pool", "num_candidates": 2, "num_steps": 2}, rng=np.random.default_rng(1))
    # step 1 adds the looser constraint; step 2 tightens the best so far with the next one
    assert proposal.value == "Answer it. Use at most five words. Use at most three words."
    assert [c["step"] for c in proposal.details["candidates"] if c["prompt"] == proposal.value] == [1]


def test_structured_edits():
    assert add_constraint("Answer.", ("Be brief.", "Use three words.")) == "Answer. Be brief."
    assert add_constraint("Answer. Be brief.", ("Be brief.", "Use three words.")) == "Answer. Be brief. Use three words."
    assert add_constraint("Answer. Be brief. Use three words.", ("Be brief.", "Use three words.")) is None
    assert shorten("Answer the question. Explain why! Be nice.") == "Answer the question. Explain why!"
    assert shorten("Answer the question.") is None
    drafts = pool_drafts(Answerer(alternatives=("Alt one two.",)), "Answer it. Now.", f"{EXAMPLE_HEADER}\nq: a")
    assert [d.source for d in drafts] == ["alternative", "constrain", "shorten", "example"]
    assert drafts[-1].text.endswith("q: a")
    again = pool_drafts(Answerer(), drafts[-1].text, f"{EXAMPLE_HEADER}\nq: b")
    assert "example" not in [d.source for d in again], "one worked example at most"


def test_the_worked_example_is_the_search_input_with_the_highest_local_reward():
    component = Answerer()
    ctx = RunContext(ledger=RunLedger(2), lm=ScriptedLM())
    proposal = propose(component, "Answer it.", SEARCH, ShortAndTerse(), ctx,
                       {"proposer": "pool", "num_candidates": 4, "num_steps": 1}, rng=np.random.default_rng(0))
    example = [c["prompt"] for c in proposal.details["candidates"] if c["source"] == "example"]
    assert example and "question: q3" in example[0] and "answer: Answer it. | q3" in example[0]


def test_mixed_scores_the_pool_and_the_lm_proposals_that_pass_the_checks():
    replies = iter(["<prompt>Answer in three words exactly.</prompt>", "", "<prompt>ok</prompt>"])
    lm = ScriptedLM(lambda request: next(replies))
    component = Answerer(alternatives=("Reply with the answer only.",))
    ctx = RunContext(ledger=RunLedger(2), lm=lm)
    proposal = propose(component, component.default, SEARCH, ShortAndTerse(), ctx,
                       {"proposer": "mixed", "num_candidates": 3, "num_steps": 1}, rng=np.random.default_rng(0))
    sources = [c["source"] for c in proposal.details["candidates"]]
    assert sources.count("lm") == 1 and len(sources) == 4
    assert proposal.details["rejected"] == {"empty": 1, "too_short": 1}
    assert proposal.value == "Answer in three words exactly."


def test_optimizer_lm_sends_the_proposals_to_another_model():
    lm = ScriptedLM("<prompt>Answer in three words.</prompt>")
    ctx = RunContext(ledger=RunLedger(2), lm=lm)
    optimize_component(Answerer(), "Answer.", SEARCH, ShortAndTerse(), ctx,
                       {"prompt": {"proposer": "lm", "lm": "openai/gpt-4o-mini", "num_steps": 1}})
    assert [(tag, req.model) for tag, req in lm.requests] == [("answerer.optimizer", "openai/gpt-4o-mini")]


class NamedLM(ScriptedLM):
    def __init__(self, model):
        super().__init__()
        self.model = model


@pytest.mark.parametrize("setting, optimizer_lm, run_model, expected", [
    ("auto", None, "local/smollm2-135m-instruct", "mixed"),
    ("auto", None, "openai/gpt-4o-mini", "lm"),
    ("auto", "openai/gpt-4o-mini", "local/smollm2-135m-instruct", "lm"),
    ("auto", "local/gemma-3-270m", "openai/gpt-4o-mini", "mixed"),
    ("pool", None, "openai/gpt-4o-mini", "pool"),
])
def test_auto_is_mixed_for_an_embedded_optimizer_lm(setting, optimizer_lm, run_model, expected):
    ctx = RunContext(ledger=RunLedger(2), lm=NamedLM(run_model))
    assert resolve_proposer(setting, optimizer_lm, ctx) == expected


def test_an_unknown_proposer_is_a_user_error():
    with pytest.raises(UserError, match="proposer"):
        resolve_proposer("best", None, RunContext(ledger=RunLedger(2)))
