"""`optimas plan`'s time calibration against the committed ledgers it was calibrated on: the constants are what
the Amazon budget=cpu ledger says, and the plans of `make run` and of that Amazon run (no earlier run under
./outputs) are within 30% of their measured wall times on the same revision (479aff9, 2 idle CPU cores)."""
from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from optimas_cli.conf import CONF_DIR
from optimas_cli.flows.plan import CALIBRATION, make_plan
from optimas_cli.flows.setup import budget_splits, build_budget, build_pipeline

ROOT = Path(__file__).resolve().parents[1]
AMAZON = ROOT / "docs" / "results" / "speed" / "runs" / "amazon-optimas-s0-479aff9"
DATA = Path(os.environ.get("OPTIMAS_DATA_DIR") or ROOT.parent / "shared" / "data")
MAKE_RUN_SECONDS = 6 * 60 + 3  # docs/results/speed/README.md: `make run` at 479aff9, "6 min 3 s wall"


def _amazon_ledger() -> dict:
    return json.loads((AMAZON / "results.json").read_text())["ledger"]


def test_the_calibration_is_what_the_amazon_ledger_measured():
    ledger, by_component = _amazon_ledger(), _amazon_ledger()["lm"]["by_component"]
    judge, tool = by_component["lrf_judge"], by_component["next_item_decider.optimizer"]
    assert CALIBRATION["seconds_per_judge_call"] == pytest.approx(judge["seconds"] / judge["calls"], rel=0.02)
    assert CALIBRATION["seconds_per_tool_call"] == pytest.approx(tool["seconds"] / tool["calls"], rel=0.02)
    stats = json.loads((AMAZON / "collect_stats.json").read_text())
    pairs = sum(s["pairs"] for s in stats.values())
    considered = sum(s["pairs"] + s["near_ties"] + s["identical_outputs"] for s in stats.values())
    assert CALIBRATION["pair_share"] == pytest.approx(pairs / considered, abs=0.001)
    # the call line at the generated calls' mean max_tokens gives the ledger's seconds per generated call
    phases, lm = ledger["by_phase"], ledger["lm"]["by_phase"]
    timed = ("lrf_collection", "validation", "test", "test_initial")
    per_call = sum(phases[p]["seconds"] for p in timed) / sum(lm[p]["calls"] - lm[p]["cache_hits"] for p in timed)
    max_tokens = {"session_analyzer": 128, "candidate_profiler": 192, "next_item_decider": 32}  # amazon/system.py
    generated = {n: by_component[n]["calls"] - by_component[n]["cache_hits"] for n in max_tokens}
    mean_max = sum(generated[n] * max_tokens[n] for n in max_tokens) / sum(generated.values())
    line = CALIBRATION["call_seconds"] + CALIBRATION["call_seconds_per_max_token"] * mean_max
    assert line == pytest.approx(per_call, rel=0.02)


def _planned_seconds(tmp_path, monkeypatch, *overrides: str) -> float:
    monkeypatch.chdir(tmp_path)  # no earlier run under ./outputs: the calibration, not a measurement
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose("config", overrides=[*overrides, f"data_dir={DATA}"])
    pipeline = build_pipeline(cfg)
    plan = make_plan(cfg, pipeline, budget_splits(pipeline, build_budget(cfg)))
    assert plan["measured_from"] is None and all(r["seconds_from"] == "calibrated" for r in plan["phases"].values())
    return plan["total"]["seconds"]


@pytest.mark.skipif(not (DATA / "hotpotqa").is_dir(), reason="HotpotQA data not available (OPTIMAS_DATA_DIR)")
def test_the_plan_of_make_run_is_within_30_percent_of_its_measured_wall(tmp_path, monkeypatch):
    planned = _planned_seconds(tmp_path, monkeypatch, "pipeline=hotpotqa")
    assert abs(planned / MAKE_RUN_SECONDS - 1) <= 0.30, planned


@pytest.mark.skipif(not (DATA / "amazon").is_dir(), reason="Amazon data not available (OPTIMAS_DATA_DIR)")
def test_the_plan_of_the_amazon_cpu_run_is_within_30_percent_of_its_measured_wall(tmp_path, monkeypatch):
    elapsed = re.search(r"Elapsed \(wall clock\) time.*: (\d+):(\d+\.\d+)", (AMAZON / "time-v.txt").read_text())
    measured = int(elapsed[1]) * 60 + float(elapsed[2])
    planned = _planned_seconds(tmp_path, monkeypatch, "pipeline=amazon", "budget=cpu")
    assert abs(planned / measured - 1) <= 0.30, (planned, measured)
