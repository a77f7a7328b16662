"""Optimas end to end on a real pipeline (PubMedQA rows) with a scripted LM and the real MiniLM LRF."""
from __future__ import annotations

import json

import pytest
from hydra import compose, initialize_config_dir

from optimas_cli.conf import CONF_DIR
from optimas_cli.flows.setup import budget_splits, build_context, build_method, build_pipeline
from optimas_cli.system.run_folder import RunFolder
from tests.fakes import ScriptedLM

pytestmark = pytest.mark.real_model


def test_optimas_runs_on_pubmedqa(tmp_path, monkeypatch):
    monkeypatch.setenv("OPTIMAS_CACHE_DIR", str(tmp_path / "cache"))
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose("config", overrides=["pipeline=pubmedqa", "method=optimas", "budget=smoke"])
    pipeline = build_pipeline(cfg)
    splits = budget_splits(pipeline, cfg.budget)
    # Answers vary with the sample index, so candidates differ in accuracy and pairs exist.
    lm = ScriptedLM(lambda req: ["Answer: yes", "Answer: no", "Answer: maybe"][req.sample_index % 3])
    folder = RunFolder(tmp_path / "run")
    ctx = build_context(cfg, pipeline, folder).replace(lm=lm)
    method = build_method(cfg)
    outcome = method.optimize(pipeline, splits, ctx, folder)

    assert len(outcome.history) == cfg.budget.iterations
    for entry in outcome.history:
        assert entry["val_after"] >= entry["val_before"]
    report = outcome.extras["lrf"]
    # 6 training inputs give each component fewer pairs than a test split needs: each says so (n/a)
    # rather than reporting an accuracy on the pairs it trained on
    assert report["n_pairs"] > 0 and report["mean_pairwise_accuracy"] is None
    assert all(c["pairwise_accuracy"] is None and c["no_test"] for c in report["components"].values())
    assert any("a test split needs" in c["no_test"] for c in report["components"].values())
    assert (folder.file("lrf") / "config.json").exists() and folder.file("pairs.jsonl").exists()
    state = json.loads(folder.file("loop_state.json").read_text())
    assert state["iteration"] == cfg.budget.iterations
    phases = ctx.ledger.to_dict()["by_phase"]
    assert phases["lrf_collection"]["runs"] > 0 and phases["validation"]["runs"] > 0
    result = method.evaluate(pipeline, outcome, splits.test, ctx, repeats=1)
    assert 0.0 <= result["mean"] <= 1.0 and result["n"] == len(splits.test)
