"""HotpotQA end to end through the real LM layer (litellm + local provider) on the tiny random model."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from optimas_cli.system import RunContext, RunLedger
from optimas_cli.system.evaluate import evaluate, rewards
from optimas_pipelines.hotpotqa import build

ROOT = Path(__file__).resolve().parent.parent
DATA = Path(os.environ.get("OPTIMAS_DATA_DIR") or ROOT.parent / "shared" / "data")

pytestmark = pytest.mark.skipif(not (DATA / "hotpotqa").exists(), reason="needs the shared data folder")


def test_real_rows_run_through_the_local_provider(tiny_lm, tmp_path, monkeypatch):
    monkeypatch.setenv("OPTIMAS_CACHE_DIR", str(tmp_path / "cache"))
    pipeline = build(data_dir=DATA, train_size=10, val_size=10)
    examples = pipeline.splits.test[:3]
    system = pipeline.system
    config = system.default_config().replace("retriever", 1)
    ctx = RunContext(ledger=RunLedger(len(system)), lm=tiny_lm)

    trajectories = system.run(examples, config, ctx)
    for t in trajectories:  # a random model babbles, but every field is a string and parsing never fails
        assert all(isinstance(t.state[f], str) for f in ("rewritten_query", "search_keywords", "hints", "answer"))
        assert len(t.state["retrieve_content"].splitlines()) <= 1
    scores = rewards(pipeline, trajectories)
    assert all(isinstance(s, float) and 0.0 <= s <= 1.0 for s in scores)

    usage = tiny_lm.usage.to_dict()["by_component"]
    assert {c: usage[c]["calls"] for c in usage} == {
        "question_rewriter": 3, "info_extractor": 3, "hint_generator": 3, "answer_generator": 3,
    }
    assert usage["hint_generator"]["prompt_tokens"] > usage["info_extractor"]["prompt_tokens"]  # passages are long
    assert evaluate(pipeline, config, examples, ctx)["n"] == 3
