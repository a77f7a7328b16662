"""Matched cost (budget.max_runs_from): every other method's run cap is what the reference method's run of
the same pipeline, seed and budget in the sweep spent optimizing (optimas_cli/flows/matched.py)."""
from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf
from rich.console import Console

from optimas_cli.errors import UserError
from optimas_cli.flows.matched import matched_max_runs
from optimas_cli.flows.setup import build_context, build_pipeline
from optimas_cli.system.run_folder import RunFolder
from tests.test_methods_toys import ROOT


def composed(*overrides: str):
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        return compose("config", overrides=list(overrides))


def reference(sweep: Path, name: str, cfg, *, method: str = "optimas", seed: int | None = None, **budget) -> Path:
    """A finished reference run: 80 runs in all, 30 of them final validation and test, so 50 optimizing."""
    config = OmegaConf.to_container(cfg, resolve=True)
    config["seed"] = cfg.seed if seed is None else seed
    config["budget"].update(budget)
    ledger = {"runs": 80.0, "by_phase": {"final_validation": {"runs": 5.0}, "test": {"runs": 15.0},
                                         "test_initial": {"runs": 10.0}, "validation": {"runs": 20.0},
                                         "optimize": {"runs": 0.0, "seconds": 600.0}}}
    folder = sweep / name
    folder.mkdir(parents=True)
    (folder / "results.json").write_text(json.dumps({"pipeline": "toy_hint", "method": method, "config": config,
                                                     "ledger": ledger}))
    return folder


def matched(cfg, sweep: Path, job: str = "1-toy_hint-dspy"):
    return matched_max_runs(cfg, "toy_hint", sweep / job)


def test_a_method_gets_what_the_reference_spent_optimizing(tmp_path):
    cfg = composed("pipeline=toy_hint", "method=dspy", "budget.max_runs_from=optimas")
    reference(tmp_path, "0-toy_hint-optimas", cfg)
    reference(tmp_path, "2-toy_hint-optimas", cfg, seed=1)          # another seed's
    reference(tmp_path, "3-toy_hint-optimas", cfg, train_size=99)   # another budget's
    reference(tmp_path, "4-toy_hint-hbc", cfg, method="hbc")        # another method's
    assert matched(cfg, tmp_path) == 50.0  # 80 minus final validation, test and test_initial
    # the reference method itself runs uncapped, and without max_runs_from nothing is matched
    assert matched(composed("pipeline=toy_hint", "method=optimas", "budget.max_runs_from=optimas"), tmp_path) is None
    assert matched(composed("pipeline=toy_hint", "method=dspy"), tmp_path) is None


def test_a_missing_or_ambiguous_reference_is_one_clear_error(tmp_path):
    cfg = composed("pipeline=toy_hint", "method=dspy", "budget.max_runs_from=optimas")
    with pytest.raises(UserError, match="no finished optimas run of pipeline toy_hint, seed 0") as err:
        matched(cfg, tmp_path)
    assert "list optimas first" in str(err.value)
    reference(tmp_path, "0-toy_hint-optimas", cfg)
    reference(tmp_path, "5-toy_hint-optimas", cfg)
    with pytest.raises(UserError, match="2 optimas runs of pipeline toy_hint"):
        matched(cfg, tmp_path)
    both = composed("pipeline=toy_hint", "method=dspy", "budget.max_runs_from=optimas", "budget.max_runs=10")
    with pytest.raises(UserError, match="both set the run cap"):
        matched(both, tmp_path)


def test_the_run_context_gets_the_matched_cap(tmp_path):
    cfg = composed("pipeline=toy_hint", "method=global_reward", "budget.max_runs_from=optimas")
    reference(tmp_path, "0-toy_hint-optimas", cfg)
    ctx = build_context(cfg, build_pipeline(cfg), RunFolder(tmp_path / "1-toy_hint-global_reward"))
    assert ctx.caps.limits() == {"max_runs": 50.0}


