"""hbc: candidate outputs scored by embedding similarity to the best unoptimized runs' outputs."""
from __future__ import annotations

import numpy as np
import pytest

from optimas_cli.methods.hbc import HBC
from optimas_cli.methods.scorers import ReferenceSimilarityScorer, TextEmbedder, input_key
from optimas_cli.system import RunContext, RunLedger
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


def test_an_input_with_its_own_reference_is_scored_against_that_reference():
    references = {"writer": [({"q": "one"}, {"answer": "aaaa"}), ({"q": "two"}, {"answer": "zzzz"})]}
    scorer = ReferenceSimilarityScorer(references, {"writer": ("answer",)}, LetterCounts())
    [like_own, like_other] = scorer.score("writer", [{"q": "two"}, {"q": "two"}], [{"answer": "zzzz"}, {"answer": "aaaa"}])
    assert like_own == pytest.approx(1.0) and like_other < 0.5
    # an unseen input takes its best match over all references, so both score 1
    assert scorer.score("writer", [{"q": "new"}] * 2, [{"answer": "zzzz"}, {"answer": "aaaa"}]) == pytest.approx([1, 1])
    assert scorer.score("reader", [{"q": "one"}], [{"x": "y"}]) == [0.0]  # no reference: no preference


def test_references_come_from_the_highest_reward_runs():
    pipeline = retriever.build()
    system = pipeline.system
    trajs = system.run(pipeline.splits.train, system.default_config(), RunContext(ledger=RunLedger(2)))
    run_rewards = [0.1, 0.9, 0.5, 0.2]
    scorer, summary = ReferenceSimilarityScorer.from_runs(pipeline, trajs, run_rewards, LetterCounts(), 0.5)
    assert summary["reference_runs"] == 2 and summary["reference_mean_reward"] == pytest.approx(0.7)
    assert set(scorer.by_input["retriever"]) == {input_key(trajs[i].steps["retriever"]["inputs"]) for i in (1, 2)}


def test_runs_end_to_end_on_the_capitals_toy(tmp_path, tiny_backbone):
    pipeline = capitals()
    method = HBC(budget=smoke_budget(iterations=2), backbone=tiny_backbone, device="cpu", top_fraction=0.5)
    outcome, test, ctx = optimize_and_test(method, pipeline, pipeline.splits, capitals_lm(), tmp_path)
    assert set(outcome.config) == {"asker", "answerer"} and all(isinstance(v, str) for v in outcome.config.values())
    assert 0.0 <= test["mean"] <= 1.0 and len(outcome.history) == 2
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
    assert 0.0 <= test["mean"] <= 1.0 and test["n"] == 4
    assert {"reference_collection", "local_optimization", "validation"} <= set(ctx.ledger.to_dict()["by_phase"])
