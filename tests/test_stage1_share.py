"""Stage 1 sized by the run cap (lrf/sizing.py): it never spends more than lrf.collect.cap_share of budget.max_runs,
whatever the cap; without a cap it collects as before; one shared prefix serves every component's pairs."""
from __future__ import annotations

import pytest
from rich.console import Console

from optimas_cli.lrf.collect import COLLECTION_PHASE, collect_all, collect_pairs
from optimas_cli.lrf.stage import SIZE_FILE, collect_initial_pairs
from optimas_cli.system import RunContext, RunLedger
from optimas_cli.system.caps import BudgetCaps
from optimas_cli.system.run_folder import RunFolder
from optimas_pipelines.synthetic.system import build

COLLECT = {"num_candidates": 3, "mc_repeats": 2, "temperature": 0.9, "cap_share": 0.333}


def collected(tmp_path, cap, collect=COLLECT, components=10):
    pipeline = build(components=components, kinds="mix", options=4, instance=0, train_size=10)
    ctx = RunContext(ledger=RunLedger(len(pipeline.system)), temperature=0.7)  # downstream repeats can differ
    if cap is not None:
        ctx.caps = BudgetCaps(max_runs=cap, spent=lambda: {"max_runs": ctx.ledger.equivalent_runs()})
    folder = RunFolder(tmp_path)
    pairs = collect_initial_pairs(pipeline, pipeline.system.default_config(), pipeline.splits.train, ctx, folder,
                                  {"collect": collect}, Console(quiet=True))
    return pairs, ctx.ledger.equivalent_runs(COLLECTION_PHASE), folder.read_json(SIZE_FILE)


@pytest.mark.parametrize("cap", [20.0, 60.0, 150.0, 400.0, 5000.0])
def test_stage_1_never_spends_more_than_its_share_of_the_run_cap(tmp_path, cap):
    _, unsized, _ = collected(tmp_path / "free", None)
    pairs, spent, size = collected(tmp_path / "capped", cap)
    assert 0 < spent <= 0.333 * cap + 1e-9 and spent <= size["runs"] + 1e-9
    if 0.333 * cap >= unsized:  # room for all of it: collected as if there were no cap
        assert spent == pytest.approx(unsized) and size["inputs"] == 10
    else:  # inputs cut first, the candidates and repeats kept while one input fits
        assert size["inputs"] < 10 and pairs


def test_a_share_too_small_for_every_component_keeps_the_cheapest_collections_that_fit(tmp_path):
    pairs, spent, size = collected(tmp_path, 6.0)
    assert size["inputs"] == 1 and (size["num_candidates"], size["mc_repeats"]) == (2, 1)
    assert 0 < len(size["components"]) < 10 and spent <= 2.0
    assert {p.component for p in pairs} <= set(size["components"])


def test_without_a_run_cap_or_a_share_stage_1_collects_as_configured(tmp_path):
    _, free, size = collected(tmp_path / "free", None)
    _, unshared, unsized = collected(tmp_path / "null", 400.0, {**COLLECT, "cap_share": None})
    assert size is None and unsized is None and free == pytest.approx(unshared)


def test_one_shared_prefix_labels_the_same_pairs_as_a_prefix_per_component():
    """collect_all runs what every collection holds fixed once; each component's pairs are those it collects alone."""
    pipeline = build(components=6, shape="tree", kinds="mix", options=4, instance=2, train_size=6)
    system, config, rows = pipeline.system, pipeline.system.default_config(), pipeline.splits.train
    options = {k: v for k, v in COLLECT.items() if k != "cap_share"}
    shared = RunContext(ledger=RunLedger(len(system)), phase=COLLECTION_PHASE, temperature=0.7)
    together = collect_all(system, config, rows, shared, pipeline.metric, **options)
    alone = RunContext(ledger=RunLedger(len(system)), phase=COLLECTION_PHASE, temperature=0.7)
    for name, pairs in together.items():
        assert [p.to_dict() for p in pairs] == [p.to_dict() for p in collect_pairs(
            system, config, name, rows, alone, pipeline.metric, **options)]
    assert shared.ledger.equivalent_runs() < alone.ledger.equivalent_runs()


def test_the_plan_counts_stage_1_at_its_share_and_shows_the_split(tmp_path, monkeypatch):
    """`optimas plan` sizes Stage 1 as the collection does (the same runs, exactly here) and prints Stage 1 / loop /
    evaluation against the cap."""
    from optimas_cli.flows import lrf_tasks
    from optimas_cli.flows.plan import make_plan, render
    from tests.test_plan import _pipeline_and_splits, composed

    monkeypatch.chdir(tmp_path)
    cfg = composed("pipeline=synthetic", "pipeline.components=4", "task=collect", "budget=smoke", "lm.temperature=0.7",
                   "budget.max_runs=12")
    results = lrf_tasks.collect(cfg, RunFolder(tmp_path / "run"), Console(quiet=True))
    plan = make_plan(cfg, *_pipeline_and_splits(cfg))
    executed = results["ledger"]["by_phase"]["lrf_collection"]["runs"]
    assert plan["phases"]["lrf_collection"]["runs"] == pytest.approx(executed) and 0 < executed <= 0.333 * 12
    assert plan["split"]["stage1"] == pytest.approx(executed) and plan["stage1_size"]["limit"] == pytest.approx(3.996)
    assert "runs by part: Stage 1" in render(plan, "plan") and "run cap 12, Stage 1 sized to at most 3.996" in render(plan, "plan")
