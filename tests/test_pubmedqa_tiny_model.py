"""PubMedQA end to end through the real LM layer (litellm + local provider) on the tiny random model."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from optimas_cli.lm.local.registry import register_local_model
from optimas_cli.system import RunContext, RunLedger
from optimas_cli.system.evaluate import evaluate
from optimas_pipelines.pubmedqa import build
from optimas_pipelines.pubmedqa.metric import DEFAULT_DECISION, LABELS, parse_decision

ROOT = Path(__file__).resolve().parent.parent
DATA = Path(os.environ.get("OPTIMAS_DATA_DIR") or ROOT.parent / "shared" / "data")

pytestmark = pytest.mark.skipif(not (DATA / "pubmedqa").exists(), reason="needs the shared data folder")


class RecordingLM:
    """The real client, with the model of every request and the text of every reply noted per component."""

    def __init__(self, client):
        self.client, self.models, self.texts = client, set(), {}

    def complete(self, requests, component="-", phase="-"):
        self.models |= {(component, r.model) for r in requests}
        responses = self.client.complete(requests, component=component)
        self.texts.setdefault(component, []).extend(r.texts[0] for r in responses)
        return responses


def test_real_rows_run_through_the_local_provider_with_the_chosen_models(tiny_model, tiny_model_dir, tiny_lm):
    second = register_local_model("tiny-llama-second", tiny_model_dir)
    pipeline = build(data_dir=DATA, lm_model=tiny_model, candidate_models=[second], analyst_max_tokens=6,
                     solver_max_tokens=6)
    examples = pipeline.splits.test[:4]
    config = pipeline.system.default_config().replace("context_model_selector", second)
    lm = RecordingLM(tiny_lm)
    ctx = RunContext(ledger=RunLedger(len(pipeline.system)), lm=lm)

    trajs = pipeline.system.run(examples, config, ctx)
    assert all(t.state["answer"] in LABELS and isinstance(t.state["summary"], str) for t in trajs)
    assert lm.models == {("context_analyst", second), ("problem_solver", tiny_model)}
    usage = tiny_lm.usage.to_dict()["by_component"]
    assert usage["context_analyst"]["calls"] == usage["problem_solver"]["calls"] == 4
    assert usage["context_analyst"]["prompt_tokens"] > usage["problem_solver"]["prompt_tokens"]  # contexts are long

    # The random model commits to no label: every solver reply is a parse failure, which falls back to
    # the parser's default decision, and the four rows' gold labels are yes/no, so nothing scores.
    failures = sum(parse_decision(text, default="") == "" for text in lm.texts["problem_solver"])
    assert failures == 4 and [t.state["answer"] for t in trajs] == [DEFAULT_DECISION] * 4
    assert DEFAULT_DECISION not in {ex["answer"] for ex in examples}
    result = evaluate(pipeline, config, examples, ctx)
    assert result["mean"] == 0.0 and result["n"] == 4
