"""Optimas end to end on a real pipeline (PubMedQA rows) with a scripted LM and the real MiniLM LRF."""
from __future__ import annotations

import json

import pytest
from hydra import compose, initialize_config_dir

from optimas_cli.conf import CONF_DIR
from optimas_cli.flows.setup import budget_splits, build_budget, build_context, build_method, build_pipeline
from optimas_cli.system.run_folder import RunFolder
from tests.fakes import ScriptedLM

pytestmark = pytest.mark.real_model


def test_optimas_runs_on_pubmedqa(tmp_path, monkeypatch):
    monkeypatch.setenv("OPTIMAS_CACHE_DIR", str(tmp_path / "cache"))
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        # The loop's bookkeeping is under test, not what the reward learns (the LM is scripted): a few short
        # MiniLM steps keep it a minute, not five (tests/test_lrf_train.py checks that MiniLM learns).
        cfg = compose("config", overrides=["pipeline=pubmedqa", "method=optimas", "budget=smoke",
                                            "lrf.min_steps=4", "lrf.max_length=96"])
    pipeline = build_pipeline(cfg)
    splits = budget_splits(pipeline, build_budget(cfg))
    # Answers vary with the sample index, so candidates differ in accuracy and pairs exist.
    lm = ScriptedLM(lambda req: ["Answer: yes", "Answer: no", "Answer: maybe"][req.sample_index % 3])
    folder = RunFolder(tmp_path / "run")
    ctx = build_context(cfg, pipeline, folder).replace(lm=lm)
    method = build_method(cfg, build_budget(cfg))
    outcome = method.optimize(pipeline, splits, ctx, folder)

    assert len(outcome.history) == cfg.budget.iterations
    for entry in outcome.history:  # the gate's decisions: strictly higher to accept, untouched otherwise
        if entry.accepted:
            assert entry.val_candidate > entry.val_before and entry.val_after >= entry.val_candidate - 1e-9
        else:
            assert entry.val_after == entry.val_before
    report = outcome.extras["lrf"]
    assert (folder.file("lrf") / "config.json").exists()
    stage1_pairs = len(folder.file("pairs.jsonl").read_text().splitlines())
    # 6 training inputs give each component fewer pairs than a test split needs: each says so (n/a)
    # rather than reporting an accuracy on the pairs it trained on
    assert report["n_pairs"] == stage1_pairs > 0 and report["mean_pairwise_accuracy"] is None
    assert all(c["pairwise_accuracy"] is None and c["no_test"] for c in report["components"].values())
    assert any("a test split needs" in c["no_test"] for c in report["components"].values())
    state = json.loads(folder.file("loop_state.json").read_text())
    assert state["iteration"] == cfg.budget.iterations
    phases = ctx.ledger.to_dict()["by_phase"]
    collection = phases["lrf_collection"]  # the paper charges each candidate run once, its MC repeats not
    assert sum(collection["pairs"].values()) == stage1_pairs
    assert 0 < collection["paper_runs"] <= collection["runs"] and phases["validation"]["runs"] > 0
    # The returned configuration scores on validation what the loop recorded last.
    validation = method.evaluate(pipeline, outcome, splits.val, ctx, repeats=1)
    assert validation["mean"] * len(splits.val) == pytest.approx(outcome.history[-1].val_after)
    # At test time (sample index 0) the scripted solver says yes, whatever the configuration: the score
    # is the share of yes rows.
    result = method.evaluate(pipeline, outcome, splits.test, ctx, repeats=1)
    assert result["n"] == len(splits.test)
    assert result["mean"] == pytest.approx(sum(ex["answer"] == "yes" for ex in splits.test) / len(splits.test))
