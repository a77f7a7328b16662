"""The validation gate: strict (the paper) keeps a noisy tiny gain, paired keeps only a consistent one;
Algorithm 1 records every decision and logs what its validation set can detect."""
from __future__ import annotations

import logging

import pytest

from optimas_cli.errors import UserError
from optimas_cli.optim.gate import ValidationGate
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
from optimas_cli.system.run_folder import RunFolder

BEFORE = [0.5] * 10
NOISY = [1.0, 0.0, 1.0] + [0.5] * 7        # +0.5, -0.5, +0.5: the sum rises by 0.5, two examples carry it
CONSISTENT = [0.6] * 10                    # every example gains 0.1


def test_strict_accepts_a_noisy_tiny_gain_that_paired_rejects():
    strict = ValidationGate("strict").decide(BEFORE, NOISY)
    paired = ValidationGate("paired", alpha=0.1).decide(BEFORE, NOISY)
    assert strict.accepted and not paired.accepted
    assert strict.delta == paired.delta == pytest.approx(0.05)
    assert paired.ci_low < 0 < paired.ci_high and paired.rule == "paired" and paired.n == 10


def test_both_rules_accept_a_consistent_gain_and_reject_a_tie():
    for rule in ("strict", "paired"):
        decision = ValidationGate(rule).decide(BEFORE, CONSISTENT)
        assert decision.accepted and decision.ci_low == pytest.approx(0.1)
        assert not ValidationGate(rule).decide(BEFORE, BEFORE).accepted


@pytest.mark.parametrize("rule, alpha, message", [("lenient", 0.1, "unknown method.gate"), ("paired", 0.7, "outside")])
def test_bad_gate_settings_are_one_clear_error(rule, alpha, message):
    with pytest.raises(UserError, match=message):
        ValidationGate(rule, alpha)


class Pick(Component):
    def __init__(self):
        super().__init__("pick", "a global setting", ("i",), ("value", "i_out"), kind=ConfigKind.CHOICE,
                         default=0, choices=(0, 1, 2))

    def forward(self, inputs, value, ctx):
        return [{"value": value, "i_out": x["i"]} for x in inputs]


class Prefers:
    def __init__(self, favourite):
        self.favourite = favourite

    def score(self, name, inputs, outputs):
        return [100.0 if o["value"] == self.favourite else 0.0 for o in outputs]


def reward(example, out):
    """Value 1 is the noisy tiny gain, value 2 the consistent one (per validation example)."""
    i = out["i_out"]
    return {0: BEFORE, 1: NOISY, 2: CONSISTENT}[out["value"]][i]


def run_loop(tmp_path, favourite, gate):
    rows = [{"i": i} for i in range(10)]
    pipeline = Pipeline("gate", CompoundSystem([Pick()], inputs=("i",), outputs=("value", "i_out")),
                        Splits(rows, rows, rows), Metric("reward", reward))
    settings = LoopSettings(iterations=1, search_size=3, optimizer={"choice": {"temperature": 0.01}}, gate=gate)
    loop = OptimasLoop(pipeline, rows, rows, RunContext(ledger=RunLedger(1)), Prefers(favourite), settings,
                       RunFolder(tmp_path / f"{favourite}-{gate}"))
    return loop.run()


@pytest.mark.parametrize("favourite, gate, accepted", [(1, "strict", True), (1, "paired", False),
                                                       (2, "strict", True), (2, "paired", True)])
def test_the_loop_gates_and_records_each_decision(tmp_path, favourite, gate, accepted):
    config, history = run_loop(tmp_path, favourite, gate)
    entry = history[0]
    assert entry.accepted is accepted and config["pick"] == (favourite if accepted else 0)
    assert entry.gate["rule"] == gate and entry.gate["accepted"] is accepted
    assert entry.gate["delta"] == pytest.approx(0.05 if favourite == 1 else 0.1)
    assert entry.gate["ci_low"] <= entry.gate["delta"] <= entry.gate["ci_high"]


def test_the_run_start_logs_the_detectable_effect_and_warns_when_it_is_large(caplog):
    noisy = [0.0, 1.0] * 5
    with caplog.at_level(logging.INFO, logger="optimas"):
        effect = ValidationGate("paired").log_detectable(noisy)
    assert 0.1 < effect < 0.3  # z_0.9 * 0.5 / sqrt(10) = 0.20
    assert any(r.levelno == logging.WARNING and "distinguishable" in r.message for r in caplog.records)
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="optimas"):
        ValidationGate("paired").log_detectable([0.5, 0.51] * 200)
    assert not any(r.levelno == logging.WARNING for r in caplog.records)
