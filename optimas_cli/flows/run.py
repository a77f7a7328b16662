"""`optimas run`: build the pipeline, optimize it with the chosen method, evaluate, write results.json."""
from __future__ import annotations

import logging

from omegaconf import DictConfig
from rich.console import Console

from optimas_cli.flows.setup import (
    budget_splits,
    build_context,
    build_method,
    build_pipeline,
    resolved,
    seed_everything,
)
from optimas_cli.system.component import ConfigKind
from optimas_cli.system.parsing import PARSE_FAILURES
from optimas_cli.system.run_folder import RunFolder

log = logging.getLogger("optimas")


def run(cfg: DictConfig, folder: RunFolder, console: Console) -> dict:
    seed_everything(int(cfg.seed))
    pipeline = build_pipeline(cfg)
    splits = budget_splits(pipeline, cfg.budget)
    ctx = build_context(cfg, pipeline, folder)
    method = build_method(cfg)
    log.info("pipeline=%s method=%s splits=%s", pipeline.name, method.name, splits.sizes())
    console.print(f"[bold]{pipeline.name}[/] · method [bold]{method.name}[/] · splits {splits.sizes()}")

    with ctx.ledger.timed("optimize"):
        outcome = method.optimize(pipeline, splits, ctx.replace(phase="optimize"), folder)
    outcome.config.save(folder.file("best_config.json"))

    with ctx.ledger.timed("final_validation"):
        validation = method.evaluate(pipeline, outcome, splits.val, ctx.replace(phase="final_validation"), 1)
    with ctx.ledger.timed("test"):
        test = method.evaluate(pipeline, outcome, splits.test, ctx.replace(phase="test"), int(cfg.repeats))

    results = {
        "pipeline": pipeline.name,
        "method": method.name,
        "metric": pipeline.metric.name,
        "test": test,
        "validation": validation,
        "ledger": ledger_summary(ctx),
        "best_config": outcome.config.to_dict(),
        "history": outcome.history,
        "splits": splits.sizes(),
        "pipeline_info": pipeline.info,
        "parse_failures": parse_failures(pipeline, ctx),
        **outcome.extras,
        "config": resolved(cfg),
    }
    folder.write_json("results.json", results)
    return results


def parse_failures(pipeline, ctx) -> dict:
    """How often each LM component whose reply is parsed (the prompt kind) could not parse it, per phase."""
    parsed = [n for n, c in pipeline.system.components.items() if c.kind is ConfigKind.PROMPT]
    return ctx.ledger.event_rates(PARSE_FAILURES, parsed)


def ledger_summary(ctx) -> dict:
    """System runs (equivalent full runs per phase) and LM usage side by side."""
    system = ctx.ledger.to_dict()
    lm = ctx.lm.usage() if hasattr(ctx.lm, "usage") else {}
    totals = lm.get("total", {}) if lm else {}
    return {
        "runs": system["runs"],
        "calls": totals.get("calls", 0),
        "tokens": totals.get("tokens", 0),
        "cost": totals.get("cost", 0.0),
        "seconds": system["seconds"],
        "by_phase": system["by_phase"],
        "lm": lm,
    }