def test_the_plan_of_a_matched_run_spends_the_cap_it_will_find(tmp_path, monkeypatch):
    """`optimas plan` names the cap the run will take (the reference's 50 optimization runs, timed as the
    reference's optimization) instead of planning `iterations`, or says how to let it look the cap up."""
    from optimas_cli.flows.plan import MATCHED_PHASE, make_plan, render
    from optimas_cli.flows.setup import budget_splits, build_budget

    monkeypatch.chdir(tmp_path)
    cfg = composed("pipeline=toy_hint", "method=optimas_no_adapt", "budget.max_runs_from=optimas")
    pipeline = build_pipeline(cfg)
    splits = budget_splits(pipeline, build_budget(cfg))
    unknown = make_plan(cfg, pipeline, splits)
    assert MATCHED_PHASE not in unknown["phases"] and "give hydra.run.dir" in unknown["not_planned"]
    assert "accepted_updates" not in unknown and not unknown["phases"].get("validation")  # no iterations planned
    missing = make_plan(cfg, pipeline, splits, run_dir=tmp_path / "1-toy_hint-optimas_no_adapt")
    assert "no cap yet" in missing["not_planned"] and "no finished optimas run" in missing["not_planned"]
    reference(tmp_path, "0-toy_hint-optimas", cfg)
    plan = make_plan(cfg, pipeline, splits, run_dir=tmp_path / "1-toy_hint-optimas_no_adapt")
    row = plan["phases"][MATCHED_PHASE]
    assert (row["runs"], row["seconds"]) == (50.0, 600.0)
    assert plan["total"]["runs"] == 50.0 + sum(r["runs"] for p, r in plan["phases"].items() if p != MATCHED_PHASE)
    assert "50 executed runs" in render(plan, "t")


def test_the_matched_experiment_runs_each_pipelines_optimas_before_its_other_methods():
    from tests.test_sweeps import sweep_jobs

    jobs, cfg = sweep_jobs("table3_matched")  # in the order Hydra's basic sweeper launches them
    assert cfg.budget.max_runs_from == "optimas" and cfg.budget.max_runs is None and cfg.budget.name == "small"
    for pipeline in {j["pipeline"] for j in jobs}:
        methods = [j["method"] for j in jobs if j["pipeline"] == pipeline]
        assert methods[0] == "optimas" and {"dspy", "textgrad", "hbc"} <= set(methods)


def test_a_matched_loop_baseline_spends_up_to_the_cap_not_its_iterations(tmp_path):
    """budget.iterations=2 alone stops global_reward after 2 iterations; matched, the cap ends the loop, and
    that is the run's planned end (no `stopped`), as DSPy's trials and TextGrad's steps are sized from it."""
    from optimas_cli.methods.global_reward import GlobalReward
    from optimas_cli.system import RunContext
    from optimas_cli.system.caps import BudgetCaps
    from optimas_cli.system.ledger import RunLedger
    from optimas_pipelines.toys import retriever
    from tests.test_methods_toys import smoke_budget

    def optimized(budget, cap, folder):
        pipeline = retriever.build()
        ctx = RunContext(ledger=RunLedger(len(pipeline.system)))
        ctx.caps = BudgetCaps(max_runs=cap, spent=lambda: {"max_runs": ctx.ledger.equivalent_runs()})
        console = Console(file=io.StringIO(), width=200)
        method = GlobalReward(budget=budget, seed=0, console=console)
        outcome = method.optimize(pipeline, pipeline.splits, ctx, RunFolder(folder))
        return outcome, ctx, console.file.getvalue()

    plain, plain_ctx, plain_printed = optimized(smoke_budget(iterations=2), 80.0, tmp_path / "plain")
    matched_, ctx, printed = optimized(smoke_budget(iterations=2, max_runs_from="optimas"), 80.0, tmp_path / "matched")
    assert len(plain.history) == 2
    # the terminal says what ends the loop: its iterations, or the matched cap
    assert "2 iterations" in plain_printed and "until the matched cap of 80 executed runs" in printed
    assert len(matched_.history) > 2 and ctx.caps.stopped is None
    # an iteration starts only when its expected local scoring and validation pass fit under the cap
    assert plain_ctx.ledger.equivalent_runs() < ctx.ledger.equivalent_runs() <= 80.0


def test_a_matched_loop_stops_before_a_local_search_whose_proposal_it_could_not_validate(tmp_path):
    """Global reward's local scoring spends system runs. Once the cap leaves no room for a proposal's local
    search and validation pass, the loop ends before that search: nothing is spent after the last checkpointed
    iteration (global reward s0, s1 and s2 on Amazon spent 40, 18.7 and 64 runs on searches they could not
    validate, and s1 ended 5.7 over its cap)."""
    from optimas_cli.methods.global_reward import GlobalReward
    from optimas_cli.system import RunContext
    from optimas_cli.system.caps import BudgetCaps
    from optimas_cli.system.ledger import RunLedger
    from optimas_pipelines.toys import retriever
    from tests.test_methods_toys import smoke_budget

    pipeline = retriever.build()
    ctx = RunContext(ledger=RunLedger(len(pipeline.system)))
    ctx.caps = BudgetCaps(max_runs=80.0, spent=lambda: {"max_runs": ctx.ledger.equivalent_runs()})
    method = GlobalReward(budget=smoke_budget(iterations=2, max_runs_from="optimas"), seed=0,
                          console=Console(file=io.StringIO(), width=200))
    outcome = method.optimize(pipeline, pipeline.splits, ctx, RunFolder(tmp_path))
    assert len(outcome.history) > 2 and ctx.caps.stopped is None
    assert ctx.ledger.equivalent_runs() == pytest.approx(outcome.history[-1].runs_so_far, abs=0.01)
    # a search is expected to cost what the component's costliest earlier search did: the cap holds
    assert all(e.details["local_runs"] > 0 for e in outcome.history) and ctx.ledger.equivalent_runs() <= 80.0


