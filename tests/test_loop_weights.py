"""Algorithm 1 end to end with a weights component: an Amazon-like system (a LoRA-trainable session
analyzer on the tiny local model -> a fixed next-item decider), GRPO proposal -> validation gate ->
the adapter in the best configuration -> the test evaluation runs it."""
from __future__ import annotations

import json
from pathlib import Path

from optimas_cli.optim.loop import LoopSettings, OptimasLoop
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
from optimas_cli.system.evaluate import evaluate
from optimas_cli.system.run_folder import RunFolder

GRPO = {"steps": 3, "prompts_per_step": 2, "num_generations": 4, "max_completion_length": 8, "learning_rate": 5e-2}


class SessionAnalyzer(Component):
    """Weights kind: the tiny local LM (base + LoRA adapter) writes a short context for a session."""

    def __init__(self, base_model: str):
        super().__init__("session_analyzer", "summarizes the session", ("sequence",), ("context",),
                         kind=ConfigKind.WEIGHTS)
        self.base_model = base_model

    def base_model_path(self) -> str:
        return self.base_model

    def build_messages(self, inputs: dict, value) -> list[dict]:
        return [{"role": "user", "content": f"Session: {inputs['sequence']}"}]

    def parse_output(self, text: str) -> dict:
        return {"context": text.strip()}

    def forward(self, inputs, value, ctx):
        messages = [self.build_messages(x, value) for x in inputs]
        texts = ctx.complete(self.name, messages, model=self.base_model, adapter=value, max_tokens=8)
        return [self.parse_output(t) for t in texts]


class NextItemDecider(Component):
    """Fixed: rates the next item by how much context the analyzer gave it."""

    def __init__(self):
        super().__init__("next_item_decider", "rates the next item", ("context",), ("rating",))

    def forward(self, inputs, value, ctx):
        return [{"rating": informative(x["context"])} for x in inputs]


def informative(text: str) -> float:
    """The global reward: how much of a 20-character context the analyzer wrote. The tiny random model's
    greedy reply is empty, and three GRPO steps can move that: a stand-in for Amazon's accuracy that
    the test can rely on, with every piece of Algorithm 1 real."""
    return min(1.0, len(text) / 20)


class ContextReward:
    """r_k of the analyzer: the rating its context leads to (aligned with the global reward by construction)."""

    def score(self, name, inputs, outputs):
        return [informative(o["context"]) for o in outputs]


class AdapterLog:
    """The run's real LM client, noting the adapter of every analyzer request."""

    def __init__(self, client):
        self.client, self.adapters = client, []

    def complete(self, requests, component="-", phase="-"):
        if component == "session_analyzer":
            self.adapters += [r.adapter for r in requests]
        return self.client.complete(requests, component=component)


def amazon_like(base_model: str) -> Pipeline:
    system = CompoundSystem([SessionAnalyzer(base_model), NextItemDecider()], inputs=("sequence",), outputs=("rating",))
    rows = [{"sequence": f"viewed item {i}, then item {i + 1}"} for i in range(12)]
    metric = Metric("rating", lambda ex, out: out["rating"])
    return Pipeline("amazon_like", system, Splits(rows[:4], rows[4:8], rows[8:]), metric)


def test_a_grpo_adapter_passes_the_gate_and_the_test_runs_it(tiny_model, tiny_lm, tmp_path):
    pipeline = amazon_like(tiny_model)
    lm = AdapterLog(tiny_lm)
    ctx = RunContext(ledger=RunLedger(len(pipeline.system)), lm=lm, seed=0)
    settings = LoopSettings(iterations=1, search_size=4, optimizer={"weights": {**GRPO, "work_dir": str(tmp_path / "ad")}})
    loop = OptimasLoop(pipeline, pipeline.splits.train, pipeline.splits.val, ctx, ContextReward(), settings,
                       RunFolder(tmp_path / "run"))
    config, history = loop.run()

    [entry] = history  # the only optimizable component, so the scheduler picks it
    assert entry.component == "session_analyzer" and entry.kind == "weights"
    adapter = Path(entry.proposal)
    assert json.loads((adapter / "optimas_adapter.json").read_text())["algorithm"] == "GRPO"
    assert entry.local_score > entry.baseline_local_score == 0.0  # r_k rose on the search sample
    held = entry.details["held_out"]  # the last of the 4 search inputs: GRPO trained on the other 3
    assert held["n"] == 1 and held["r_k_before"] == 0.0 and "r_k_after" in held
    assert entry.val_before == 0.0 and entry.val_candidate > 0.0 and entry.accepted
    assert config["session_analyzer"] == str(adapter)
    assert json.loads((tmp_path / "run" / "best_config.json").read_text())["session_analyzer"] == str(adapter)
    # GRPO's generations (3 steps x 2 prompts x 4) and r_k scoring (current and new, 4 inputs each)
    # are executed runs, charged nothing by the paper's accounting.
    assert ctx.ledger.executions["local_optimization"]["session_analyzer"] == 3 * 2 * 4 + 2 * 4
    assert ctx.ledger.paper_runs("local_optimization") == 0

    lm.adapters.clear()
    test = evaluate(pipeline, config, pipeline.splits.test, ctx.replace(phase="test"))
    assert lm.adapters == [str(adapter)] * len(pipeline.splits.test)  # the test ran the accepted adapter
    unoptimized = evaluate(pipeline, pipeline.system.default_config(), pipeline.splits.test, ctx.replace(phase="test"))
    assert test["mean"] > unoptimized["mean"] == 0.0
