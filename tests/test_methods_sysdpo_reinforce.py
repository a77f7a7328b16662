"""SysDPO and REINFORCE end to end on the two-model chain with the tiny model: in process, and through `optimas run`."""
from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import pytest

from optimas_cli.methods.reinforce import Reinforce
from optimas_cli.methods.sysdpo import SysDPO
from optimas_cli.system import Metric, RunContext, RunLedger, Splits
from optimas_cli.system.results_file import read_results
from optimas_cli.system.run_folder import RunFolder
from optimas_pipelines.collab_chain import build
from tests.test_cli import optimas
from tests.test_methods_toys import smoke_budget

ROOT = Path(__file__).resolve().parent.parent
DATA = Path(os.environ.get("OPTIMAS_DATA_DIR") or ROOT.parent / "shared" / "data")
pytestmark = pytest.mark.skipif(not (DATA / "pubmedqa").exists(), reason="needs the shared data folder")


# The random tiny model never writes yes/no, so the tests reward behaviours its gibberish shows only
# sometimes: saying anything at all (its DBS candidates are often one empty answer, where the end of
# turn came first, and one not), and, for samples at temperature 1, a short answer.
ANSWERED = Metric("answered", lambda ex, out: float(bool(out["answer"])))
SHORT = Metric("short", lambda ex, out: float(len(out["answer"]) <= 8))


def chain_with_an_observable_reward(tiny_model, metric: Metric):
    """The real chain on PubMedQA rows (abstracts cut to fit the tiny model's 512 positions), scored by `metric`."""
    pipeline = build(data_dir=DATA, base_model=tiny_model, reader_max_tokens=6, answerer_max_tokens=6)
    pipeline = dataclasses.replace(pipeline, metric=metric)
    s = pipeline.splits
    short = [[dict(x, context=x["context"][:300]) for x in split] for split in (s.train[:3], s.val[:2], s.test[:2])]
    return pipeline, Splits(*short)


def optimize(method, metric, tiny_model, tiny_lm, tmp_path):
    pipeline, splits = chain_with_an_observable_reward(tiny_model, metric)
    ctx = RunContext(ledger=RunLedger(len(pipeline.system)), lm=tiny_lm)
    outcome = method.optimize(pipeline, splits, ctx.replace(phase="optimize"), RunFolder(tmp_path))
    assert len(outcome.history) == 2
    updated = [e for e in outcome.history if e.details["updated"]]
    assert updated, outcome.history  # the toy reward separates some rollouts
    for entry in updated:
        assert entry.val_candidate is not None
        for node in ("evidence_reader", "answerer"):
            assert (tmp_path / f"adapters/iteration-{entry.iteration}/{node}/adapter_config.json").is_file()
    return outcome, ctx.ledger.to_dict()["by_phase"]


@pytest.mark.parametrize("variant", ["sampling", "direct"])
def test_sysdpo_trains_both_nodes_from_dbs_preference_pairs(variant, tiny_model, tiny_lm, tmp_path):
    method = SysDPO(smoke_budget(iterations=2, search_size=3), variant=variant, k=2, steps=2, batch_size=4,
                    learning_rate=1e-3)
    outcome, phases = optimize(method, ANSWERED, tiny_model, tiny_lm, tmp_path)
    # k = 2 at each node: per input 2 reader outputs and 4 answers, every one counted as a node execution.
    # The sampling estimator re-scores answers under the other reader output without running anything.
    assert phases["local_optimization"]["component_executions"] == {"evidence_reader": 12, "answerer": 24}
    updated = [e.details for e in outcome.history if e.details["updated"]]
    assert len(updated) == 2  # both iterations found pairs
    entry = updated[0]
    assert entry["pairs"] > 0 and entry["margin_after"] > entry["margin_before"]
    # One AdamW for the whole run: its step count goes on from one iteration to the next.
    assert [e["optimizer_steps"] for e in updated] == [2 * (i + 1) for i in range(len(updated))]
    info = outcome.extras["sysdpo"]
    assert (info["variant"], info["final_output_node"], info["sampling"]) == (variant, "answerer", "dbs")
    rates = outcome.extras["sysdpo"]["distinct_candidate_rate"]  # distinct texts / texts drawn, per node
    assert set(rates) == {"evidence_reader", "answerer"} and all(0.5 <= r <= 1.0 for r in rates.values())


def test_reinforce_trains_both_nodes_from_global_rewards(tiny_model, tiny_lm, tmp_path):
    method = Reinforce(smoke_budget(iterations=2, search_size=3), rollouts=4, learning_rate=1e-3)
    outcome, phases = optimize(method, SHORT, tiny_model, tiny_lm, tmp_path)
    assert phases["local_optimization"]["component_executions"] == {"evidence_reader": 24, "answerer": 24}
    assert all(e.details["rollouts"] == 12 for e in outcome.history)


