"""`optimas headroom`: is there anything to optimize here, and where? Scored on validation, never test.

The initial system, the single LLM and every single change of the search space, each on the same
validation examples: each shipped alternative instruction and format edit of each prompt component
(optim/prompt_pool.py's drafts from the initial instruction), each other value of each choice component
(a model, retriever k, ...) and a per-instance choice's heuristic route. Each change re-runs only the
changed component and what is downstream of it (CompoundSystem.run_changed). Every score has its 95%
CI and every change its paired delta against the initial system; the largest delta is the ceiling of
one-change improvements. What it will spend is printed first, by `optimas plan`'s arithmetic.

Not enumerated, and said so in the output: LoRA weights (an adapter must be trained before it can be
scored), the pool's worked-example edit and the LRF route (both need a trained local reward).
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf
from rich.console import Console
from rich.table import Table

from optimas_cli.flows.earlier_runs import previous_run
from optimas_cli.flows.plan import phase_row, price_per_token, render, totals
from optimas_cli.flows.run import ledger_summary
from optimas_cli.flows.setup import (
    budget_splits,
    build_budget,
    build_context,
    build_pipeline,
    seed_everything,
)
from optimas_cli.methods.base import MethodOutcome
from optimas_cli.methods.cost import PhaseCount, rerun_counts
from optimas_cli.methods.single_llm import SingleLLM
from optimas_cli.optim.prompt_pool import pool_drafts
from optimas_cli.progress import phase
from optimas_cli.stats import mde_summary, mean_ci, paired_ci
from optimas_cli.system import Pipeline
from optimas_cli.system.component import HEURISTIC_ROUTE, Component, ConfigKind, route_of
from optimas_cli.system.evaluate import rewards
from optimas_cli.system.run_folder import RunFolder

INITIAL, SINGLE, CHANGES = "headroom_initial", "headroom_single_llm", "headroom_changes"
NOT_ENUMERATED = {
    ConfigKind.WEIGHTS: "LoRA weights: an adapter must be trained before it can be scored",
    ConfigKind.NONE: "nothing to configure",
}


@dataclass(frozen=True)
class Change:
    component: str
    label: str  # what the change is, e.g. "alternative 2", "constrain", "value 10", "route heuristic"
    value: Any


def single_changes(pipeline: Pipeline) -> list[Change]:
    """Every configuration one edit away from the initial one, in the pipeline's component order."""
    system, out = pipeline.system, []
    for name in system.order:
        comp = system.components[name]
        if comp.kind is ConfigKind.PROMPT:
            seen = {" ".join(str(comp.default).split())}
            counts: dict[str, int] = {}
            for draft in pool_drafts(comp, str(comp.default), None):
                if " ".join(draft.text.split()) in seen:
                    continue
                seen.add(" ".join(draft.text.split()))
                counts[draft.source] = counts.get(draft.source, 0) + 1
                label = f"{draft.source} {counts[draft.source]}" if draft.source == "alternative" else draft.source
                out.append(Change(name, label, draft.text))
        elif comp.kind is ConfigKind.CHOICE:
            out += [Change(name, f"value {v}", v) for v in comp.candidate_values() if v != comp.default]
            if comp.per_instance and route_of(comp.default) != "heuristic" and _has_heuristic(comp):
                out.append(Change(name, "route heuristic", dict(HEURISTIC_ROUTE)))
    return out


def _has_heuristic(comp: Component) -> bool:
    return type(comp).heuristic_score is not Component.heuristic_score


def not_enumerated(pipeline: Pipeline) -> dict[str, str]:
    notes = {name: NOT_ENUMERATED[c.kind] for name, c in pipeline.system.components.items() if c.kind in NOT_ENUMERATED}
    for name, c in pipeline.system.components.items():
        if c.kind is ConfigKind.PROMPT:
            notes[name] = "the worked-example edit needs a trained local reward (not scored)"
        elif c.kind is ConfigKind.CHOICE and c.per_instance:
            notes[name] = "the LRF route needs a trained local reward (not scored)"
    return notes


