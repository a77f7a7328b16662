"""The compound-system core: wiring checks, order, routing, cached re-runs, ledger, configurations."""
from __future__ import annotations

import json

import pytest

from optimas_cli.system import (
    HEURISTIC_ROUTE,
    Component,
    CompoundSystem,
    ConfigKind,
    RunContext,
    RunLedger,
    SystemConfig,
    WiringError,
)


class Echo(Component):
    """Appends its configuration to the first input field; counts how often it ran and on what."""

    def __init__(self, name, inputs, outputs, **kw):
        super().__init__(name, f"{name} component", inputs, outputs, **kw)
        self.batches: list[int] = []

    def forward(self, inputs, value, ctx):
        self.batches.append(len(inputs))
        first = self.inputs[0]
        return [{o: f"{x[first]}>{self.name}:{value}" for o in self.outputs} for x in inputs]


def chain():
    a = Echo("a", ["q"], ["x"], kind=ConfigKind.PROMPT, default="pa")
    b = Echo("b", ["x"], ["y"], kind=ConfigKind.PROMPT, default="pb")
    c = Echo("c", ["y", "q"], ["z"], kind=ConfigKind.PROMPT, default="pc")
    return CompoundSystem([c, a, b], inputs=["q"], outputs=["z"]), (a, b, c)


def ctx_for(system):
    return RunContext(ledger=RunLedger(len(system)))


def test_topological_order_follows_fields_not_declaration():
    system, _ = chain()
    assert system.order == ["a", "b", "c"]
    assert system.downstream("a") == ["b", "c"]
    assert system.downstream("c") == []


@pytest.mark.parametrize(
    "components, message",
    [
        ([Echo("a", ["missing"], ["x"])], "needs field 'missing'"),
        ([Echo("a", ["q"], ["x"]), Echo("b", ["q"], ["x"])], "produced by both"),
        ([Echo("a", ["y"], ["x"]), Echo("b", ["x"], ["y"])], "cycle"),
        ([Echo("a", ["q"], ["q"])], "already a system input"),
        ([Echo("a", ["q"], ["x"]), Echo("a", ["x"], ["y"])], "names must be unique"),
    ],
)
def test_wiring_errors_are_caught_at_construction(components, message):
    with pytest.raises(WiringError, match=message):
        CompoundSystem(components, inputs=["q"], outputs=[components[-1].outputs[0]])


def test_run_is_batched_by_stage_and_keeps_every_step():
    system, (a, b, c) = chain()
    trajs = system.run([{"q": "1"}, {"q": "2"}, {"q": "3"}], system.default_config(), ctx_for(system))
    assert a.batches == b.batches == c.batches == [3]
    t = trajs[0]
    assert t.final(system.outputs) == {"z": "1>a:pa>b:pb>c:pc"}
    assert t.steps["b"]["inputs"] == {"x": "1>a:pa"}


def test_run_from_reuses_upstream_outputs():
    system, (a, b, c) = chain()
    ctx = ctx_for(system)
    trajs = system.run([{"q": "1"}, {"q": "2"}], system.default_config(), ctx)
    new = system.run_from("b", trajs, system.default_config().replace("b", "NEW"), ctx)
    assert a.batches == [2]  # the upstream component was not called again
    assert b.batches == [2, 2] and c.batches == [2, 2]
    assert new[0].final(system.outputs) == {"z": "1>a:pa>b:NEW>c:pc"}
    assert trajs[0].final(system.outputs) == {"z": "1>a:pa>b:pb>c:pc"}  # originals untouched


def test_run_until_then_run_after_substitutes_a_candidate():
    system, (a, b, c) = chain()
    ctx = ctx_for(system)
    partial = system.run_until("b", [{"q": "1"}], system.default_config(), ctx)
    assert "b" not in partial[0].steps and a.batches == [1]
    done = system.run_after("b", partial, [{"y": "CANDIDATE"}], system.default_config(), ctx)
    assert b.batches == [] and c.batches == [1]
    assert done[0].final(system.outputs) == {"z": "CANDIDATE>c:pc"}


def test_per_input_routing_skips_a_component():
    a = Echo("a", ["q"], ["x"])
    b = Echo("b", ["q"], ["y"], when=lambda inputs: inputs["q"].startswith("long"))
    system = CompoundSystem([a, b], inputs=["q"], outputs=["x", "y"])
    ctx = ctx_for(system)
    trajs = system.run([{"q": "long one"}, {"q": "short"}], system.default_config(), ctx)
    assert b.batches == [1]
    assert trajs[1].steps["b"]["skipped"] and trajs[1].state["y"] is None
    assert ctx.ledger.equivalent_runs() == pytest.approx(3 / 2)


def test_ledger_counts_partial_runs_as_fractions():
    ledger = RunLedger(num_components=4)
    ledger.record("a", 10, "collect")
    ledger.record("b", 10, "collect")
    ledger.record("c", 3, "validation")
    assert ledger.equivalent_runs("collect") == pytest.approx(5.0)
    assert ledger.equivalent_runs("validation") == pytest.approx(0.75)
    assert ledger.equivalent_runs() == pytest.approx(5.75)
    assert ledger.to_dict()["by_phase"]["validation"]["component_executions"] == {"c": 3}


def test_ledger_state_survives_a_json_round_trip_and_keeps_counting():
    ledger = RunLedger(num_components=2)
    ledger.record("a", 4, "collect")
    with ledger.timed("collect"):
        pass
    saved = json.loads(json.dumps(ledger.state()))
    saved["elapsed"] = 100.0  # as if the killed process had run for 100 s
    resumed = RunLedger(num_components=2)
    resumed.restore(saved)
    resumed.record("b", 2, "validation")
    assert resumed.equivalent_runs("collect") == pytest.approx(2.0) and resumed.equivalent_runs() == pytest.approx(3.0)
    assert resumed.to_dict()["seconds"] >= 100.0  # wall time goes on from the checkpoint


def test_config_replace_and_round_trip(tmp_path):
    cfg = SystemConfig({"a": "prompt text", "k": 5, "sel": dict(HEURISTIC_ROUTE), "lora": None})
    new = cfg.replace("k", 10)
    assert cfg["k"] == 5 and new["k"] == 10
    new.save(tmp_path / "c.json")
    assert SystemConfig.load(tmp_path / "c.json") == new
    with pytest.raises(KeyError):
        cfg.replace("nope", 1)


def test_per_instance_choice_routes_by_heuristic_or_lrf():
    class Pick(Component):
        def forward(self, inputs, value, ctx):
            return [{"out": value} for _ in inputs]

        def heuristic_score(self, inputs, outputs):
            return {"A": 1.0, "B": 0.0}[outputs["out"]]

    class PreferB:
        def score(self, name, inputs, outputs):
            return [1.0 if o["out"] == "B" else 0.0 for o in outputs]

    pick = Pick("pick", "", ["q"], ["out"], kind="choice", choices=("A", "B"), per_instance=True)
    system = CompoundSystem([pick], inputs=["q"], outputs=["out"])
    ctx = ctx_for(system)
    assert system.run([{"q": 1}], SystemConfig({"pick": HEURISTIC_ROUTE}), ctx)[0].state["out"] == "A"
    routed = system.run([{"q": 1}], SystemConfig({"pick": {"route": "lrf"}}), ctx.replace(lrf=PreferB()))
    assert routed[0].state["out"] == "B"
