"""`optimas plan` predicts the equivalent system runs of the executed run, phase by phase (issue 16).

The toys are deterministic, so the plan's runs must equal the ledger's exactly; tokens and time are
estimates here (no earlier run in the test's folder) and only have to be stated as such.
"""
from __future__ import annotations

import pytest
from hydra import compose, initialize_config_dir
from rich.console import Console

from optimas_cli.conf import CONF_DIR
from optimas_cli.flows.plan import make_plan, price_per_token, render
from optimas_cli.flows.run import run
from optimas_cli.system.run_folder import RunFolder
from tests.test_lrf_tiny_backbone import build_tiny_bert


@pytest.fixture(scope="module")
def tiny_backbone(tmp_path_factory):
    return build_tiny_bert(tmp_path_factory.mktemp("tiny_bert"))


def composed(*overrides: str):
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return compose("config", overrides=list(overrides))


def runs_by_phase(ledger: dict) -> dict[str, float]:
    return {p: row["runs"] for p, row in ledger["by_phase"].items() if row["runs"]}


# The model selector's pairs differ only in a one-letter model name, which the tiny random backbone
# cannot tell apart: its gate rejects, against the plan's assumption. tests/test_toys_optimas.py checks
# that toy's plan with the real MiniLM.
@pytest.mark.parametrize("pipeline, method", [
    ("toy_retriever", "optimas"), ("toy_hint", "optimas"),
    ("toy_retriever", "unoptimized"), ("toy_hint", "unoptimized"), ("toy_model_selector", "unoptimized"),
])
def test_plan_predicts_the_runs_of_a_toy_exactly(tmp_path, monkeypatch, tiny_backbone, pipeline, method):
    monkeypatch.chdir(tmp_path)  # no earlier run under ./outputs: the plan states its estimates
    cfg = composed(f"pipeline={pipeline}", f"method={method}", "budget=smoke", f"lrf.backbone={tiny_backbone}",
                   "lrf.max_length=96", "lrf.judge.enabled=false")
    results = run(cfg, RunFolder(tmp_path / "run"), Console(quiet=True))
    plan = results["plan"]
    assert {p: row["runs"] for p, row in plan["phases"].items() if row["runs"]} == runs_by_phase(results["ledger"])
    assert plan["total"]["runs"] == results["ledger"]["runs"]
    assert plan["total"]["calls"] == results["ledger"]["calls"] == 0  # the toys call no LM (judge off)
    assert plan["measured_from"] is None and plan["estimates"]
    if method == "optimas":
        assert plan["accepted_updates"] == sum(h["accepted"] for h in results["history"]) == 1


