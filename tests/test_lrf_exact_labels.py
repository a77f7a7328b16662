"""lrf.collect.labels=exact: the pairs Monte Carlo labels, at the same cost, each ordered by the exact expected
reward of its candidates (exact ties dropped); only a pipeline that computes that reward takes it."""
from __future__ import annotations

import json
from collections import Counter

import pytest
from hydra import compose, initialize_config_dir

from optimas_cli.conf import CONF_DIR
from optimas_cli.errors import UserError
from optimas_cli.flows.validate import check_values
from optimas_cli.lrf.collect import COLLECTION_PHASE
from optimas_cli.lrf.stage import collect_initial_pairs
from optimas_cli.system import LRF_ROUTE, RunContext, RunLedger
from optimas_cli.system.run_folder import RunFolder
from optimas_pipelines.synthetic.exact import exact_given_output
from optimas_pipelines.synthetic.label_quality import COLLECT, label_agreement
from optimas_pipelines.synthetic.system import build
from optimas_pipelines.toys.hint import build as toy_hint


def collect(pipe, folder, labels: str):
    ctx = RunContext(ledger=RunLedger(len(pipe.system)), seed=0)
    pairs = collect_initial_pairs(pipe, pipe.system.default_config(), pipe.splits.train, ctx, RunFolder(folder),
                                  {"collect": {**COLLECT, "labels": labels}})
    return pairs, ctx.ledger, RunFolder(folder).read_json("collect_stats.json")


def unordered(pair) -> tuple:
    key = lambda d: json.dumps(d, sort_keys=True)  # noqa: E731
    return pair.component, key(pair.context), frozenset({key(pair.chosen), key(pair.rejected)})


def test_exact_labels_order_the_monte_carlo_pairs_by_the_exact_reward_at_the_same_cost(tmp_path):
    pipe = build(components=4, train_size=30)
    config = pipe.system.default_config()
    mc, mc_ledger, _ = collect(pipe, tmp_path / "mc", "mc")
    exact, exact_ledger, stats = collect(pipe, tmp_path / "exact", "exact")
    agreement = label_agreement(pipe.instance, config, mc)
    ties = sum(row["exact_ties"] for row in agreement.values())
    assert sum(row["pairs"] - row["exact_ties"] - row["agree"] for row in agreement.values()) > 0  # some to fix

    def truth(pair, output):
        return exact_given_output(pipe.instance, config, pair.component, pair.context, output)

    assert exact and all(truth(p, p.chosen) > truth(p, p.rejected) for p in exact)
    assert all(p.chosen_score == pytest.approx(truth(p, p.chosen)) for p in exact)
    # the same pairs, less the exact ties, at the same cost
    assert len(exact) == len(mc) - ties == len(mc) - sum(s.get("exact_ties", 0) for s in stats.values())
    assert not Counter(map(unordered, exact)) - Counter(map(unordered, mc))
    assert exact_ledger.equivalent_runs(COLLECTION_PHASE) == mc_ledger.equivalent_runs(COLLECTION_PHASE) > 0


def test_a_pipeline_without_an_exact_reward_refuses_exact_labels_in_one_line_before_collecting(tmp_path):
    pipe = toy_hint()
    ctx = RunContext(ledger=RunLedger(len(pipe.system)))
    with pytest.raises(UserError, match="lrf.collect.labels=exact needs a pipeline .* 'toy_hint' does not — use it "
                                        "with pipeline=synthetic") as refused:
        collect_initial_pairs(pipe, pipe.system.default_config(), pipe.splits.train, ctx, RunFolder(tmp_path),
                              {"collect": {"labels": "exact"}})
    assert "\n" not in str(refused.value)
    assert ctx.ledger.equivalent_runs() == 0 and not (tmp_path / "pairs.jsonl").exists()


def test_the_exact_order_reads_a_router_on_its_lrf_route_as_picking_optimally():
    pipe = build(components=3, kinds="route", options=4)
    first, router = (s.name for s in pipe.instance.components[:2])
    config = pipe.system.default_config()
    step = pipe.system.run(pipe.splits.train[:1], config, RunContext(ledger=RunLedger(3)))[0].steps[first]
    routed, best = config.to_dict() | {router: dict(LRF_ROUTE)}, config.to_dict() | {router: {"route": "best"}}
    with pytest.raises(ValueError, match="picks from a run's outputs"):  # what the hook spares Stage 2's labels
        exact_given_output(pipe.instance, routed, first, step["inputs"], step["outputs"])
    assert pipe.exact_output_reward(first, routed, step["inputs"], step["outputs"]) == pytest.approx(
        exact_given_output(pipe.instance, best, first, step["inputs"], step["outputs"]))


def test_the_config_takes_mc_or_exact_labels():
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        assert compose(config_name="config", overrides=["method=optimas"]).lrf.collect.labels == "mc"
        check_values(compose(config_name="config", overrides=["method=optimas", "lrf.collect.labels=exact"]))
        with pytest.raises(UserError, match="lrf.collect.labels"):
            check_values(compose(config_name="config", overrides=["method=optimas", "lrf.collect.labels=noisy"]))
