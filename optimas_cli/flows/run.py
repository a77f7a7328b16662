"""`optimas run`: build the pipeline, optimize it with the chosen method, evaluate, write results.json."""
from __future__ import annotations

import logging

from omegaconf import DictConfig, OmegaConf
from rich.console import Console

from optimas_cli.flows.models import component_models, local_precision, models_line
from optimas_cli.flows.plan import make_plan
from optimas_cli.flows.setup import (
    budget_splits,
    build_budget,
    build_context,
    build_method,
    build_pipeline,
    resolved,
    run_costs,
    seed_everything,
)
from optimas_cli.lrf.routing import routing_accuracy
from optimas_cli.methods.base import Method, MethodOutcome
from optimas_cli.provenance import code_record
from optimas_cli.stats import mde_summary, paired_ci
from optimas_cli.system.caps import BudgetExhausted
from optimas_cli.system.component import ConfigKind
from optimas_cli.system.evaluate import evaluate
from optimas_cli.system.parsing import PARSE_FAILURES
from optimas_cli.system.results_file import write_results
from optimas_cli.system.run_folder import RunFolder
from optimas_cli.system.traces import PREDICTIONS, TraceSink

log = logging.getLogger("optimas")


def run(cfg: DictConfig, folder: RunFolder, console: Console) -> dict:
    seed_everything(int(cfg.seed))
    pipeline = build_pipeline(cfg)
    budget = build_budget(cfg)
    splits = budget_splits(pipeline, budget)
    ctx = build_context(cfg, pipeline, folder)
    plan = make_plan(cfg, pipeline, splits, run_dir=folder.path)  # before any work: earlier runs' measures
    method = build_method(cfg, budget, console)
    ctx.caps.on_warning = lambda message: console.print(f"[yellow]{message}[/]")  # the log has it too
    log.info("pipeline=%s method=%s splits=%s", pipeline.name, method.name, splits.sizes())
    console.print(f"[bold]{pipeline.name}[/] · method [bold]{method.name}[/] · splits {splits.sizes()}")
    models = component_models(pipeline, ctx.lm.model, method)
    if any(model.startswith("local/") for model in models.values()):
        models["local precision"] = local_precision(cfg.lm.get("local"))
    log.info("%s", models_line(models))
    console.print(models_line(models), markup=False)
    mde = {"validation": mde_summary(len(splits.val)), "test": mde_summary(len(splits.test))}
    console.print(mde_line(mde))
    log.info(mde_line(mde))

    try:
        with ctx.ledger.timed("optimize"):
            outcome = method.optimize(pipeline, splits, ctx.replace(phase="optimize"), folder)
    except BudgetExhausted:  # stopped before the method had a configuration of its own (e.g. in Stage 1)
        outcome = MethodOutcome(config=pipeline.system.default_config())
    stop = ctx.caps.stopped if ctx.caps is not None else None
    outcome.config.save(folder.file("best_config.json"))

    results = {"pipeline": pipeline.name, "method": method.name, "metric": pipeline.metric.name,
               "proposer": method.prompt_proposer(pipeline, ctx)}
    if stop is not None:
        console.print(f"[yellow]{stop}: stopped; continue with a raised cap: optimas run ... resume={folder}[/]")
        results["stopped"] = stop.cap
    if stop is not None and stop.forbids_test:
        results["test_skipped"] = f"{stop}; the test evaluation would spend more: resume with a raised cap to evaluate"
        console.print(f"[yellow]{results['test_skipped']}[/]")
    else:
        ectx = ctx.replace(traces=trace_sink(folder, outcome.lrf, cfg))
        with ctx.ledger.timed("final_validation"):
            results["validation"] = method.evaluate(pipeline, outcome, splits.val,
                                                    ectx.replace(phase="final_validation"), 1)
        with ctx.ledger.timed("test"):
            results["test"] = method.evaluate(pipeline, outcome, splits.test, ectx.replace(phase="test"),
                                              int(cfg.repeats))
        results.update(before_and_after(pipeline, method, outcome, results["test"], splits.test, ectx,
                                        int(cfg.repeats)))
        if (routing := routing_accuracy(pipeline, outcome.config, splits.test, outcome.lrf, ctx.lm)) is not None:
            results["routing"] = routing  # the simulator's routers against their exact per-input best
        if "test_initial" in results:  # the same MDE at the measured spread of the paired gains
            gains = [b - a for a, b in zip(results["test_initial"]["per_example"], results["test"]["per_example"],
                                           strict=True)]
            mde["test"] = mde_summary(len(splits.test), gains)
    results["mde"] = mde
    results.update({
        "ledger": ledger_summary(ctx, cfg),
        "plan": plan,
        "best_config": outcome.config.to_dict(),
        "history": [entry.to_dict() for entry in outcome.history],
        "splits": splits.sizes(),
        "pipeline_info": pipeline.info,
        "models": models,  # what each LM component calls (ledger.lm.by_model: the calls it made, per model)
        "parse_failures": parse_failures(pipeline, ctx),
        **outcome.extras,
        "code": code_record(),
        "config": resolved(cfg),
    })
    write_results(folder, results)
    return results


