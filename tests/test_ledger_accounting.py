"""The ledger's two counts: the paper's accounting (Appendix G.4) and the executed component runs / K.

The seed's Amazon decomposition (A -> B -> C, three components) is rebuilt from the events a real
collection and real cached validation passes record: 60 x 2 = 120, 5 x 10 x 2 = 100 and
20 x 7 x 2/3 ~ 93. (The seed says "60 pairs per component" but multiplies 60 x 2, so its arithmetic
charges 60 pairs in all; the test collects 20 per component.)
"""
from __future__ import annotations

import pytest

from optimas_cli.lrf.collect import COLLECTION_PHASE, collect_all, collect_pairs
from optimas_cli.optim import score_value
from optimas_cli.system import HEURISTIC_ROUTE, Component, CompoundSystem, ConfigKind, RunContext, RunLedger
from optimas_cli.system.ledger import SEARCH_SAMPLE_PHASE


class Bit(Component):
    """A global choice of 0 or 1, weighted by its position: every flip changes the final sum."""

    def __init__(self, name, source, target, weight):
        super().__init__(name, "adds a weighted bit", (source,), (target,), kind=ConfigKind.CHOICE,
                         default=0, choices=(0, 1))
        self.weight = weight

    def forward(self, inputs, value, ctx):
        return [{self.outputs[0]: x[self.inputs[0]] + self.weight * value} for x in inputs]

    def heuristic_score(self, inputs, outputs):
        return -outputs[self.outputs[0]]


def amazon_like():
    return CompoundSystem([Bit("A", "q", "a", 1), Bit("B", "a", "b", 2), Bit("C", "b", "c", 4)],
                          inputs=("q",), outputs=("c",))


def reward(example, output):
    return float(output["c"])


def inputs(n, start=0):
    return [{"q": 0, "id": start + i} for i in range(n)]


def test_the_seeds_amazon_numbers_from_ledger_events():
    system = amazon_like()
    ledger = RunLedger(len(system))
    ctx = RunContext(ledger=ledger)
    config = system.default_config()

    stage1 = collect_all(system, config, inputs(20), ctx.replace(phase=COLLECTION_PHASE), reward)
    assert sum(len(p) for p in stage1.values()) == 60
    assert ledger.paper_runs(COLLECTION_PHASE) == pytest.approx(60 * 2)

    for adaptation in range(5):  # 10 fresh pairs per adaptation, spread over the components
        for name, n in (("A", 4), ("B", 3), ("C", 3)):
            collect_pairs(system, config, name, inputs(n, 100 * adaptation), ctx.replace(phase="adaptation"), reward)
    assert ledger.paper_runs("adaptation") == pytest.approx(5 * 10 * 2)

    val = system.run(inputs(20, 1000), config, ctx.replace(phase="baseline"))
    for name in ("A", "B", "C", "A", "B", "C", "B"):  # 7 passes; positions average 2/3 of the system
        val = system.run_from(name, val, config, ctx.replace(phase="validation"))
    assert ledger.paper_runs("validation") == pytest.approx(20 * 7 * 2 / 3)
    assert ledger.paper_runs("validation") == pytest.approx(93.33, abs=0.01)

    # Executed: what collection really ran. For A: 2 values x 20 + B, C after each (2 x 2 x 20) = 120;
    # for B: A once (20) + 2 x 20 + C after each (2 x 20) = 100; for C: A, B once (40) + 2 x 20 = 80.
    assert ledger.equivalent_runs(COLLECTION_PHASE) == pytest.approx((120 + 100 + 80) / 3)
    assert ledger.equivalent_runs(COLLECTION_PHASE) != pytest.approx(ledger.paper_runs(COLLECTION_PHASE))
    summary = ledger.to_dict()
    assert summary["by_phase"][COLLECTION_PHASE]["pairs"] == {"A": 20, "B": 20, "C": 20}
    assert summary["paper_runs"] == pytest.approx(120 + 100 + 280 / 3 + 20, abs=1e-3)  # + the baseline pass


def test_a_router_is_executed_for_every_value_and_charged_once_by_the_paper():
    pick = Bit("A", "q", "a", 1)
    pick.per_instance = True
    system = CompoundSystem([pick], inputs=("q",), outputs=("a",))
    ledger = RunLedger(1)
    system.run(inputs(4), system.default_config().replace("A", dict(HEURISTIC_ROUTE)), RunContext(ledger=ledger))
    assert ledger.to_dict()["by_phase"]["run"]["component_executions"] == {"A": 4 * 2}
    assert ledger.equivalent_runs() == pytest.approx(8) and ledger.paper_runs() == pytest.approx(4)


def test_local_scoring_and_the_search_sample_are_executed_but_not_charged_by_the_paper():
    system = amazon_like()
    ledger = RunLedger(3)

    class Flat:
        def score(self, name, xs, outs):
            return [0.0] * len(xs)

    system.run(inputs(6), system.default_config(), RunContext(ledger=ledger, phase=SEARCH_SAMPLE_PHASE))
    score_value(system.components["B"], 1, [{"a": 0}] * 6, Flat(), RunContext(ledger=ledger, phase="local_optimization"))
    assert ledger.equivalent_runs() == pytest.approx(6 + 6 / 3)
    assert ledger.paper_runs() == 0


def test_both_counts_survive_a_checkpoint():
    ledger = RunLedger(2)
    ledger.record_pairs("a", 5, COLLECTION_PHASE)
    ledger.record("a", 7, COLLECTION_PHASE)
    ledger.record("b", 4, "validation", values_run=3)
    resumed = RunLedger(2)
    resumed.restore(ledger.state())
    assert resumed.paper_runs() == pytest.approx(10 + 2) and resumed.equivalent_runs() == pytest.approx((7 + 12) / 2)
