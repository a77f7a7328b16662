"""Optimas on Chapter 5's toys: collection, LRF training and Algorithm 1 must find the aligned choice.

The aligned scores (0.85, 0.833, 0.81) are not typed in anywhere: they come out of preference pairs
labelled by the toys' downstream rewards, a trained MiniLM reward model and the validation gate.
"""
from __future__ import annotations

import pytest
from hydra import compose, initialize_config_dir

from optimas_cli.conf import CONF_DIR
from optimas_cli.flows.plan import make_plan
from optimas_cli.flows.setup import budget_splits, build_budget, build_context, build_method, build_pipeline
from optimas_cli.system.run_folder import RunFolder

pytestmark = pytest.mark.real_model


def composed(pipeline: str):
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        # The smoke budget's loop sizes, but every one of the chapter's queries (the budget caps splits).
        return compose("config", overrides=[f"pipeline={pipeline}", "method=optimas", "budget=smoke",
                                            "budget.train_size=null", "budget.val_size=null",
                                            "budget.test_size=null", "lrf.judge.enabled=false"])


@pytest.mark.parametrize(
    "pipeline, aligned, per_query",
    [
        # The model selector's case is the quickest (45 s); the other two take minutes each: `make test-slow`.
        pytest.param("toy_retriever", 0.85, ["B", "B", "B", "B"], marks=pytest.mark.slow),
        ("toy_model_selector", 5 / 6, ["X", "Y", "Y", "X", None, "Y"]),
        pytest.param("toy_hint", 0.81, ["long", "long", "long", "long", "short"], marks=pytest.mark.slow),
    ],
)
def test_optimas_recovers_the_aligned_choice(tmp_path, pipeline, aligned, per_query):
    cfg = composed(pipeline)
    pipe = build_pipeline(cfg)
    splits = budget_splits(pipe, build_budget(cfg))
    folder = RunFolder(tmp_path)
    ctx = build_context(cfg, pipe, folder)
    method = build_method(cfg, build_budget(cfg))
    outcome = method.optimize(pipe, splits, ctx, folder)
    # The plan, made without running anything, predicted these runs exactly (the toys are deterministic).
    planned = {p: row["runs"] for p, row in make_plan(cfg, pipe, splits)["phases"].items() if row["runs"]}
    executed = {p: row["runs"] for p, row in ctx.ledger.to_dict()["by_phase"].items() if row["runs"]}
    optimizing = ("lrf_collection", "local_optimization", "search_sample", "validation", "adaptation")
    assert {p: planned[p] for p in optimizing if p in planned} == executed
    result = method.evaluate(pipe, outcome, splits.test, ctx, repeats=1)
    assert result["mean"] == pytest.approx(aligned)
    picks = [t.state["used_option"] for t in pipe.system.run(splits.test, outcome.config, ctx.replace(lrf=outcome.lrf))]
    for got, want in zip(picks, per_query, strict=True):
        if want is not None:  # Q5 of the model selector: neither model is right, no pair to learn from
            assert got == want
    assert outcome.history[0].accepted and outcome.config[pipe.system.order[0]] == {"route": "lrf"}
