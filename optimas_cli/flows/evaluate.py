"""`optimas eval`: evaluate a saved configuration (e.g. <run>/best_config.json) on the test split."""
from __future__ import annotations

from omegaconf import DictConfig
from rich.console import Console

from optimas_cli.flows.run import ledger_summary, parse_failures, trace_sink
from optimas_cli.flows.setup import (
    budget_splits,
    build_budget,
    build_context,
    build_pipeline,
    resolved,
    seed_everything,
)
from optimas_cli.system import SystemConfig
from optimas_cli.system.evaluate import evaluate
from optimas_cli.system.run_folder import RunFolder


def evaluate_config(cfg: DictConfig, folder: RunFolder, console: Console) -> dict:
    seed_everything(int(cfg.seed))
    pipeline = build_pipeline(cfg)
    splits = budget_splits(pipeline, build_budget(cfg))
    ctx = build_context(cfg, pipeline, folder)
    config = SystemConfig.load(cfg.config_file) if cfg.config_file else pipeline.system.default_config()
    if cfg.lrf_dir:  # per-instance choices that route by the local reward need the trained model
        from optimas_cli.lrf.model import LocalRewardModel

        ctx = ctx.replace(lrf=LocalRewardModel.load(cfg.lrf_dir))
    console.print(f"[bold]{pipeline.name}[/] · evaluating {cfg.config_file or 'the initial configuration'}")
    with ctx.ledger.timed("test"):
        test = evaluate(pipeline, config, splits.test,
                        ctx.replace(phase="test", traces=trace_sink(folder, ctx.lrf)), int(cfg.repeats))
    results = {
        "pipeline": pipeline.name,
        "method": "eval",
        "metric": pipeline.metric.name,
        "test": test,
        "evaluated_config": config.to_dict(),
        "parse_failures": parse_failures(pipeline, ctx),
        "ledger": ledger_summary(ctx, cfg),
        "config": resolved(cfg),
    }
    folder.write_json("results.json", results)
    return results
