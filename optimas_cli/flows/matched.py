"""Matched cost (`budget.max_runs_from=<method>`): a run's budget.max_runs is what that method spent.

`optimas run -m experiment=table3_matched` lists Optimas first among the methods, so Hydra's default
(sequential) launcher finishes Optimas' run of each pipeline and seed before the other methods of that
pipeline and seed start. Each of them finds that run in the sweep's folder (the folder holding its own
run folder) and takes the executed system runs it spent optimizing (Table 3's "Executed runs": the
final validation and the test left out) as its own cap. The reference method runs uncapped. A
reference that is missing (not run yet, run in parallel, failed) or ambiguous is one clear error.
"""
from __future__ import annotations

import logging
import os
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from optimas_cli.errors import UserError
from optimas_cli.system.budget import optimization_runs
from optimas_cli.system.results_file import read_results

log = logging.getLogger("optimas")
# Budget keys that may differ between the reference run and the matched ones: the caps themselves.
CAP_KEYS = ("max_usd", "max_runs", "max_wall", "max_runs_from")


def matched_reference(cfg: DictConfig) -> str | None:
    """The method whose spend caps this run (budget.max_runs_from), unless this run is that method."""
    reference = OmegaConf.select(cfg, "budget.max_runs_from")
    return str(reference) if reference and str(cfg.method.name) != str(reference) else None


def reference_run(cfg: DictConfig, pipeline: str, run_folder: Path) -> tuple[Path, dict] | None:
    """The reference's finished run beside `run_folder` (folder, results.json); None when this run is not
    matched. A missing or ambiguous reference, or a cap set twice, is one clear error."""
    reference = matched_reference(cfg)
    if reference is None:
        return None
    if OmegaConf.select(cfg, "budget.max_runs") is not None:
        raise UserError(f"budget.max_runs={cfg.budget.max_runs} and budget.max_runs_from={reference} both set the "
                        "run cap", "set one of them (budget.max_runs=null to match the reference's spend)")
    seed, budget = int(cfg.seed), _sizes(OmegaConf.to_container(cfg.budget, resolve=True))
    here = Path(run_folder).resolve()
    found = []
    for results_file in sorted(here.parent.glob("*/results.json")):
        if results_file.parent == here:
            continue
        try:
            results = read_results(results_file.parent)
        except UserError:
            continue  # still being written, or broken: not a finished reference
        config = results.get("config") or {}
        if (results.get("method") == reference and results.get("pipeline") == pipeline
                and config.get("seed") == seed and _sizes(config.get("budget") or {}) == budget):
            found.append((results_file.parent, results))
    what = f"of pipeline {pipeline}, seed {seed} and this budget in {here.parent}"
    if not found:
        raise UserError(f"budget.max_runs_from={reference}: no finished {reference} run {what}",
                        f"list {reference} first in the sweep's methods and keep Hydra's default (sequential) launcher, "
                        "e.g. optimas run -m experiment=table3_matched")
    if len(found) > 1:
        raise UserError(f"budget.max_runs_from={reference}: {len(found)} {reference} runs {what} "
                        f"({', '.join(f.name for f, _ in found)})", "keep one reference run per pipeline and seed in a sweep")
    return found[0]


def matched_max_runs(cfg: DictConfig, pipeline: str, run_folder: Path) -> float | None:
    """The run cap budget.max_runs_from gives this run; None when it is not set or names this run's method."""
    found = reference_run(cfg, pipeline, run_folder)
    if found is None:
        return None
    folder, results = found
    reference = matched_reference(cfg)
    spent = optimization_runs(results.get("ledger") or {})
    if spent is None:
        raise UserError(f"budget.max_runs_from={reference}: {folder}/results.json has no executed run count",
                        "re-run the reference with this version of optimas")
    log.info("budget.max_runs=%s: what %s spent optimizing (%s)", spent, reference, os.path.relpath(folder, run_folder))
    return spent


def _sizes(budget: dict) -> dict:
    return {k: v for k, v in budget.items() if k not in CAP_KEYS}
