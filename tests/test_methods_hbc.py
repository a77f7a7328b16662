"""hbc: candidate outputs scored by embedding similarity to the same example's known-good reference output;
prompt components only."""
from __future__ import annotations

import numpy as np
import pytest

from optimas_cli.errors import UserError
from optimas_cli.methods.hbc import HBC
from optimas_cli.methods.scorers import ReferenceSimilarityScorer, TextEmbedder, example_key
from optimas_cli.system import CompoundSystem, Metric, Pipeline, Splits, Trajectory
from optimas_pipelines.toys import retriever
from tests.fakes import ScriptedLM
from tests.test_lrf_tiny_backbone import build_tiny_bert
from tests.test_methods_toys import (
    CAPITALS,
    Answerer,
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


def run_of(example: dict, steps: dict[str, tuple[dict, dict]]) -> Trajectory:
    """A finished trajectory: component -> (its inputs, its outputs)."""
    return Trajectory(example=example, state=dict(example),
                      steps={n: {"inputs": x, "outputs": y, "skipped": False} for n, (x, y) in steps.items()})


def writer_pipeline(train: list[dict]) -> Pipeline:
    from optimas_cli.system import ConfigKind

    writer = Answerer("writer", "writes", inputs=("q",), outputs=("answer",), kind=ConfigKind.PROMPT, default="Write.")
    return Pipeline("writer", CompoundSystem([writer], inputs=("q",), outputs=("answer",)), Splits(train, [], []),
                    Metric("r", lambda ex, out: 1.0))


@pytest.mark.real_model
def test_minilm_scorer_prefers_outputs_near_the_reference():
    example = {"q": "What is the capital of France?"}
    references = {"writer": {example_key(example, ("q",)): {"answer": "Paris is the capital of France."}}}
    scorer = ReferenceSimilarityScorer(references, {"writer": ("answer",)}, TextEmbedder("minilm", device="cpu"), ("q",))
    scorer.observe([run_of(example, {"writer": (example, {"answer": "-"})})], None)
    near, far = scorer.score("writer", [example, example], [{"answer": "The capital of France is Paris."},
                                                            {"answer": "Bananas are a yellow fruit rich in potassium."}])
    assert near > far and near > 0.8


def test_a_candidate_is_scored_against_its_own_examples_reference():
    """The paper's HBC: closeness to the known-good output of the same input (today's code compared with
    the references of the nearest OTHER inputs: "aaaa" below scored < 0.5 and "bbbb" 1.0)."""
    one, onf = {"q": "one"}, {"q": "onf"}
    references = {"writer": {example_key(one, ("q",)): {"answer": "aaaa"}, example_key(onf, ("q",)): {"answer": "bbbb"}}}
    scorer = ReferenceSimilarityScorer(references, {"writer": ("answer",), "reader": ("x",)}, LetterCounts(), ("q",))
    # The loop's search trajectories: the writer's inputs there are what the optimizer scores.
    scorer.observe([run_of(one, {"writer": ({"q": "one", "notes": "n1"}, {"answer": "?"})}),
                    run_of(onf, {"writer": ({"q": "onf", "notes": "n2"}, {"answer": "?"})})], None)
    inputs = [{"q": "one", "notes": "n1"}] * 2 + [{"q": "onf", "notes": "n2"}]
    own, other, theirs = scorer.score("writer", inputs, [{"answer": "aaaa"}, {"answer": "bbbb"}, {"answer": "bbbb"}])
    assert own == pytest.approx(1.0) and theirs == pytest.approx(1.0) and other < 0.5
    assert scorer.score("writer", [{"q": "xyz", "notes": ""}], [{"answer": "aaaa"}]) == [0.0]  # no example known
    assert scorer.score("reader", [{"q": "one"}], [{"x": "y"}]) == [0.0]  # no reference: no preference


def test_references_are_each_examples_best_sampled_run_among_the_top_runs():
    pipeline = writer_pipeline([])
    examples = [{"q": q} for q in ("a", "b", "c")]
    outputs = [["a0", "b0", "c0"], ["a1", "b1", "c1"]]  # runs[s][i]: sample s on example i
    rewards = [[0.2, 0.9, 0.1], [0.8, 0.9, 0.0]]
    runs = [[run_of(ex, {"writer": (ex, {"answer": out})}) for ex, out in zip(examples, sample, strict=True)]
            for sample in outputs]
    scorer, summary = ReferenceSimilarityScorer.from_runs(pipeline, runs, rewards, LetterCounts(), top_fraction=0.5)
    # The top half of the six runs' rewards is >= 0.8: a's best is sample 1, b's the first of its tie, c has none.
    kept = {example_key({"q": q}, ("q",)): LetterCounts().encode([f"answer: {a}"])[0] for q, a in (("a", "a1"), ("b", "b0"))}
    assert set(scorer.references["writer"]) == set(kept)
    assert all(np.allclose(scorer.references["writer"][k], v) for k, v in kept.items())
    assert summary["reference_inputs"] == 2 and summary["reference_mean_reward"] == pytest.approx(0.85)
    assert summary["samples"] == 2 and summary["inputs"] == 3


def lucky_capitals_lm():
    """The capitals toy's LM, except that the answerer's sample 1 at temperature 1 names the capital."""
    scripted = capitals_lm().answer

    def answer(request):
        user = request.messages[-1]["content"]
        if user.startswith("Question: ") and request.temperature == 1.0 and request.sample_index == 1:
            return next(capital for country, capital in CAPITALS if country in user)
        return scripted(request)

    return ScriptedLM(answer)


def test_hbc_clones_the_best_sampled_run_and_keeps_what_beats_the_unoptimized_system(tmp_path, tiny_backbone):
    pipeline = capitals()
    budget = smoke_budget(iterations=2)
    method = HBC(budget=budget, backbone=tiny_backbone, device="cpu", top_fraction=0.25, samples=3,
                 scheduler="round_robin")
    outcome, test, ctx = optimize_and_test(method, pipeline, pipeline.splits, lucky_capitals_lm(), tmp_path)
    info = outcome.extras["hbc"]
    # Greedy runs answer "I am not sure." (reward 0); sample 1 names each capital: every search input's reference.
    assert info["reference_inputs"] == budget.search_size and info["reference_mean_reward"] == 1.0
    assert ctx.ledger.equivalent_runs("reference_collection") == pytest.approx(3 * budget.search_size)
    # Round robin: the asker's candidates read less like its references than its own output (kept), the
    # answerer's instruction that names capitals reads like them and passes validation.
    assert [(h.component, h.accepted) for h in outcome.history] == [("asker", False), ("answerer", True)]
    assert "city" in outcome.config["answerer"] and test["mean"] == 1.0
    assert info["optimized"] == ["asker", "answerer"] and info["left_unchanged"] == {}
    # At temperature 0 nothing can vary: one run per input, not three copies of it.
    greedy = HBC(budget=budget, backbone=tiny_backbone, device="cpu", samples=3, temperature=0.0)
    _, _, ctx = optimize_and_test(greedy, pipeline, pipeline.splits, lucky_capitals_lm(), tmp_path / "greedy")
    assert ctx.ledger.equivalent_runs("reference_collection") == pytest.approx(budget.search_size)


def test_without_a_prompt_component_hbc_says_it_does_not_apply(tmp_path, tiny_backbone):
    pipeline = retriever.build()  # one per-instance choice and a fixed reader
    method = HBC(budget=smoke_budget(), backbone=tiny_backbone, device="cpu")
    with pytest.raises(UserError, match=r"method hbc optimizes prompt components.*retriever: choice"):
        optimize_and_test(method, pipeline, pipeline.splits, capitals_lm(), tmp_path)


@needs_pubmedqa
def test_hbc_leaves_choice_components_unchanged_and_says_so(tmp_path, tiny_backbone):
    from rich.console import Console

    pipeline, splits = pubmedqa_smoke()
    console = Console(record=True, width=200)
    method = HBC(budget=smoke_budget(iterations=3), backbone=tiny_backbone, device="cpu", console=console)
    outcome, test, ctx = optimize_and_test(method, pipeline, splits, pubmedqa_lm(pipeline), tmp_path)
    choices = [n for n, c in pipeline.system.components.items() if c.kind.value == "choice"]
    assert choices == ["context_model_selector", "solver_model_selector"]
    # Only the prompt components are ever optimized; the model selectors keep their unoptimized values.
    assert outcome.history and {h.component for h in outcome.history} <= {"context_analyst", "problem_solver"}
    default = pipeline.system.default_config()
    assert all(outcome.config[n] == default[n] for n in choices)
    info = outcome.extras["hbc"]
    assert info["left_unchanged"] == {n: "choice" for n in choices} and "no choice value" in info["left_unchanged_why"]
    assert "leaves context_model_selector (choice), solver_model_selector (choice) unchanged" in console.export_text()
    assert {"reference_collection", "local_optimization"} <= set(ctx.ledger.to_dict()["by_phase"])