# -- what it will spend ---------------------------------------------------------------------------
def headroom_plan(cfg: DictConfig, pipeline: Pipeline, n_val: int, changes: list[Change], root: Path = Path(".")) -> dict:
    """The scan's runs, calls, tokens, dollars and seconds per phase, counted by `optimas plan`'s arithmetic;
    seconds per run from an earlier run's validation phases of this pipeline (else the plan's estimates)."""
    system, lm = pipeline.system, OmegaConf.to_container(cfg.lm, resolve=True)
    config = system.default_config()
    counts = {INITIAL: PhaseCount(), SINGLE: PhaseCount(), CHANGES: PhaseCount()}
    for name in system.order:
        counts[INITIAL].run(system.components[name], n_val, system.components[name].values_per_input(config[name]))
    if pipeline.single_llm is not None:  # one call per example, counted as one system run
        counts[SINGLE].executions["single_llm"] += n_val * len(system)
        counts[SINGLE].calls["single_llm"] += n_val
    for change in changes:
        rerun_counts(system, change.component, n_val, config.replace(change.component, change.value), counts[CHANGES])
    earlier = previous_run(pipeline.name, "unoptimized", root)
    measured = earlier[1] if earlier else None
    price = price_per_token(lm)
    timed_as = {INITIAL: "final_validation", SINGLE: "test", CHANGES: "validation"}
    rows = {phase: row for phase, count in counts.items()
            if (row := phase_row(phase, count, system, lm, {}, measured, price, timed_as[phase])) is not None}
    return {**totals(rows, price), "model": lm.get("model"),
            "price": None if price is None else {"input_per_token": price[0], "output_per_token": price[1],
                                                 "source": price[2]},
            "measured_from": str(earlier[0]) if earlier else None,
            "estimates": {} if earlier else {"note": "the plan's per-call estimates"},
            "assumptions": ["every component runs on every input (no `when` skips)"]}


# -- the scan -------------------------------------------------------------------------------------
def _scored(values: list[float]) -> dict:
    ci = mean_ci(values)
    return {"mean": ci.estimate, "ci_low": ci.low, "ci_high": ci.high, "per_example": values}


def _vs_initial(initial: list[float], values: list[float]) -> dict:
    gain = paired_ci(initial, values)
    return {"delta": gain.estimate, "ci_low": gain.low, "ci_high": gain.high, "excludes_zero": gain.excludes_zero}


def scan(cfg: DictConfig, console: Console, root: Path = Path("outputs"), dry_run: bool = False) -> dict:
    """Print the plan, then (unless `dry_run`) score everything and write headroom.json and headroom.md
    into a new folder outputs/<date>/<time>-<pipeline>-headroom."""
    seed_everything(int(cfg.seed))
    pipeline = build_pipeline(cfg)
    splits = budget_splits(pipeline, build_budget(cfg))
    val, system = splits.val, pipeline.system
    changes = single_changes(pipeline)
    plan = headroom_plan(cfg, pipeline, len(val), changes)
    console.print(render(plan, f"headroom plan: {pipeline.name} · {len(val)} validation examples · "
                               f"{len(changes)} single changes (+ initial, single LLM)"))
    mde = mde_summary(len(val))
    console.print(f"validation n={len(val)}: smallest effect detectable at 80% power, alpha 0.05: "
                  f"{mde['mde_worst_case']:.3f} (worst case for a [0, 1] metric)")
    if dry_run:
        return {"plan": plan, "changes": len(changes)}

    folder = headroom_folder(pipeline.name, root)
    OmegaConf.save(cfg, folder.file("config.yaml"), resolve=True)
    ctx = build_context(cfg, pipeline, folder)
    config, started = system.default_config(), time.perf_counter()
    with ctx.ledger.timed(INITIAL), phase(f"headroom · initial system on {len(val)} examples", lm=ctx.lm):
        trajs = system.run(val, config, ctx.replace(phase=INITIAL))
    initial = rewards(pipeline, trajs)
    results: dict[str, Any] = {"pipeline": pipeline.name, "metric": pipeline.metric.name, "split": "validation",
                               "n": len(val), "initial": _scored(initial)}
    if pipeline.single_llm is not None:
        with ctx.ledger.timed(SINGLE), phase("headroom · single LLM", lm=ctx.lm):
            single = SingleLLM("single_llm", build_budget(cfg)).evaluate(
                pipeline, MethodOutcome(config=config), val, ctx.replace(phase=SINGLE), 1)["per_example"]
        results["single_llm"] = {**_scored(single), "vs_initial": _vs_initial(initial, single)}
    rows = []
    for i, change in enumerate(changes, 1):
        with ctx.ledger.timed(CHANGES), phase(f"headroom · {change.component} · {change.label}", lm=ctx.lm):
            changed = system.run_changed([change.component], trajs, config.replace(change.component, change.value),
                                         ctx.replace(phase=CHANGES))
        scores = rewards(pipeline, changed)
        row = {"component": change.component, "change": change.label, "value": change.value,
               **_scored(scores), "vs_initial": _vs_initial(initial, scores)}
        rows.append(row)
        console.print(f"  [{i}/{len(changes)}] {change.component} · {change.label}: {row['mean']:.3f} "
                      f"(Δ {row['vs_initial']['delta']:+.3f})")
    best = max(rows, key=lambda r: r["vs_initial"]["delta"], default=None)
    results.update({
        "changes": rows,
        "ceiling": None if best is None else {"component": best["component"], "change": best["change"],
                                              **best["vs_initial"]},
        "room": sorted({r["component"] for r in rows if r["vs_initial"]["excludes_zero"] and r["vs_initial"]["delta"] > 0}),
        "not_enumerated": not_enumerated(pipeline),
        "mde": mde_summary(len(val), [r - i for r, i in zip(best["per_example"], initial, strict=True)] if best else None),
        "wall_seconds": round(time.perf_counter() - started, 1),
        "plan": plan, "ledger": ledger_summary(ctx, cfg), "config": OmegaConf.to_container(cfg, resolve=True),
    })
    folder.write_json("headroom.json", results)
    folder.file("headroom.md").write_text(markdown(results))
    console.print(table(results))
    console.print(f"headroom: {folder.file('headroom.json')} · {folder.file('headroom.md')}")
    return {**results, "folder": str(folder.path)}


