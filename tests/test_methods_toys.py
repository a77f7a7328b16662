"""Toys and scripted LMs the baseline-method tests share (and a check that the toys behave as designed).

- `capitals()`: two PROMPT components (asker -> answerer) in front of an exact-match metric. The
  scripted LM answers with the capital only when the answerer's instruction mentions a "city";
  every default instruction scores 0, so an optimizer that finds such an instruction reaches 1.0.
- `two_models()`: a model-choice component feeding an LM solver; model "strong" is always right,
  model "weak" never is.
- `pubmedqa_lm(pipeline)`: a scripted LM for the real PubMedQA pipeline whose solver is right only
  when it runs on gemma (it knows each question's gold decision).
- `scripted_reply(...)`: answers the optimizers' own LM calls (OPRO meta-prompts, DSPy's
  [[ ## field ## ]] signatures, TextGrad's loss, feedback and update prompts).
"""
from __future__ import annotations

import functools
import os
import re
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from optimas_cli.system import (
    Component,
    CompoundSystem,
    ConfigKind,
    Metric,
    Pipeline,
    RunContext,
    RunLedger,
    Splits,
)
from optimas_cli.system.budget import Budget
from optimas_cli.system.evaluate import evaluate
from optimas_cli.system.run_folder import RunFolder
from tests.fakes import ScriptedLM

ROOT = Path(__file__).resolve().parent.parent
DATA = Path(os.environ.get("OPTIMAS_DATA_DIR") or ROOT.parent / "shared" / "data")
needs_pubmedqa = pytest.mark.skipif(not (DATA / "pubmedqa").exists(), reason="needs the shared data folder")

CAPITALS = [("France", "Paris"), ("Italy", "Rome"), ("Spain", "Madrid"), ("Japan", "Tokyo"), ("Egypt", "Cairo"),
            ("Peru", "Lima"), ("Kenya", "Nairobi"), ("Chile", "Santiago"), ("Ghana", "Accra"), ("Nepal", "Kathmandu")]
GOOD_INSTRUCTION = "Name the capital city of the country in the question."
DSPY_FIELD = re.compile(r"starting with the field `\[\[ ## (\w+) ## \]\]`")
GEMMA = "local/gemma-3-270m"


class Asker(Component):
    def forward(self, inputs, value, ctx):
        chats = [[{"role": "system", "content": value}, {"role": "user", "content": f"Country: {x['country']}"}]
                 for x in inputs]
        return [{"question": text} for text in ctx.complete(self.name, chats)]


class Answerer(Component):
    def forward(self, inputs, value, ctx):
        chats = [[{"role": "system", "content": value}, {"role": "user", "content": f"Question: {x['question']}"}]
                 for x in inputs]
        return [{"answer": text.strip()} for text in ctx.complete(self.name, chats)]


def capitals() -> Pipeline:
    asker = Asker("asker", "Turns a country into a question about it.", inputs=("country",), outputs=("question",),
                  kind=ConfigKind.PROMPT, default="Restate the input as a question.")
    answerer = Answerer("answerer", "Answers the question in one word.", inputs=("question",), outputs=("answer",),
                        kind=ConfigKind.PROMPT, default="Reply to the question.")
    system = CompoundSystem([asker, answerer], inputs=("country",), outputs=("answer",))
    rows = [{"country": c, "capital": k} for c, k in CAPITALS]
    metric = Metric("exact_match", lambda ex, out: float((out["answer"] or "").lower() == ex["capital"].lower()))
    return Pipeline("toy_capitals", system, Splits(rows[:6], rows[6:8], rows[8:]), metric)


def capitals_reply(request) -> str | None:
    """The toy's own components; None when the request is not theirs."""
    system, user = request.messages[0]["content"], request.messages[-1]["content"]
    if user.startswith("Country: "):
        country = user.removeprefix("Country: ")
        return f"What is the capital of {country}?" if "capital" in system.lower() else f"Tell me about {country}."
    if user.startswith("Question: "):
        country = next((c for c, _ in CAPITALS if c in user), None)
        capital = dict(CAPITALS).get(country)
        return capital if capital and "city" in system.lower() else "I am not sure."
    return None


def scripted_reply(request, instruction: str = GOOD_INSTRUCTION) -> str | None:
    """Replies to the optimizers' LM calls; None when the request is not an optimizer's."""
    text = "\n".join(m["content"] for m in request.messages)
    field = DSPY_FIELD.search(request.messages[-1]["content"])
    if field:  # a DSPy signature (dataset summary, program description, instruction proposal)
        value = instruction if field.group(1) == "proposed_instruction" else "A pipeline that answers questions."
        return f"[[ ## {field.group(1)} ## ]]\n{value}\n\n[[ ## completed ## ]]"
    if "<IMPROVED_VARIABLE>" in text:  # TextGrad's update
        return f"<IMPROVED_VARIABLE>{instruction}</IMPROVED_VARIABLE>"
    if "gradient (feedback) engine" in text:  # TextGrad's backward
        return "Ask explicitly for the capital city."
    if text.startswith("You evaluate the final output"):  # TextGrad's loss
        return "The output does not name the capital city."
    if "<prompt>" in text:  # the OPRO prompt optimizer
        return f"<prompt>{instruction}</prompt>"
    return None


