"""Amazon end to end through the real LM layer on the tiny random model, with a real LoRA adapter."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from optimas_cli.system import RunContext, RunLedger
from optimas_cli.system.evaluate import evaluate
from optimas_pipelines.amazon import build
from optimas_pipelines.amazon.metric import parse_choice

ROOT = Path(__file__).resolve().parent.parent
DATA = Path(os.environ.get("OPTIMAS_DATA_DIR") or ROOT.parent / "shared" / "data")

pytestmark = pytest.mark.skipif(not (DATA / "amazon").exists(), reason="needs the shared data folder")


class DeciderReplies:
    """The real client, keeping the next-item decider's raw replies."""

    def __init__(self, client):
        self.client, self.texts = client, []

    def complete(self, requests, component="-", phase="-"):
        responses = self.client.complete(requests, component=component)
        if component == "next_item_decider":
            self.texts += [r.texts[0] for r in responses]
        return responses


def test_real_rows_run_with_an_adapter_on_the_local_base_model(tiny_model, tiny_adapter_dir, tiny_lm):
    pipeline = build(data_dir=DATA, base_model=tiny_model, analyzer_max_tokens=6, profiler_max_tokens=6,
                     decider_max_tokens=4)
    examples = pipeline.splits.test[::33]  # three rows: English, German, Japanese
    lm = DeciderReplies(tiny_lm)
    ctx = RunContext(ledger=RunLedger(len(pipeline.system)), lm=lm)
    base = pipeline.system.run(examples, pipeline.system.default_config(), ctx)
    adapted_config = pipeline.system.default_config().replace("session_analyzer", str(tiny_adapter_dir))
    adapted = pipeline.system.run(examples, adapted_config, ctx)

    assert all(t.state["answer"] in {"", "0", "1", "2", "3"} for t in base + adapted)
    # the adapter has random non-zero weights: the analyzer's greedy text changes with it
    assert [t.state["context"] for t in base] != [t.state["context"] for t in adapted]
    usage = tiny_lm.usage.to_dict()["by_component"]
    assert {"session_analyzer", "candidate_profiler", "next_item_decider"} <= set(usage)

    # The random model names no item: all six decider replies (base, adapted) are parse failures, kept as
    # '' and scored 0, never turned into a guess.
    assert len(lm.texts) == 6 and all(parse_choice(text, ex["choices"]) == ""
                                      for text, ex in zip(lm.texts, examples * 2, strict=True))
    assert [t.state["answer"] for t in base + adapted] == [""] * 6
    result = evaluate(pipeline, adapted_config, examples, ctx)
    assert result["mean"] == 0.0 and result["n"] == 3
