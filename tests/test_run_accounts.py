"""A resumed run goes on counting: system runs, wall time and LM usage survive in accounts.json."""
from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from optimas_cli.flows.setup import LazyLM
from optimas_cli.lm.usage import ComponentUsage, UsageLedger
from optimas_cli.system import RunContext, RunLedger
from optimas_cli.system.run_folder import RunFolder


class CountingLM:
    def __init__(self, usage: dict):
        self._usage = usage

    def usage(self) -> dict:
        return self._usage


def test_usage_ledger_restore_adds_the_saved_counts():
    ledger = UsageLedger()
    ledger.record("answer", ComponentUsage(calls=3, cache_hits=1, prompt_tokens=40, completion_tokens=9, seconds=2.5))
    restored = UsageLedger()
    restored.restore(ledger.to_dict())
    restored.record("answer", ComponentUsage(calls=1, prompt_tokens=10))
    row = restored.to_dict()["by_component"]["answer"]
    assert (row["calls"], row["cache_hits"], row["tokens"], row["seconds"]) == (4, 1, 59, 2.5)


def test_run_folder_accounts_carry_runs_and_lm_usage_into_a_new_process(tmp_path):
    saved_usage = {"total": {}, "by_component": {"hint": {"calls": 7, "cache_hits": 0, "prompt_tokens": 700,
                                                          "completion_tokens": 70, "tokens": 770, "seconds": 9.0,
                                                          "cost": 0.0}}}
    before = RunContext(ledger=RunLedger(2), lm=CountingLM(saved_usage))
    before.ledger.record("hint", 6, "lrf_collection")
    RunFolder(tmp_path).checkpoint(before)

    after = RunContext(ledger=RunLedger(2), lm=LazyLM(OmegaConf.create({})))
    RunFolder(tmp_path).restore_accounts(after)
    assert after.ledger.equivalent_runs("lrf_collection") == pytest.approx(3.0)
    assert after.lm.usage() == saved_usage  # the LM is not built until the first call; its usage is kept


def test_a_fresh_folder_has_no_accounts_to_restore(tmp_path):
    ctx = RunContext(ledger=RunLedger(2))
    RunFolder(tmp_path).restore_accounts(ctx)
    assert ctx.ledger.equivalent_runs() == 0


def test_wall_time_a_killed_process_spent_past_its_checkpoint_is_counted(tmp_path):
    import json
    import os

    ctx = RunContext(ledger=RunLedger(2))
    RunFolder(tmp_path).checkpoint(ctx)
    saved_at = json.loads((tmp_path / "accounts.json").read_text())["saved_at"]
    log = tmp_path / "optimas.log"
    log.write_text("the killed process went on for 50 s after its checkpoint\n")
    os.utime(log, (saved_at + 50, saved_at + 50))
    resumed = RunContext(ledger=RunLedger(2))
    RunFolder(tmp_path).restore_accounts(resumed)
    assert resumed.ledger.to_dict()["by_phase"]["interrupted"]["seconds"] == pytest.approx(50, abs=0.01)
    assert resumed.ledger.elapsed() >= 50


def test_compute_is_charged_in_dollars_only_when_a_rate_is_set():
    from optimas_cli.flows.setup import run_costs

    ctx = RunContext(ledger=RunLedger(2), lm=CountingLM({"total": {"cost": 0.5, "unpriced": 2, "compute_seconds": 1800.0}}))
    ctx.ledger.compute["lrf_training"] = 1800.0
    unpriced = run_costs(ctx, OmegaConf.create({"compute": {"price_per_hour": None}}))
    assert (unpriced["usd"], unpriced["compute_seconds"], unpriced["compute_usd"]) == (0.5, 3600.0, None)
    assert unpriced["unpriced_calls"] == 2
    priced = run_costs(ctx, OmegaConf.create({"compute": {"price_per_hour": 2.0}}))
    assert (priced["usd"], priced["compute_usd"]) == (pytest.approx(2.5), pytest.approx(2.0))


def test_a_checkpoint_inside_a_timed_phase_keeps_its_seconds_for_the_resumed_process():
    """Issue 26 item 12: by_phase.optimize.seconds after a resume counted only the last process, since a
    phase's seconds were added when its block ended and the whole optimization is one block."""
    import time

    from optimas_cli.system import RunLedger

    first = RunLedger(2)
    with first.timed("optimize"), first.computing("lrf_training"):
        time.sleep(0.05)
        checkpoint = first.state()  # the process is killed here
    assert checkpoint["phase_seconds"]["optimize"] >= 0.05 and checkpoint["compute_seconds"]["lrf_training"] >= 0.05
    resumed = RunLedger(2)
    resumed.restore(checkpoint)
    with resumed.timed("optimize"):
        time.sleep(0.02)
    assert resumed.to_dict()["by_phase"]["optimize"]["seconds"] >= 0.07
