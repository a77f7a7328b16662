"""Prompt optimizer: OPRO-style search scored by r_k, robust reading of a weak model's replies."""
from __future__ import annotations

import re
import threading

import numpy as np
import pytest

from optimas_cli.optim import optimize_component
from optimas_cli.optim.prompt import NO_INSTRUCTION, candidate_readings, extract_instruction, propose
from optimas_cli.system.component import Component, ConfigKind
from optimas_cli.system.context import RunContext
from optimas_cli.system.ledger import RunLedger
from tests.fakes import ScriptedLM


class Writer(Component):
    """A prompt-kind component whose output shows its instruction, so r_k can judge the instruction."""

    def __init__(self):
        super().__init__(
            name="writer", description="answers a question", inputs=("question",), outputs=("answer",),
            kind=ConfigKind.PROMPT, default="Answer the question.",
        )
        self.calls: list[str | None] = []

    def forward(self, inputs, value, ctx):
        self.calls.append(value)
        return [{"answer": f"[{value}] {x['question']}"} for x in inputs]


class KeywordReward:
    """r_k prefers answers written under a 'concise' instruction, then 'brief', then 'short'."""

    def __init__(self):
        self.calls = 0

    def score(self, name, inputs, outputs):
        assert name == "writer"
        self.calls += 1
        def one(answer: str) -> float:
            for word, value in (("concise", 0.9), ("brief", 0.5), ("short", 0.3)):
                if word in answer.lower():
                    return value
            return 0.1
        return [one(o["answer"]) for o in outputs]


REPLIES = [
    # step 0
    "Sure! Here is a new instruction:\n<prompt>Give a short answer to the question.</prompt>",
    "",
    "<prompt>Answer briefly and exactly.</prompt>",
    # step 1
    "```\nBe concise: answer in a few words.\n```",
    "<prompt>Give a short answer to the question.</prompt>",
    "<prompt>ok</prompt>",
    # step 2
    "<prompt>" + "word " * 14 + "</prompt>",
    "New instruction: Answer the question in one sentence.\nScore: 0.99",
    "<prompt>Reply with the answer only.",
]
SEARCH = [{"question": f"q{i}"} for i in range(5)]


def scripted_lm():
    replies = iter(REPLIES)
    return ScriptedLM(lambda request: next(replies))


def test_picks_the_candidate_the_local_reward_prefers_using_only_the_component_and_lrf():
    component, lrf, lm = Writer(), KeywordReward(), scripted_lm()
    ctx = RunContext(ledger=RunLedger(4), lm=lm, phase="local_optimization")
    proposal = optimize_component(component, "Answer the question.", SEARCH, lrf, ctx, {"prompt": {"seed": 0}})

    assert proposal.value == "Be concise: answer in a few words."
    assert proposal.local_score == pytest.approx(0.9) and proposal.baseline_score == pytest.approx(0.1)
    assert proposal.details["rejected"] == {"empty": 1, "duplicate": 1, "too_short": 1, "repetitive": 1}
    scored = [c["prompt"] for c in proposal.details["candidates"]]
    assert scored == [
        "Give a short answer to the question.",
        "Answer briefly and exactly.",
        "Be concise: answer in a few words.",
        "Answer the question in one sentence.",
        "Reply with the answer only.",
    ]
    # Budget: 3 candidates x 3 steps proposed, all through the LM tagged as the optimizer; one
    # component execution and one r_k scoring for the current prompt and for each usable candidate.
    assert [(tag, req.n) for tag, req in lm.requests] == [("writer.optimizer", 3)] * 3  # one batched request a step
    # The current prompt first; a step's candidates then run at the same time, so in any order.
    assert component.calls[0] == "Answer the question." and sorted(component.calls[1:]) == sorted(scored)
    assert lrf.calls == 6
    assert ctx.ledger.executions["local_optimization"] == {"writer": 6 * len(SEARCH)}
    assert len({req.sample_index for _, req in lm.requests}) == 3, "a fresh sample index per step"
    assert all(req.temperature == 0.7 for _, req in lm.requests)


def test_meta_prompt_shows_description_scores_ascending_and_examples():
    component, lm = Writer(), scripted_lm()
    ctx = RunContext(ledger=RunLedger(4), lm=lm)
    propose(component, "Answer the question.", SEARCH, KeywordReward(), ctx, {}, rng=np.random.default_rng(0))
    last_step = lm.requests[2][1].messages[-1]["content"]
    assert "answers a question" in last_step and "question" in last_step and "answer" in last_step
    history = [float(s) for s in re.findall(r"^Score: ([0-9.]+)$", last_step, flags=re.MULTILINE)]
    assert history == sorted(history) and len(history) == 4  # current + three scored candidates
    assert history[-1] == pytest.approx(0.9)
    instructions = re.findall(r"^Instruction:\n(.*)$", last_step, flags=re.MULTILINE)
    assert instructions[-1] == "Be concise: answer in a few words."
    assert len(re.findall(r"^Example \d input:", last_step, flags=re.MULTILINE)) == 3
    assert "Example 1 score: 0.100" in last_step