# -- rendering ------------------------------------------------------------------------------------
def _rows(results: dict) -> list[tuple[str, str, dict, dict | None]]:
    out = [("(initial system)", "", results["initial"], None)]
    if "single_llm" in results:
        out.append(("(single LLM)", "", results["single_llm"], results["single_llm"]["vs_initial"]))
    out += [(r["component"], r["change"], r, r["vs_initial"])
            for r in sorted(results["changes"], key=lambda r: -r["vs_initial"]["delta"])]
    return out


def _cells(score: dict, gain: dict | None) -> tuple[str, str]:
    mean = f"{score['mean']:.3f} [{score['ci_low']:.3f}, {score['ci_high']:.3f}]"
    if gain is None:
        return mean, ""
    mark = " †" if gain["excludes_zero"] else ""
    return mean, f"{gain['delta']:+.3f} [{gain['ci_low']:+.3f}, {gain['ci_high']:+.3f}]{mark}"


def _summary(results: dict) -> list[str]:
    c = results["ceiling"]
    lines = [f"{results['pipeline']} · validation n={results['n']} · metric {results['metric']} · "
             f"MDE (80% power, alpha 0.05) {results['mde']['mde_worst_case']:.3f} worst case"
             + (f", {results['mde']['mde_measured']:.3f} at the best change's spread" if "mde_measured" in results["mde"] else "")]
    if c is not None:
        lines.append(f"ceiling of one-change improvements: {c['delta']:+.3f} [{c['ci_low']:+.3f}, {c['ci_high']:+.3f}] "
                     f"({c['component']} · {c['change']})")
    lines.append("room (a change whose paired CI is above 0): " + (", ".join(results["room"]) or "none"))
    lines += [f"not scored: {name}: {why}" for name, why in results["not_enumerated"].items()]
    return lines


def table(results: dict) -> Table:
    t = Table(title="headroom on validation (95% CI; † = paired CI vs the initial system excludes 0)")
    for col in ("component", "change", results["metric"], "Δ vs initial"):
        t.add_column(col)
    for comp, change, score, gain in _rows(results):
        t.add_row(comp, change, *_cells(score, gain))
    t.caption = "\n".join(_summary(results))
    return t


def markdown(results: dict) -> str:
    lines = [f"# Headroom: {results['pipeline']}", "", *[f"- {s}" for s in _summary(results)], "",
             f"| component | change | {results['metric']} [95% CI] | Δ vs initial [95% CI] |", "|---|---|---|---|"]
    lines += [f"| {comp} | {change} | {' | '.join(_cells(score, gain))} |" for comp, change, score, gain in _rows(results)]
    lines += ["", "† = the paired 95% CI against the initial system excludes 0.", "",
              "Changed values:", ""]
    lines += [f"- {r['component']} · {r['change']}: `{' '.join(str(r['value']).split())[:300]}`" for r in results["changes"]]
    return "\n".join(lines) + "\n"


def headroom_folder(pipeline: str, root: Path = Path("outputs")) -> RunFolder:
    now = datetime.now()
    return RunFolder(root / now.strftime("%Y-%m-%d") / f"{now.strftime('%H-%M-%S')}-{pipeline}-headroom")
