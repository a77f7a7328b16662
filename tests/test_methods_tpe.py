"""method=tpe: Optuna's TPE over coordinate ascent's candidates, trials on validation minibatches pruned by
successive halving, gated on full validation, capped exactly, seeded, resumable, listed by `optimas report`."""
from __future__ import annotations

import pytest

from optimas_cli.errors import UserError
from optimas_cli.methods.tpe import TPE
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
from optimas_cli.system.caps import BudgetCaps
from optimas_cli.system.evaluate import rewards
from optimas_cli.system.results_file import read_results
from optimas_cli.system.run_folder import RunFolder
from optimas_pipelines.synthetic import exact
from optimas_pipelines.synthetic.system import build
from optimas_pipelines.toys import model_selector
from tests.cli_runner import optimas
from tests.test_methods_toys import smoke_budget

QUALITY = {"q0": 0.1, "q1": 0.2, "q2": 0.3, "q3": 0.5, "q4": 0.35, "q5": 0.25, "q6": 1.0, "q7": 0.05}


class Pick(Component):
    def forward(self, inputs, value, ctx):
        return [{"quality": QUALITY[value]} for _ in inputs]


class Fixed(Component):
    def forward(self, inputs, value, ctx):
        return [{"quality": 0.5} for _ in inputs]


def one_choice(component: Component, n: int = 12) -> Pipeline:
    """One component before the metric, which is the quality it writes: q6 is best, q3 the start."""
    rows = [{"x": i} for i in range(n)]
    system = CompoundSystem([component], inputs=("x",), outputs=("quality",))
    return Pipeline("toy_pick", system, Splits(rows, rows, rows), Metric("quality", lambda ex, out: out["quality"]))


def synthetic(components: int = 4):
    return build(components=components, noise=0.0, coupling=0.5, input_types=1, instance=4, val_size=30)


def context(pipe, max_runs: float | None = None) -> RunContext:
    ctx = RunContext(ledger=RunLedger(len(pipe.system)))
    if max_runs is not None:
        ctx.caps = BudgetCaps(max_runs=max_runs, spent=lambda: {"max_runs": ctx.ledger.equivalent_runs()})
    return ctx


def run(pipe, folder, ctx=None, budget=None, **settings):
    ctx = ctx or context(pipe)
    method = TPE(budget or smoke_budget(), **{"seed": 0, **settings})
    outcome = method.optimize(pipe, pipe.splits, ctx, RunFolder(folder))
    return outcome, ctx


def test_tpe_finds_the_best_global_choice_of_the_model_selector_toy(tmp_path):
    """Global Y is right on 3 of the 6 queries, X (and the leaderboard route, which picks X) on 2."""
    pipe = model_selector.build()
    outcome, _ = run(pipe, tmp_path, minibatch_size=2, trials=5)
    info = outcome.extras["tpe"]
    assert outcome.config["model_selector"] == "Y" and info["ended"] == "every configuration scored"
    assert info["space_size"] == 3 and info["scored"] == 2  # the initial route is trial 0, X and Y the others
    accepted = [e for e in outcome.history if e.accepted]
    assert [(e.component, e.proposal, e.val_before, e.val_after) for e in accepted] == [
        (["model_selector"], {"model_selector": "Y"}, 2.0, 3.0)]


def test_successive_halving_prunes_trials_behind_the_best_and_they_cost_only_what_they_ran(tmp_path):
    pipe = one_choice(Pick("pick", "Picks a quality.", inputs=("x",), outputs=("quality",), kind=ConfigKind.CHOICE,
                           choices=tuple(QUALITY), default="q3"))
    outcome, ctx = run(pipe, tmp_path, minibatch_size=3, trials=20, startup_trials=3)
    assert outcome.config["pick"] == "q6"
    pruned = [e for e in outcome.history if e.val_candidate is None]
    assert pruned and all(e.details["examples_scored"] < 12 and "pruned" in e.note for e in pruned)
    assert all(QUALITY[e.proposal["pick"]] < 0.5 for e in pruned)  # each below the start at the first rung
    # executed: trial 0 and every trial's examples; charged by the paper: trial 0 and the accepted one in full
    assert ctx.ledger.equivalent_runs() == 12 + sum(e.details["examples_scored"] for e in outcome.history)
    assert ctx.ledger.paper_runs() == 12 + 12 * sum(e.accepted for e in outcome.history)


