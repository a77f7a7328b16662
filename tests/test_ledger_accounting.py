"""The ledger's two counts: the paper's accounting (Appendix G.4) and the executed component runs / K.

The seed's Amazon decomposition (A -> B -> C, three components) is rebuilt from the events a real
collection and real cached validation passes record: 60 x 2 = 120, 5 x 10 x 2 = 100 and
20 x 7 x 2/3 ~ 93. The paper's rule is "one run per candidate in the pair": each candidate drawn and
the downstream run that scored it count once, at m/K. Its 2 runs per pair are full runs, so the
pairs here are of the first component (A), whose candidates each run the whole system: 60 inputs x
2 values = 60 pairs, 120 candidate runs. (The seed says "60 pairs per component" but multiplies
60 x 2, so its arithmetic charges 60 pairs in all.)
"""
from __future__ import annotations

import pytest

from optimas_cli.lrf.collect import COLLECTION_PHASE, collect_all, collect_pairs
from optimas_cli.optim.proposal import score_value
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

    stage1 = collect_pairs(system, config, "A", inputs(60), ctx.replace(phase=COLLECTION_PHASE), reward)
    assert len(stage1) == 60
    assert ledger.paper_runs(COLLECTION_PHASE) == pytest.approx(60 * 2)

    for adaptation in range(5):  # 10 fresh pairs per adaptation
        fresh = collect_pairs(system, config, "A", inputs(10, 100 * adaptation), ctx.replace(phase="adaptation"), reward)
        assert len(fresh) == 10
    assert ledger.paper_runs("adaptation") == pytest.approx(5 * 10 * 2)

    val = system.run(inputs(20, 1000), config, ctx.replace(phase="baseline"))
    for name in ("A", "B", "C", "A", "B", "C", "B"):  # 7 accepted passes; positions average 2/3 of the system
        with ledger.provisional() as accepted:
            val = system.run_from(name, val, config, ctx.replace(phase="validation"))
        accepted.keep()
    for name in ("A", "C"):  # 2 rejected proposals: validated (executed), not charged by the paper
        with ledger.provisional():
            system.run_from(name, val, config, ctx.replace(phase="validation"))
    assert ledger.paper_runs("validation") == pytest.approx(20 * 7 * 2 / 3)
    assert ledger.paper_runs("validation") == pytest.approx(93.33, abs=0.01)
    assert ledger.equivalent_runs("validation") == pytest.approx(20 * (14 + 3 + 1) / 3)

    summary = ledger.to_dict()
    assert summary["by_phase"][COLLECTION_PHASE]["pairs"] == {"A": 60}
    assert summary["paper_runs"] == pytest.approx(120 + 100 + 280 / 3 + 20, abs=1e-3)  # + the baseline pass


def test_a_collection_of_every_component_charges_each_candidate_at_its_share_of_the_system():
    # Before: 2 runs per pair whatever ran (60 pairs -> 120). Now what ran, once: the prefix every collection
    # holds fixed, A and B once for all three (40 executions; once per component it was 20 + 40 = 60); for A,
    # 2 values x 20 with B, C after each (120); for B, 2 x 20 + C after each (80); for C, 2 x 20 (40).
    system = amazon_like()
    ledger = RunLedger(len(system))
    pairs = collect_all(system, system.default_config(), inputs(20), RunContext(ledger=ledger, phase=COLLECTION_PHASE), reward)
    assert sum(len(p) for p in pairs.values()) == 60
    assert ledger.paper_runs(COLLECTION_PHASE) == pytest.approx((40 + 120 + 80 + 40) / 3)
    assert ledger.equivalent_runs(COLLECTION_PHASE) == pytest.approx(ledger.paper_runs(COLLECTION_PHASE))


class Pick(Component):
    """A global choice among `n` values, alone in its system."""

    def __init__(self, n, score=lambda v: v):
        super().__init__("pick", "picks a value", ("q",), ("v",), kind=ConfigKind.CHOICE, default=0,
                         choices=tuple(range(n)))
        self.score_of = score

    def forward(self, inputs, value, ctx):
        return [{"v": value} for _ in inputs]


def test_a_four_value_choice_is_charged_what_ran_not_three_times_it():
    system = CompoundSystem([Pick(4)], inputs=("q",), outputs=("v",))
    ledger = RunLedger(1)
    pairs = collect_pairs(system, system.default_config(), "pick", inputs(10), RunContext(ledger=ledger, phase=COLLECTION_PHASE),
                          lambda ex, out: float(out["v"]))
    assert len(pairs) == 10 * 6  # every two of 4 values: the old rule charged 2 x 60 = 120
    assert ledger.equivalent_runs() == pytest.approx(40) and ledger.paper_runs() == pytest.approx(40)


def test_a_collection_where_every_candidate_ties_is_charged_what_it_ran():
    system = CompoundSystem([Pick(3)], inputs=("q",), outputs=("v",))
    ledger = RunLedger(1)
    pairs = collect_pairs(system, system.default_config(), "pick", inputs(5), RunContext(ledger=ledger, phase=COLLECTION_PHASE),
                          lambda ex, out: 1.0)
    assert pairs == [] and ledger.paper_runs() == pytest.approx(15)  # the old rule: 0 pairs, 0 runs


class Sampler(Component):
    """A prompt component whose samples differ by sample index (as LM samples at T > 0 do)."""

    def __init__(self, name, source, target):
        super().__init__(name, "samples", (source,), (target,), kind=ConfigKind.PROMPT, default="p")

    def forward(self, inputs, value, ctx):
        return [{self.outputs[0]: f"{x[self.inputs[0]]}:{ctx.sample_index}"} for x in inputs]


def test_three_prompt_candidates_and_their_monte_carlo_repeats_are_charged_once_each():
    system = CompoundSystem([Sampler("A", "q", "a"), Sampler("B", "a", "b")], inputs=("q",), outputs=("b",))
    ledger = RunLedger(2)
    ctx = RunContext(ledger=ledger, phase=COLLECTION_PHASE, temperature=1.0)
    pairs = collect_pairs(system, system.default_config(), "A", inputs(4), ctx,
                          lambda ex, out: float(out["b"].split(":")[1]) + float(out["b"].split(":")[2]),
                          num_candidates=3, mc_repeats=2, temperature=1.0)
    assert len(pairs) == 4 * 3  # the old rule: 2 x 12 = 24 runs
    # 3 candidates x 4 inputs of A, each scored by B twice: executed (12 + 24) / 2, charged (12 + 12) / 2
    assert ledger.equivalent_runs() == pytest.approx(18) and ledger.paper_runs() == pytest.approx(12)


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
    ledger.record("b", 6, COLLECTION_PHASE, charged=False)
    resumed = RunLedger(2)
    resumed.restore(ledger.state())
    assert resumed.paper_runs() == pytest.approx((7 + 4) / 2) and resumed.equivalent_runs() == pytest.approx((7 + 12 + 6) / 2)
    assert resumed.to_dict()["by_phase"][COLLECTION_PHASE]["pairs"] == {"a": 5}
