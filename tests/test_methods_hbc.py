"""hbc: candidate outputs scored by embedding similarity to the best unoptimized runs' outputs."""
from __future__ import annotations

import numpy as np
import pytest

from optimas_cli.methods.hbc import HBC
from optimas_cli.methods.scorers import ReferenceSimilarityScorer, TextEmbedder, input_key
from optimas_cli.optim import choice, score_value
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
from pipelines.toys import retriever
from tests.test_lrf_tiny_backbone import build_tiny_bert
from tests.test_methods_toys import (
    capitals,
    capitals_lm,
    needs_pubmedqa,
    optimize_and_test,
    pubmedqa_lm,
    pubmedqa_smoke,
    smoke_budget,
)


class LetterCounts:
    """A transparent embedder for unit tests: normalised letter counts."""

    where = "letter counts"

    def encode(self, texts):
        vectors = np.array([[t.lower().count(chr(97 + i)) for i in range(26)] for t in texts], dtype=float) + 1e-9
        return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


@pytest.fixture(scope="module")
def tiny_backbone(tmp_path_factory):
    return build_tiny_bert(tmp_path_factory.mktemp("tiny_bert"))


@pytest.mark.real_model
def test_minilm_scorer_prefers_outputs_near_the_reference():
    references = {"writer": [({"question": "What is the capital of France?"},
                              {"answer": "Paris is the capital of France."})]}
    scorer = ReferenceSimilarityScorer(references, {"writer": ("answer",)}, TextEmbedder("minilm", device="cpu"))
    x = {"question": "Which city is the capital of France?"}  # not the reference's input: best match overall
    near, far = scorer.score("writer", [x, x], [{"answer": "The capital of France is Paris."},
                                                {"answer": "Bananas are a yellow fruit rich in potassium."}])
    assert near > far
    assert near > 0.8


def test_an_input_is_scored_against_its_nearest_other_inputs_never_its_own_reference():
    references = {"writer": [({"q": "one"}, {"answer": "aaaa"}), ({"q": "onf"}, {"answer": "bbbb"}),
                             ({"q": "xyz"}, {"answer": "zzzz"})]}
    scorer = ReferenceSimilarityScorer(references, {"writer": ("answer",)}, LetterCounts(), neighbors=1)
    # "one"'s own reference is aaaa; its nearest other input is "onf", whose good output is bbbb.
    [own, neighbour] = scorer.score("writer", [{"q": "one"}] * 2, [{"answer": "aaaa"}, {"answer": "bbbb"}])
    assert neighbour == pytest.approx(1.0) and own < 0.5  # letter counts of "answer: aaaa" vs "answer: bbbb"
    # an unseen input uses its nearest reference inputs too
    assert scorer.score("writer", [{"q": "xyy"}] * 2, [{"answer": "zzzz"}, {"answer": "aaaa"}])[0] == pytest.approx(1)
    assert scorer.score("reader", [{"q": "one"}], [{"x": "y"}]) == [0.0]  # no reference: no preference
    only_own = ReferenceSimilarityScorer({"writer": references["writer"][:1]}, {"writer": ("answer",)}, LetterCounts())
    assert only_own.score("writer", [{"q": "one"}], [{"answer": "aaaa"}]) == [0.0]  # nothing but itself: no preference


class FirstOrLast(Component):
    """A global choice: the first or the last word of the query."""

    def __init__(self):
        super().__init__("picker", "picks a word", ("q",), ("word",), kind=ConfigKind.CHOICE, default="first",
                         choices=("first", "last"))

    def forward(self, inputs, value, ctx):
        return [{"word": x["q"].split()[0 if value == "first" else -1]} for x in inputs]