def test_the_run_cap_is_never_crossed_and_the_result_is_the_best_fully_validated_configuration(tmp_path):
    pipe = synthetic()
    free, _ = run(pipe, tmp_path / "free", trials=40)
    capped, ctx = run(pipe, tmp_path / "capped", ctx=context(pipe, max_runs=100.0), trials=40)
    spent = ctx.ledger.equivalent_runs()
    # stopped because the next minibatch (at most 5 of the 30 validation examples, a full run each) would cross it
    assert 100.0 - 5 < spent <= 100.0 and ctx.caps.stopped.cap == "max_runs"
    assert "max_runs" in capped.extras["tpe"]["ended"] and len(capped.history) < len(free.history)
    for outcome in (free, capped):
        full = sum(rewards(pipe, pipe.system.run(pipe.splits.val, outcome.config, context(pipe))))
        best = max([e.val_before for e in outcome.history] + [e.val_candidate for e in outcome.history
                                                              if e.val_candidate is not None])
        assert full == pytest.approx(best)


def test_a_matched_cost_run_searches_until_the_run_cap_and_ends_there_as_planned(tmp_path):
    pipe = synthetic()
    ctx = context(pipe, max_runs=100.0)
    outcome, _ = run(pipe, tmp_path, ctx=ctx, budget=smoke_budget(max_runs_from="optimas"))
    assert len(outcome.history) > smoke_budget().iterations  # not stopped by budget.iterations
    assert 100.0 - 5 < ctx.ledger.equivalent_runs() <= 100.0 and ctx.caps.stopped is None  # not a stop: exit 0


def test_the_same_seed_gives_the_same_history_and_another_seed_another(tmp_path):
    pipe = synthetic()
    histories = [[e.to_dict() for e in run(pipe, tmp_path / str(i), seed=seed, trials=12)[0].history]
                 for i, seed in enumerate((0, 0, 1))]
    assert histories[0] == histories[1] and histories[0] != histories[2]


def test_a_capped_run_resumes_where_its_checkpoint_left_it(tmp_path):
    pipe = synthetic()
    uninterrupted, whole = run(pipe, tmp_path / "whole", ctx=context(pipe, max_runs=150.0), trials=40)
    folder = tmp_path / "resumed"
    run(pipe, folder, ctx=context(pipe, max_runs=120.0), trials=40)
    resumed_ctx = context(pipe, max_runs=150.0)
    assert RunFolder(folder).restore_accounts(resumed_ctx) is not None
    resumed, ctx = run(pipe, folder, ctx=resumed_ctx, trials=40)
    assert resumed.extras["tpe"]["resumed_after_trial"] >= 2
    assert [e.to_dict() for e in resumed.history] == [e.to_dict() for e in uninterrupted.history]
    assert ctx.ledger.equivalent_runs() == whole.ledger.equivalent_runs() and resumed.config == uninterrupted.config


def test_a_pipeline_without_prompt_or_choice_components_is_refused_in_one_line(tmp_path):
    pipe = one_choice(Fixed("fixed", "Writes a fixed quality.", inputs=("x",), outputs=("quality",)))
    with pytest.raises(UserError, match="method tpe optimizes prompt and choice components") as error:
        run(pipe, tmp_path)
    assert "\n" not in str(error.value)


def test_a_small_synthetic_run_through_the_cli_reaches_the_optimum_and_the_report_lists_it(tmp_path):
    """The benchmark's settings (conf/experiment/synthetic_phase_map.yaml) at K = 3 with small splits."""
    out = tmp_path / "run"
    proc = optimas("run", "pipeline=synthetic", "pipeline.components=3", "pipeline.input_types=1",
                   "pipeline.noise=0.0", "seed=2", "method=tpe", "method.trials=30", "budget=synthetic",
                   "budget.train_size=2", "budget.val_size=20", "budget.test_size=50", "budget.max_runs=1000",
                   "proposer=pool", "repeats=1", f"hydra.run.dir={out}", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    results = read_results(out)
    assert results["method"] == "tpe" and results["ledger"]["by_phase"]["validation"]["runs"] <= 1000
    pipe = build(**results["pipeline_info"]["settings"], test_size=results["splits"]["test"])
    reached = exact.expected_score(pipe.instance, results["best_config"], pipe.splits.test)
    assert reached == pytest.approx(exact.optimum_score(pipe.instance, pipe.splits.test))
    report = optimas("report", str(out), "--out", str(tmp_path / "report"), cwd=tmp_path)
    assert report.returncode == 0, report.stderr[-2000:]
    assert "| TPE |" in (tmp_path / "report" / "report.md").read_text()


def test_the_config_builds_tpe_sized_by_the_budget_and_a_matched_run_ends_at_its_cap():
    from optimas_cli.flows.setup import build_budget, build_method
    from tests.test_methods_configs import build as build_method_named
    from tests.test_methods_configs import composed

    method = build_method_named("tpe")
    assert isinstance(method, TPE) and method.name == "tpe" and method.seed == 3
    assert method.trials == method.budget.iterations and not method.until_cap
    cfg = composed("method=tpe", "budget.max_runs_from=optimas")
    assert build_method(cfg, build_budget(cfg)).until_cap
    assert not TPE(smoke_budget(max_runs_from="optimas"), trials=4).until_cap  # an explicit count still bounds it