def test_keeps_the_current_prompt_when_no_candidate_beats_it():
    component, lrf = Writer(), KeywordReward()
    lm = ScriptedLM("<prompt>Answer the question in plain words.</prompt>")
    ctx = RunContext(ledger=RunLedger(4), lm=lm)
    proposal = propose(component, "Be concise.", SEARCH, lrf, ctx, {"num_candidates": 2, "num_steps": 2})
    assert proposal.value == "Be concise." and proposal.details["improved"] is False
    assert proposal.local_score == proposal.baseline_score == pytest.approx(0.9)
    # The same reply again is a duplicate: scored once, then rejected without a search run.
    assert len(proposal.details["candidates"]) == 1 and proposal.details["rejected"] == {"duplicate": 3}


def test_no_current_prompt_is_shown_as_the_builtin_behaviour():
    lm = ScriptedLM("<prompt>Be concise and exact.</prompt>")
    ctx = RunContext(ledger=RunLedger(4), lm=lm)
    proposal = propose(Writer(), None, SEARCH, KeywordReward(), ctx, {"num_candidates": 1, "num_steps": 1})
    assert NO_INSTRUCTION in lm.requests[0][1].messages[-1]["content"]
    assert proposal.value == "Be concise and exact."


@pytest.mark.parametrize(
    "reply, expected",
    [
        ("<prompt>Answer in one word.</prompt>", "Answer in one word."),
        ("<think>hmm</think><PROMPT>\n  Answer in one word.\n</PROMPT>", "Answer in one word."),
        ('Here is the improved prompt: "Answer in one word."', "Answer in one word."),
        ("Instruction: Answer in one word.\nScore: 1.0", "Answer in one word."),
        ("<prompt>Answer in one word.", "Answer in one word."),
        ("```text\nAnswer in one word.\n```", "Answer in one word."),
    ],
)
def test_reads_the_instruction_from_many_reply_shapes(reply, expected):
    assert extract_instruction(reply, seen=set()) == (expected, "ok")


def test_an_untagged_reply_gives_its_first_paragraph():
    reply = "The instruction is: answer with the exact span only.\n\nIt asks about the question and more text."
    assert candidate_readings(reply) == ["The instruction is: answer with the exact span only."]


@pytest.mark.parametrize(
    "reply, reason",
    [
        # SmolLM2-135M at temperature 0 continued the shown examples instead of answering.
        ("Question: Which city hosted the 1992 Olympics?\n\nAnswer: Barcelona\n\nScore: 0.200\n\n"
         "Example 1 input:\nQuestion: Which city hosted the 1992 Olympics?", "copied_example"),
        # ... and at temperature 1.0 sampled byte soup.
        ("fASII7j1TjFhNEp4ZBzeDEQPkSfPth1V0BfEzB15TA.\n\nResponse:\n ai-tuple", "too_short"),
        ("<prompt>Use [itfASD5fjhJbp*%03[%20%20%08%00%07%21F0foT% and %20%2BfimiqnL0w0wZ2TF0HoTK now</prompt>", "garbled"),
        ("<prompt>x = f(1, 2); y = g[3] + h{4} * 5 / 6 - 7</prompt>", "garbled"),
    ],
)
def test_weak_model_junk_is_rejected_before_any_search_run(reply, reason):
    shown = ["Which city hosted the 1992 Olympics?"]
    assert extract_instruction(reply, seen=set(), shown=shown) == (None, reason)


def test_a_rejected_tagged_answer_is_not_rescued_by_the_text_around_it():
    reply = "<prompt>Answer the question.</prompt> I changed nothing at all today."
    assert candidate_readings(reply) == ["Answer the question."]
    assert extract_instruction(reply, seen={"answer the question."}) == (None, "duplicate")
    assert extract_instruction("x" * 30 + " y" * 1200, seen=set())[1] == "too_long"


class MeetingWriter(Writer):
    """A Writer whose candidates wait for each other: run one after another, the first would wait in vain."""

    def __init__(self, parties: int):
        super().__init__()
        self.meeting = threading.Barrier(parties, timeout=10)

    def forward(self, inputs, value, ctx):
        if value != self.default:
            self.meeting.wait()  # BrokenBarrierError after 10 s unless all candidates are running at once
        return super().forward(inputs, value, ctx)


def test_a_steps_candidates_run_at_the_same_time_and_are_scored_in_their_order():
    replies = iter(["<prompt>Give a short answer.</prompt>", "<prompt>Be concise in the answer.</prompt>",
                    "<prompt>Answer briefly please.</prompt>"])
    lm = ScriptedLM(lambda request: next(replies))
    component = MeetingWriter(parties=3)
    ctx = RunContext(ledger=RunLedger(4), lm=lm, phase="local_optimization")
    proposal = propose(component, "Answer the question.", SEARCH, KeywordReward(), ctx,
                       {"proposer": "lm", "num_candidates": 3, "num_steps": 1}, rng=np.random.default_rng(0))
    assert [(c["prompt"], c["score"]) for c in proposal.details["candidates"]] == [
        ("Give a short answer.", pytest.approx(0.3)), ("Be concise in the answer.", pytest.approx(0.9)),
        ("Answer briefly please.", pytest.approx(0.5))]
    assert proposal.value == "Be concise in the answer."
    assert ctx.ledger.executions["local_optimization"] == {"writer": 4 * len(SEARCH)}