def before_and_after(pipeline, method, outcome, test: dict, examples, ctx, repeats: int) -> dict:
    """The initial configuration on the same test examples, and the paired gain over it with its 95% CI:
    what the run changed, with its evidence. Free when nothing changed; with a greedy LM the calls of
    the components the run left alone are cache hits."""
    if method.name == "unoptimized":
        return {}
    if (outcome.lrf is None and type(method).evaluate is Method.evaluate
            and outcome.config.to_dict() == pipeline.system.default_config().to_dict()):
        initial = test
    else:
        with ctx.ledger.timed("test_initial"):
            initial = evaluate(pipeline, pipeline.system.default_config(), examples,
                               ctx.replace(phase="test_initial", lrf=None), repeats)
    gain = paired_ci(initial["per_example"], test["per_example"])
    return {"test_initial": initial,
            "test_gain": {"delta": gain.estimate, "ci_low": gain.low, "ci_high": gain.high, "level": 0.95}}


def mde_line(mde: dict) -> str:
    """The smallest mean gain each split can detect (80% power, two-sided alpha 0.05), worst case in [0, 1]."""
    parts = [f"{split} n={m['n']}: {m['mde_worst_case']:.3f}" for split, m in mde.items()]
    return "smallest detectable effect (80% power, alpha 0.05, worst case for a [0, 1] metric): " + ", ".join(parts)


def parse_failures(pipeline, ctx) -> dict:
    """How often each LM component whose reply is parsed (the prompt kind) could not parse it, per phase."""
    parsed = [n for n, c in pipeline.system.components.items() if c.kind is ConfigKind.PROMPT]
    return ctx.ledger.event_rates(PARSE_FAILURES, parsed)


def trace_sink(folder: RunFolder, lrf, cfg) -> TraceSink:
    """predictions.jsonl.gz for this run; a trained local reward model adds r_k to every step (blame in
    `optimas show`) unless lrf.score_traces is off (one LRF forward pass per distinct step)."""
    from optimas_cli.lrf.model import LocalRewardModel

    scores = isinstance(lrf, LocalRewardModel) and OmegaConf.select(cfg, "lrf.score_traces", default=True)
    return TraceSink(folder.file(PREDICTIONS), reward_model=lrf if scores else None)


def ledger_summary(ctx, cfg=None) -> dict:
    """System runs (equivalent full runs per phase, executed and as the paper counts them), LM usage,
    dollars and compute side by side."""
    system = ctx.ledger.to_dict()
    lm = ctx.lm.usage() if hasattr(ctx.lm, "usage") else {}
    totals = lm.get("total", {}) if lm else {}
    costs = run_costs(ctx, cfg)
    return {
        "runs": system["runs"],
        "paper_runs": system["paper_runs"],
        "calls": totals.get("calls", 0),
        "tokens": totals.get("tokens", 0),
        "cost": totals.get("cost", 0.0),
        # dollars: priced API calls plus compute at compute.price_per_hour (null when no rate is set)
        "usd": round(costs["usd"], 6),
        "unpriced_calls": costs["unpriced_calls"],  # their cost is unknown, not counted as $0
        "compute_seconds": costs["compute_seconds"],
        "compute_usd": costs["compute_usd"],
        "compute_by_kind": costs["compute_by_kind"],
        "seconds": system["seconds"],
        "peak_rss_mib": system["peak_rss_mib"],  # the process's peak RSS when results.json was written
        "by_phase": system["by_phase"],
        "lm": lm,
        "caps": ctx.caps.limits() if ctx.caps is not None else {},
    }