def test_a_first_local_search_is_expected_to_cost_what_a_search_of_its_kind_did():
    """Before a component's first search, the least a search of the same configuration kind spent is the
    estimate (random reward s0 on Amazon: the analyzer's first GRPO search cost the 21.3 runs each profiler
    search had, then its validation did not fit under the cap); afterwards its own costliest search is."""
    from optimas_cli.optim.history import HistoryEntry
    from optimas_cli.optim.loop import local_spend_seen

    def searched(name: str, kind: str, runs: float) -> HistoryEntry:
        entry = HistoryEntry(iteration=1, component=name, val_before=8, val_after=8, accepted=False,
                             runs_so_far=0.0, kind=kind)
        entry.details["local_runs"] = runs
        return entry

    history = [searched("profiler", "weights", 21.3), searched("profiler", "weights", 25.0),
               searched("decider", "prompt", 16.0)]
    assert local_spend_seen(history, "analyzer", "weights") == 21.3
    assert local_spend_seen(history + [searched("analyzer", "weights", 30.0)], "analyzer", "weights") == 30.0
    assert local_spend_seen(history, "decider", "prompt") == 16.0
    assert local_spend_seen(history, "router", "choice") == 0.0


def test_the_plan_times_a_matched_run_at_its_own_methods_measured_pace(tmp_path, monkeypatch):
    """A method whose work besides system runs dwarfs the reference's (TextGrad on Amazon: 10 LM calls of up
    to 512 tokens per 3 runs, 8.4 h where the plan said 2.1 h) is timed by an earlier run of itself, a
    stopped one's checkpoint included, once one measured it. (Here tpe on a toy: TextGrad needs a prompt component,
    and `optimas plan` refuses it on a pipeline without one.)"""
    from optimas_cli.flows.plan import MATCHED_PHASE, make_plan
    from optimas_cli.flows.setup import budget_splits, build_budget

    monkeypatch.chdir(tmp_path)
    cfg = composed("pipeline=toy_hint", "method=tpe", "budget.max_runs_from=optimas")
    pipeline = build_pipeline(cfg)
    splits = budget_splits(pipeline, build_budget(cfg))
    reference(tmp_path, "0-toy_hint-optimas", cfg)  # 50 runs optimizing in 600 s

    def stopped_run(name: str, method_cfg, seconds: float, runs_per_component: int) -> None:
        folder = tmp_path / "outputs" / "day" / name
        folder.mkdir(parents=True)
        OmegaConf.save(method_cfg, folder / "config.yaml")
        ledger = {"num_components": 2, "executions": {"local_optimization": {"asker": runs_per_component,
                                                                             "answerer": runs_per_component}},
                  "charged": {}, "pairs": {}, "events": {}, "phase_seconds": {"optimize": seconds},
                  "compute_seconds": {}, "elapsed": seconds}
        (folder / "accounts.json").write_text(json.dumps({"ledger": ledger, "lm": {}, "saved_at": 0.0}))

    stopped_run("coordinate_ascent", composed("pipeline=toy_hint", "method=coordinate_ascent"), 100.0, 20)  # another's
    plan = make_plan(cfg, pipeline, splits, run_dir=tmp_path / "1-toy_hint-tpe")
    assert plan["phases"][MATCHED_PHASE]["seconds"] == 600.0 and "timed as the optimas run's" in plan["not_planned"]
    stopped_run("tpe", composed("pipeline=toy_hint", "method=tpe"), 400.0, 20)  # 20 runs in 400 s
    plan = make_plan(cfg, pipeline, splits, run_dir=tmp_path / "1-toy_hint-tpe")
    row = plan["phases"][MATCHED_PHASE]
    assert (row["runs"], row["seconds"]) == (50.0, 1000.0) and "an earlier tpe run" in row["seconds_from"]