def test_plan_measures_from_an_earlier_run_of_the_pipeline(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cfg = composed("pipeline=toy_retriever", "method=unoptimized", "budget=smoke")
    first = run(cfg, RunFolder(tmp_path / "outputs" / "day" / "first"), Console(quiet=True))
    from optimas_cli.flows.setup import budget_splits, build_budget, build_pipeline

    pipeline = build_pipeline(cfg)
    again = make_plan(cfg, pipeline, budget_splits(pipeline, build_budget(cfg)))
    assert again["measured_from"].endswith("first")
    assert again["phases"]["test"]["seconds_from"] == "measured"
    measured = first["ledger"]["by_phase"]["test"]
    assert again["phases"]["test"]["seconds"] == pytest.approx(measured["seconds"], abs=0.1)


def test_api_models_are_priced_from_litellms_cost_map_and_unknown_ones_are_unpriced():
    import litellm

    entry = litellm.model_cost["gpt-4o-mini"]
    assert price_per_token({"model": "gpt-4o-mini"})[:2] == (entry["input_cost_per_token"], entry["output_cost_per_token"])
    assert price_per_token({"model": "hosted_vllm/my-own-model"}) is None
    assert price_per_token({"model": "x", "price": {"input_per_mtok": 1.0, "output_per_mtok": 4.0}})[:2] == (1e-6, 4e-6)


def test_plan_prints_dollars_for_an_api_model_without_calling_it(tmp_path, monkeypatch):
    """lm=openai: no key, no network; the plan only reads the cost map."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    cfg = composed("pipeline=toy_retriever", "method=optimas", "budget=smoke", "lm=openai")
    from optimas_cli.flows.plan import plan_run

    text = plan_run(cfg)
    assert "litellm cost map" in text and "unpriced" not in text
    assert text.splitlines()[1].split()[:2] == ["phase", "runs"]
    assert "assumes the first proposal for each component is accepted" in render(
        make_plan(cfg, *_pipeline_and_splits(cfg)), "t")


def _pipeline_and_splits(cfg):
    from optimas_cli.flows.setup import budget_splits, build_budget, build_pipeline

    pipeline = build_pipeline(cfg)
    return pipeline, budget_splits(pipeline, build_budget(cfg))


def test_plan_command_prints_the_plan_and_writes_nothing(tmp_path):
    from tests.test_cli_bad_values import optimas

    proc = optimas("plan", "pipeline=toy_retriever", "budget=smoke", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    total = next(line for line in proc.stdout.splitlines() if line.startswith("total"))
    assert total.split()[1] == "74.00"  # the executed run's 74 equivalent runs (the test above checks every phase)
    assert list(tmp_path.iterdir()) == []  # a plan is not a run: no run folder, no outputs/
    refused = optimas("plan", "pipeline=toy_retriever", "repeats=0", cwd=tmp_path)
    assert refused.returncode == 2 and "repeats must be at least 1" in refused.stderr


def test_plan_refuses_what_run_refuses_and_does_not_loop_per_iteration(capsys):
    """Issue 26 item 10: plan and run share their checks (a scheduler run would reject after Stage 1,
    a method setting the method refuses); the loop's arithmetic is closed-form, so 10^12 iterations
    plan at once (1e6 took 12 s, 1e12 never ended)."""
    import time

    from optimas_cli.cli import main

    for bad, expected in [("method.scheduler=bogus", "unknown scheduler 'bogus'"),
                          ("method.stage2_pool=x", "method.stage2_pool='x' is not allowed — method.stage2_pool takes one of train | beyond_train"),
                          ("seed=abc", "seed='abc' is not an integer")]:
        assert main(["plan", "pipeline=toy_hint", "method=optimas", bad]) == 2
        assert expected in capsys.readouterr().err
    started = time.time()
    assert main(["plan", "pipeline=toy_hint", "method=optimas", "budget.iterations=1e12"]) == 0
    assert time.time() - started < 30
    assert "accepted updates 1.00" in capsys.readouterr().out  # one component: its first pick, once


@pytest.mark.parametrize("scheduler", ["uniform", "round_robin"])
@pytest.mark.parametrize("m, iterations", [(1, 0), (1, 5), (3, 2), (3, 40), (4, 4)])
def test_first_picks_closed_form_is_the_per_iteration_sum(scheduler, m, iterations):
    from optimas_cli.methods.cost import first_picks as _first_picks

    def first(t):  # the chance that iteration t picks a given component for the first time, times m
        return (1.0 if t < m else 0.0) if scheduler == "round_robin" else (1 - 1 / m) ** t

    assert _first_picks(iterations, m, scheduler) == pytest.approx(sum(first(t) for t in range(iterations)))


@pytest.mark.parametrize("task", ["collect", "train-lrf"])
def test_plan_of_an_lrf_task_is_stage_one_alone_and_predicts_its_runs(tmp_path, monkeypatch, tiny_backbone, task):
    """`optimas plan task=train-lrf` planned a whole `optimas run` (its loop and test), so a Table 4 run
    could not be planned; now it is collection (train-lrf: plus training and the judge), as executed."""
    from optimas_cli.flows import lrf_tasks

    monkeypatch.chdir(tmp_path)
    cfg = composed("pipeline=toy_retriever", f"task={task}", "budget=smoke", f"lrf.backbone={tiny_backbone}",
                   "lrf.max_length=96", "lrf.judge.enabled=false")
    results = getattr(lrf_tasks, task.replace("-", "_"))(cfg, RunFolder(tmp_path / "run"), Console(quiet=True))
    plan = make_plan(cfg, *_pipeline_and_splits(cfg))
    assert {p: row["runs"] for p, row in plan["phases"].items() if row["runs"]} == runs_by_phase(results["ledger"])
    assert set(plan["phases"]) == ({"lrf_collection"} if task == "collect" else {"lrf_collection", "lrf_training"})
    assert "accepted_updates" not in plan and plan["pairs"] > 0
    text = render(plan, "t")
    assert "expected preference pairs" in text and "accepted updates" not in text


def test_plan_expects_the_pairs_an_earlier_collection_found_not_every_candidate_pair(tmp_path, monkeypatch):
    """On Amazon 308 of 369 candidate pairs tied downstream; planning every pair as a preference put the
    judge of a Table 4 run at 2.9 h (840 calls) instead of ~30 min. Without an earlier run, the calibration
    run's share."""
    import json

    from optimas_cli.flows.plan import CALIBRATION

    monkeypatch.chdir(tmp_path)
    cfg = composed("pipeline=toy_retriever", "task=train-lrf", "budget=smoke")
    every = make_plan(cfg, *_pipeline_and_splits(cfg))
    assert every["pair_share"] == CALIBRATION["pair_share"] and "in the calibration run" in render(every, "t")
    earlier = tmp_path / "outputs" / "day" / "earlier"
    earlier.mkdir(parents=True)
    (earlier / "results.json").write_text(json.dumps({"pipeline": "toy_retriever", "method": "optimas",
                                                      "ledger": {"by_phase": {}}}))
    (earlier / "collect_stats.json").write_text(json.dumps({
        "retriever": {"pairs": 3, "near_ties": 9, "identical_outputs": 0},
        "other": {"pairs": 1, "near_ties": 2, "identical_outputs": 1}}))  # 4 of 16
    measured = make_plan(cfg, *_pipeline_and_splits(cfg))
    assert measured["pair_share"] == 0.25
    assert measured["pairs"] == pytest.approx(every["pairs"] / CALIBRATION["pair_share"] / 4)
    assert "25.0% of candidate pairs" in render(measured, "t")


def test_plan_times_lrf_training_per_pair_an_earlier_run_trained(tmp_path, monkeypatch):
    """The earlier run's LRF training seconds were planned as they were, whatever the pairs: a Table 4
    run with 405 pairs was planned at 2.7 min (the Optimas run's 61 pairs) and trained 18."""
    import json

    monkeypatch.chdir(tmp_path)
    cfg = composed("pipeline=toy_retriever", "task=train-lrf", "budget=smoke")
    earlier = tmp_path / "outputs" / "day" / "earlier"
    earlier.mkdir(parents=True)
    (earlier / "results.json").write_text(json.dumps({"pipeline": "toy_retriever", "method": "optimas",
                                                      "ledger": {"by_phase": {"lrf_training": {"runs": 0,
                                                                                               "seconds": 120.0}}}}))
    (earlier / "collect_stats.json").write_text(json.dumps({"retriever": {"pairs": 4, "near_ties": 12,
                                                                          "identical_outputs": 0}}))
    plan = make_plan(cfg, *_pipeline_and_splits(cfg))
    assert plan["pairs"] > 0 and plan["phases"]["lrf_training"]["seconds_from"] == "measured"
    assert plan["phases"]["lrf_training"]["seconds"] == pytest.approx(round(plan["pairs"] * 30.0, 1))


@pytest.mark.parametrize("lm, batched", [("local", True), ("openai", False)])
def test_plan_times_a_collection_with_more_candidates_per_input_on_the_embedded_model(tmp_path, monkeypatch, lm, batched):
    """Collection seconds per run came from a 3-candidate run whatever the candidates: Amazon's
    8-candidate Stage 1 was planned at 2.2 h and took 47 min, since the embedded model generates an
    input's candidates in one batch. An API model's calls are not batched: per run, as before."""
    import json

    monkeypatch.chdir(tmp_path)
    cfg = composed("pipeline=amazon", f"lm={lm}", "task=collect", "budget=cpu", "lrf.collect.num_candidates=8")
    earlier = tmp_path / "outputs" / "day" / "earlier"
    earlier.mkdir(parents=True)
    (earlier / "results.json").write_text(json.dumps({
        "pipeline": "amazon", "method": "optimas",
        "config": {"lm": {"temperature": 0.0}, "lrf": {"collect": {"num_candidates": 3, "mc_repeats": 2,
                                                                    "temperature": 0.9}}},
        # 3 candidates on 50 inputs: 350 runs, less the analyzer's second prefix run that the shared prefix saves
        "ledger": {"by_phase": {"lrf_collection": {"runs": 350.0 - 50 / 3, "seconds": 3300.0}}}}))
    plan = make_plan(cfg, *_pipeline_and_splits(cfg))
    row = plan["phases"]["lrf_collection"]
    runs = 850.0 - 50 / 3  # the analyzer runs once for both later components' prefixes (lrf/collect.shared_prefix)
    assert row["runs"] == pytest.approx(runs, abs=1e-3) and row["seconds_from"] == "measured"
    assert row["seconds"] == pytest.approx(3300.0 if batched else runs * 3300.0 / (350 - 50 / 3), rel=1e-3)
    assert ("collection timed per input" in render(plan, "t")) is batched


SYNTHETIC = ("pipeline=synthetic", "pipeline.components=3", "proposer=pool", "budget=smoke")  # a chain of 3, no LM


def test_lazy_adaptation_is_planned_as_an_upper_bound_that_the_run_stays_under(tmp_path, monkeypatch, tiny_backbone):
    """method.adaptation=lazy (the default) refreshes at most the picked component's r_k per iteration, on
    budget.fresh_size inputs; what the gate accepts decides how many happen, so the plan gives the bound and says
    so. It planned paper's adaptation of every r_k after each acceptance instead (here 117 runs, not 60)."""
    monkeypatch.chdir(tmp_path)
    cfg = composed(*SYNTHETIC, "budget.iterations=6", "method.scheduler=round_robin", "repeats=1",
                   f"lrf.backbone={tiny_backbone}", "lrf.max_length=96", "lrf.judge.enabled=false")
    results = run(cfg, RunFolder(tmp_path / "run"), Console(quiet=True))
    plan, executed = results["plan"], results["ledger"]["by_phase"]
    refreshed = [h["details"]["adaptation"] for h in results["history"] if "adaptation" in h.get("details", {})]
    assert refreshed and all(len(a["components"]) == 1 for a in refreshed)  # lazy ran, one r_k at a time
    for phase in ("adaptation", "validation", "search_sample"):  # the routes a refresh moves are re-run too
        assert executed[phase]["runs"] <= plan["phases"][phase]["runs"] + 1e-9
    text = render(plan, "t")
    assert "adaptation is an upper bound (method.adaptation=lazy): at most 5.00 refreshes" in text  # iterations 2..6
    assert "on 3 fresh inputs (budget.fresh_size)" in text


def test_lazy_plans_at_most_papers_adaptation_and_none_plans_none():
    def planned(*overrides: str) -> dict:
        cfg = composed(*SYNTHETIC, *overrides)
        return make_plan(cfg, *_pipeline_and_splits(cfg))

    lazy, paper = planned("method.adaptation=lazy"), planned("method.adaptation=paper")
    # two iterations: lazy refreshes one r_k at most, paper adapts all three after an acceptance
    assert 0 < lazy["phases"]["adaptation"]["runs"] < paper["phases"]["adaptation"]["runs"]
    assert "adaptation_bound" in lazy and "adaptation_bound" not in paper
    assert "upper bound" not in render(paper, "t")
    for none in (planned("method.adaptation=none"), planned("method=optimas_no_adapt")):
        assert "adaptation" not in none["phases"] and "adaptation_bound" not in none
        assert none["phases"]["local_optimization"] == paper["phases"]["local_optimization"]  # the same loop


def test_lazy_plans_no_refresh_for_a_component_nothing_can_make_stale():
    """A toy's one optimizable choice: only its own updates could change what its pairs were drawn under, and
    those never make them stale (the run's adaptation is 0, which test_plan_predicts_the_runs_of_a_toy_exactly
    checks exactly)."""
    cfg = composed("pipeline=toy_retriever", "method=optimas", "budget=smoke", "budget.iterations=50")
    plan = make_plan(cfg, *_pipeline_and_splits(cfg))
    assert "adaptation" not in plan["phases"] and "adaptation_bound" not in plan


@pytest.mark.parametrize("scheduler", ["uniform", "round_robin"])
def test_lazy_refreshes_are_the_picks_after_the_first_iteration(scheduler):
    from optimas_cli.methods.cost import lazy_refreshes as _lazy_refreshes

    cfg = composed(*SYNTHETIC)
    system = _pipeline_and_splits(cfg)[0].system
    names = list(system.order)
    refreshes = _lazy_refreshes(system, names, 8, scheduler)
    assert sum(refreshes.values()) == pytest.approx(7)  # one per iteration after the first
    if scheduler == "round_robin":  # iterations 2..8 pick 1, 2, 0, 1, 2, 0, 1
        assert refreshes == {names[0]: 2.0, names[1]: 3.0, names[2]: 2.0}
    assert _lazy_refreshes(system, names, 1, scheduler) == {}


def test_the_oracle_plans_no_collection_training_judge_or_adaptation(tmp_path, monkeypatch):
    """lrf=oracle: the exact local reward, with no Stage 1 or Stage 2; the plan counted both."""
    from optimas_cli.errors import UserError

    monkeypatch.chdir(tmp_path)
    cfg = composed(*SYNTHETIC, "lrf=oracle", "repeats=1")
    results = run(cfg, RunFolder(tmp_path / "run"), Console(quiet=True))
    plan = results["plan"]
    stages = {"lrf_collection", "lrf_training", "lrf_judge", "adaptation"}
    assert not stages & set(plan["phases"]) and set(runs_by_phase(results["ledger"])) <= set(plan["phases"])
    assert plan["phases"]["local_optimization"]["runs"] > 0 and "pairs" not in plan
    text = render(plan, "t")
    assert "accepted updates" in text and "preference pairs" not in text and "upper bound" not in text
    with pytest.raises(UserError, match="lrf=oracle needs a pipeline with an exact model"):  # as the run refuses
        toy = composed("pipeline=toy_retriever", "method=optimas", "budget=smoke", "lrf=oracle")
        make_plan(toy, *_pipeline_and_splits(toy))


@pytest.mark.parametrize("task", ["collect", "train-lrf"])
def test_an_lrf_task_refuses_the_oracle_in_one_line(tmp_path, capsys, task):
    """There is nothing to collect or train for the exact reward: `optimas collect|train-lrf lrf=oracle` and their
    plans refuse (they collected and trained a MiniLM as if lrf=minilm)."""
    from optimas_cli.cli import main
    from tests.cli_runner import optimas

    proc = optimas(task, *SYNTHETIC, "lrf=oracle", cwd=tmp_path)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert f"optimas {task} has nothing to do with lrf=oracle" in proc.stderr
    assert not list(tmp_path.rglob("pairs.jsonl"))
    assert main(["plan", f"task={task}", *SYNTHETIC, "lrf=oracle"]) == 2
    assert "has nothing to do with lrf=oracle" in capsys.readouterr().err


def test_plan_counts_the_choice_values_stage_one_draws(tmp_path, monkeypatch):
    """lrf.collect.choices=sample draws num_candidates of a choice's values per input, enumerate every one:
    the plan counts what the collection executes (lrf/collect.expected_collection), exactly here."""
    from optimas_cli.flows import lrf_tasks

    monkeypatch.chdir(tmp_path)
    planned = {}
    for choices in ("sample", "enumerate"):
        cfg = composed("pipeline=synthetic", "pipeline.components=3", "pipeline.kinds=choice", "pipeline.options=8",
                       "task=collect", "budget=smoke", f"lrf.collect.choices={choices}")
        results = lrf_tasks.collect(cfg, RunFolder(tmp_path / choices), Console(quiet=True))
        planned[choices] = make_plan(cfg, *_pipeline_and_splits(cfg))["phases"]["lrf_collection"]["runs"]
        assert planned[choices] == results["ledger"]["by_phase"]["lrf_collection"]["runs"]
    assert planned["sample"] < planned["enumerate"]  # 3 of the 8 values per input, not all 8