def test_a_matched_cost_run_trains_until_the_run_cap_not_its_iterations(tiny_model, tiny_lm, tmp_path):
    """budget.iterations=1, but matched (budget.max_runs_from): REINFORCE iterates until the cap, as the loop
    methods, DSPy and TextGrad do (SysDPO and REINFORCE on Amazon had stopped after 3 of Optimas' 617 runs'
    worth of iterations), and stops at the first iteration start past it."""
    from io import StringIO

    from rich.console import Console

    from optimas_cli.system.caps import BudgetCaps

    pipeline, splits = chain_with_an_observable_reward(tiny_model, SHORT)
    ctx = RunContext(ledger=RunLedger(len(pipeline.system)), lm=tiny_lm)
    ctx.caps = BudgetCaps(max_runs=20.0, spent=lambda: {"max_runs": ctx.ledger.equivalent_runs()})
    console = Console(file=StringIO(), width=200)
    method = Reinforce(smoke_budget(iterations=1, search_size=3, max_runs_from="optimas"), rollouts=2,
                       learning_rate=1e-3, console=console)
    outcome = method.optimize(pipeline, splits, ctx.replace(phase="optimize"), RunFolder(tmp_path))
    assert "until the matched cap of 20 executed runs" in console.file.getvalue()
    assert len(outcome.history) > 1
    assert outcome.history[-2].runs_so_far < 20.0 <= ctx.ledger.equivalent_runs()
    assert ctx.caps.stopped is None  # the matched cap is the planned end, not a stop (SysDPO s0 ended "stopped")


def test_sysdpo_needs_two_candidates_per_node():
    from optimas_cli.errors import UserError

    with pytest.raises(UserError, match="no preference pair.*cancel between the preferred and the rejected"):
        SysDPO(smoke_budget(), k=1)
    with pytest.raises(UserError, match="unknown method.variant='joint'"):
        SysDPO(smoke_budget(), variant="joint")
    with pytest.raises(UserError, match="unknown sampling"):
        SysDPO(smoke_budget(), sampling="nucleus")


@pytest.mark.parametrize("method, extra", [("sysdpo", ["method.sampling=temperature"]), ("reinforce", [])])
def test_methods_run_through_the_cli(method, extra, tiny_model_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(ROOT))  # this checkout's code, whichever one the venv installed
    out = tmp_path / "run"
    model = f"local/{tiny_model_dir}"
    proc = optimas(
        "run", "pipeline=collab_chain", f"method={method}", "budget=smoke", "budget.iterations=1",
        "budget.search_size=2", "budget.val_size=2", "budget.test_size=2", "repeats=1", f"pipeline.base_model={model}",
        f"lm.model={model}", f"lm.cache_dir={tmp_path / 'cache'}", "pipeline.reader_max_tokens=4",
        "pipeline.answerer_max_tokens=4", f"data_dir={DATA}", f"hydra.run.dir={out}", *extra, cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = read_results(out)
    assert results["method"] == method and results["test"]["n"] == 2
    assert len(results["history"]) == 1 and results["ledger"]["by_phase"]["local_optimization"]["runs"] > 0


def test_a_killed_run_resumes_after_its_last_iteration_as_if_never_stopped(tiny_model, tiny_lm, tmp_path):
    """A run stopped after iteration 1 and started again in its folder goes on from its checkpoint (adapters,
    AdamW moments, history, accounts) and ends where an uninterrupted run ends, byte for byte; before the
    checkpoint a resume trained every iteration again (SysDPO s0 on Amazon: 4 iterations, ~50 min redone)."""
    from io import StringIO

    from rich.console import Console

    from optimas_cli.flows.setup import seed_everything

    pipeline, splits = chain_with_an_observable_reward(tiny_model, SHORT)

    def run(iterations: int, folder: Path, console=None):
        seed_everything(0)  # as each `optimas run` process starts: fresh LoRAs draw from torch's seeded generator
        ctx = RunContext(ledger=RunLedger(len(pipeline.system)), lm=tiny_lm)
        RunFolder(folder).restore_accounts(ctx)  # as `optimas run ... resume=<folder>` builds its context
        method = Reinforce(smoke_budget(iterations=iterations, search_size=3), rollouts=2, learning_rate=1e-3,
                           console=console)
        return method.optimize(pipeline, splits, ctx.replace(phase="optimize"), RunFolder(folder)), ctx

    whole, whole_ctx = run(2, tmp_path / "whole")
    run(1, tmp_path / "killed")
    console = Console(file=StringIO(), width=200)
    resumed, resumed_ctx = run(2, tmp_path / "killed", console)
    assert "resumed after iteration 1" in console.file.getvalue()

    def comparable(history):
        return [(e.iteration, e.val_candidate, e.accepted, e.runs_so_far, e.details) for e in history]

    assert all(e.details["updated"] for e in whole.history)  # both iterations trained: the optimizer state matters
    assert comparable(resumed.history) == comparable(whole.history)
    assert resumed_ctx.ledger.equivalent_runs() == whole_ctx.ledger.equivalent_runs()
    for node in ("evidence_reader", "answerer"):
        weights = [(folder / f"adapters/iteration-2/{node}/adapter_model.safetensors").read_bytes()
                   for folder in (tmp_path / "whole", tmp_path / "killed")]
        assert weights[0] == weights[1]
