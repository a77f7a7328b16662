"""`optimas collect` and `optimas train-lrf`: Stage 1 on its own, resumable inside a run folder.

`optimas collect pipeline=P` writes pairs.jsonl; `optimas train-lrf pipeline=P` collects what is
missing, trains the local reward model and reports its alignment (paper Table 4) under `lrf`.
Continue or build on an earlier folder with `resume=<folder>` (finished components are kept).
"""
from __future__ import annotations

from collections import Counter

from omegaconf import DictConfig, OmegaConf
from rich.console import Console

from optimas_cli.flows.run import ledger_summary
from optimas_cli.flows.setup import (
    budget_splits,
    build_budget,
    build_context,
    build_pipeline,
    resolved,
    seed_everything,
)
from optimas_cli.lrf.oracle import refuse_oracle
from optimas_cli.lrf.stage import collect_initial_pairs, make_buffer, train_initial_lrf
from optimas_cli.provenance import code_record
from optimas_cli.system.results_file import write_results
from optimas_cli.system.run_folder import RunFolder


def _prepare(cfg: DictConfig, folder: RunFolder, console: Console):
    refuse_oracle(str(cfg.task), cfg.lrf)
    seed_everything(int(cfg.seed))
    pipeline = build_pipeline(cfg)
    splits = budget_splits(pipeline, build_budget(cfg))
    ctx = build_context(cfg, pipeline, folder)
    lrf_cfg = OmegaConf.to_container(cfg.lrf, resolve=True)
    console.print(f"[bold]{pipeline.name}[/] · collecting preference pairs on {len(splits.train)} training inputs")
    pairs = collect_initial_pairs(pipeline, pipeline.system.default_config(), splits.train, ctx, folder, lrf_cfg, console)
    return pipeline, ctx, lrf_cfg, pairs


def _results(cfg, pipeline, ctx, pairs, task: str) -> dict:
    return {
        "pipeline": pipeline.name,
        "method": task,
        "metric": pipeline.metric.name,
        "pairs": dict(Counter(p.component for p in pairs)),
        "ledger": ledger_summary(ctx, cfg),
        "code": code_record(),
        "config": resolved(cfg),
    }


def collect(cfg: DictConfig, folder: RunFolder, console: Console) -> dict:
    pipeline, ctx, _, pairs = _prepare(cfg, folder, console)
    results = _results(cfg, pipeline, ctx, pairs, "collect")
    write_results(folder, results)
    return results


def train_lrf(cfg: DictConfig, folder: RunFolder, console: Console) -> dict:
    pipeline, ctx, lrf_cfg, pairs = _prepare(cfg, folder, console)
    console.print(f"training the local reward model on {len(pairs)} pairs")
    _, report = train_initial_lrf(pipeline, pairs, ctx, folder, lrf_cfg, make_buffer(lrf_cfg, int(cfg.seed)))
    for name, row in report["components"].items():
        if row["pairwise_accuracy"] is None:
            console.print(f"  {name:<24} n/a: {row.get('no_test', 'no test pairs')}")
            continue
        judge = "n/a" if row["judge_accuracy"] is None else f"{100 * row['judge_accuracy']:.1f}%"
        console.print(f"  {name:<24} LRF {100 * row['pairwise_accuracy']:.1f}% · judge {judge} · {row['n_pairs']} test pairs")
    results = {**_results(cfg, pipeline, ctx, pairs, "train-lrf"), "lrf": report}
    write_results(folder, results)
    return results