def test_hbc_can_prefer_a_value_other_than_the_current_one():
    """With references from each input itself, the unoptimized value reproduced them exactly and
    always won (1.0 against its own reference); from the other inputs' good outputs, "last" wins."""
    system = CompoundSystem([FirstOrLast()], inputs=("q",), outputs=("word",))
    pipeline = Pipeline("words", system, Splits([], [], []), Metric("r", lambda ex, out: 1.0))
    train = [{"q": "sat cat"}, {"q": "cat sat"}]
    ctx = RunContext(ledger=RunLedger(1))
    trajs = system.run(train, system.default_config(), ctx)
    scorer, _ = ReferenceSimilarityScorer.from_runs(pipeline, trajs, [1.0, 1.0], LetterCounts(), 1.0, neighbors=1)
    search = [t.steps["picker"]["inputs"] for t in trajs]
    current, _, _ = score_value(system.components["picker"], "first", search, scorer, ctx)
    other, _, _ = score_value(system.components["picker"], "last", search, scorer, ctx)
    assert other == pytest.approx(1.0) and current < 0.9
    proposal = choice.propose(system.components["picker"], "first", search, scorer, ctx, {"temperature": 0.01})
    assert proposal.value == "last" and proposal.local_score > proposal.baseline_score


def test_references_come_from_the_highest_reward_runs():
    pipeline = retriever.build()
    system = pipeline.system
    trajs = system.run(pipeline.splits.train, system.default_config(), RunContext(ledger=RunLedger(2)))
    run_rewards = [0.1, 0.9, 0.5, 0.2]
    scorer, summary = ReferenceSimilarityScorer.from_runs(pipeline, trajs, run_rewards, LetterCounts(), 0.5)
    assert summary["reference_runs"] == 2 and summary["reference_mean_reward"] == pytest.approx(0.7)
    assert set(scorer.reference_keys["retriever"]) == {input_key(trajs[i].steps["retriever"]["inputs"]) for i in (1, 2)}


def test_runs_end_to_end_on_the_capitals_toy(tmp_path, tiny_backbone):
    pipeline = capitals()
    method = HBC(budget=smoke_budget(iterations=2), backbone=tiny_backbone, device="cpu", top_fraction=0.5)
    outcome, test, ctx = optimize_and_test(method, pipeline, pipeline.splits, capitals_lm(), tmp_path)
    assert set(outcome.config) == {"asker", "answerer"} and all(isinstance(v, str) for v in outcome.config.values())
    # Every unoptimized run scores 0, so every reference says "I am not sure.": cloning them, HBC scores
    # the scripted good instruction's answers (the capitals) below the current prompts and keeps them.
    assert [h.accepted for h in outcome.history] == [False, False]
    assert all(h.note == "the local optimizer kept the current value" for h in outcome.history)
    assert outcome.config.to_dict() == pipeline.system.default_config().to_dict()
    assert test["mean"] == 0.0 and test["n"] == 2
    info = outcome.extras["hbc"]
    assert info["reference_runs"] == 3 and info["references_per_component"]["answerer"] == 3
    assert ctx.ledger.equivalent_runs("reference_collection") == pytest.approx(len(pipeline.splits.train))


@needs_pubmedqa
def test_runs_end_to_end_on_pubmedqa(tmp_path, tiny_backbone):
    pipeline, splits = pubmedqa_smoke()
    method = HBC(budget=smoke_budget(iterations=2), backbone=tiny_backbone, device="cpu")
    outcome, test, ctx = optimize_and_test(method, pipeline, splits, pubmedqa_lm(pipeline), tmp_path)
    for name in ("context_model_selector", "solver_model_selector"):
        assert outcome.config[name] in pipeline.system.components[name].choices or isinstance(outcome.config[name], dict)
    # The solver is right only on gemma; the seed schedules the problem solver's prompt and the context
    # model, neither of which changes the solver's model: every candidate ties at 0 on validation and a
    # tie is rejected, so the test score stays the unoptimized system's 0.
    assert [h.component for h in outcome.history] == ["problem_solver", "context_model_selector"]
    assert not any(h.accepted for h in outcome.history)
    gated = [h for h in outcome.history if h.val_candidate is not None]
    assert all(h.val_candidate == h.val_before == 0.0 for h in gated)
    assert outcome.config["solver_model_selector"] == pipeline.system.default_config()["solver_model_selector"]
    assert test["mean"] == 0.0 and test["n"] == 4
    assert {"reference_collection", "local_optimization", "validation"} <= set(ctx.ledger.to_dict()["by_phase"])