def capitals_lm(instruction: str = GOOD_INSTRUCTION) -> ScriptedLM:
    def answer(request):
        reply = capitals_reply(request)
        if reply is None:
            reply = scripted_reply(request, instruction)
        if reply is None:
            raise AssertionError(f"unexpected request: {request.messages}")
        return reply

    return ScriptedLM(answer)


class ModelSelector(Component):
    def forward(self, inputs, value, ctx):
        return [{"model": value} for _ in inputs]


class Solver(Component):
    def forward(self, inputs, value, ctx):
        answers = []
        for x in inputs:
            chat = [{"role": "user", "content": f"Solve: {x['problem']}"}]
            answers.append(ctx.complete(self.name, [chat], model=x["model"])[0])
        return [{"answer": a} for a in answers]


def two_models() -> Pipeline:
    selector = ModelSelector("model_selector", "Chooses the solver's model.", inputs=("problem",),
                             outputs=("model",), kind=ConfigKind.CHOICE, choices=("weak", "strong"), default="weak")
    solver = Solver("solver", "Solves the problem.", inputs=("problem", "model"), outputs=("answer",))
    system = CompoundSystem([selector, solver], inputs=("problem",), outputs=("answer",))
    rows = [{"problem": f"{a}+{b}", "gold": str(a + b)} for a, b in [(1, 2), (3, 4), (5, 6), (7, 8), (2, 2), (9, 1)]]
    metric = Metric("accuracy", lambda ex, out: float(out["answer"] == ex["gold"]))
    return Pipeline("toy_two_models", system, Splits(rows[:4], rows[4:5], rows[5:]), metric)


def two_models_lm() -> ScriptedLM:
    def answer(request):
        a, b = request.messages[-1]["content"].removeprefix("Solve: ").split("+")
        return str(int(a) + int(b)) if request.model == "strong" else "no idea"

    return ScriptedLM(answer)


def pubmedqa_lm(pipeline: Pipeline, instruction: str = "Summarize the evidence briefly.") -> ScriptedLM:
    """Analyst: a summary. Solver: the gold decision on gemma, a wrong one on smollm2."""
    gold = {ex["question"]: ex["answer"] for part in (pipeline.splits.train, pipeline.splits.val, pipeline.splits.test)
            for ex in part}
    wrong = {"yes": "no", "no": "yes", "maybe": "yes"}

    def answer(request):
        reply = scripted_reply(request, instruction)
        if reply is not None:
            return reply
        user = request.messages[-1]["content"]
        if "Summarize" in user:
            return f"summary by {request.model}"
        question = next(q for q in gold if f"Question: {q}" in user)
        decision = gold[question] if request.model == GEMMA else wrong[gold[question]]
        return f"The evidence says so.\nAnswer: {decision}"

    return ScriptedLM(answer)


# -- running a method the way the runner does ---------------------------------------------------
def smoke_budget(**changes) -> Budget:
    budget = OmegaConf.to_container(OmegaConf.load(ROOT / "conf" / "budget" / "smoke.yaml"))
    return Budget.from_mapping({**budget, **changes})


@functools.cache
def pubmedqa_pipeline() -> Pipeline:
    from optimas_pipelines.pubmedqa import build

    return build(data_dir=DATA)


def pubmedqa_smoke() -> tuple[Pipeline, Splits]:
    """The real PubMedQA pipeline with smoke-sized splits (6 / 4 / 4)."""
    pipeline = pubmedqa_pipeline()
    s = pipeline.splits
    return pipeline, Splits(s.train[:6], s.val[:4], s.test[:4])


def optimize_and_test(method, pipeline: Pipeline, splits: Splits, lm, folder) -> tuple:
    """`optimize` then `evaluate` on test, as optimas_cli/flows/run.py calls them: (outcome, test, ctx)."""
    ctx = RunContext(ledger=RunLedger(len(pipeline.system)), lm=lm)
    outcome = method.optimize(pipeline, splits, ctx.replace(phase="optimize"), RunFolder(folder))
    test = method.evaluate(pipeline, outcome, splits.test, ctx.replace(phase="test"), 1)
    return outcome, test, ctx


# -- the toys behave as designed ----------------------------------------------------------------
def test_capitals_rewards_only_an_answerer_that_is_asked_for_a_city():
    pipeline = capitals()
    ctx = RunContext(ledger=RunLedger(2), lm=capitals_lm())
    default = pipeline.system.default_config()
    assert evaluate(pipeline, default, pipeline.splits.train, ctx)["mean"] == 0.0
    better = default.replace("answerer", GOOD_INSTRUCTION)
    assert evaluate(pipeline, better, pipeline.splits.train, ctx)["mean"] == 1.0


def test_two_models_is_solved_by_the_strong_model_only():
    pipeline = two_models()
    ctx = RunContext(ledger=RunLedger(2), lm=two_models_lm())
    default = pipeline.system.default_config()
    assert evaluate(pipeline, default, pipeline.splits.train, ctx)["mean"] == 0.0
    assert evaluate(pipeline, default.replace("model_selector", "strong"), pipeline.splits.train, ctx)["mean"] == 1.0
