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
    RunFolder(tmp_path).save_accounts(before)

    after = RunContext(ledger=RunLedger(2), lm=LazyLM(OmegaConf.create({})))
    RunFolder(tmp_path).restore_accounts(after)
    assert after.ledger.equivalent_runs("lrf_collection") == pytest.approx(3.0)
    assert after.lm.usage() == saved_usage  # the LM is not built until the first call; its usage is kept


def test_a_fresh_folder_has_no_accounts_to_restore(tmp_path):
    ctx = RunContext(ledger=RunLedger(2))
    RunFolder(tmp_path).restore_accounts(ctx)
    assert ctx.ledger.equivalent_runs() == 0
