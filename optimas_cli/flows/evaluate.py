"""`optimas eval`: score a saved configuration (e.g. <run>/best_config.json) on the test split, or on
the examples of one data file (`eval_file=...`); nothing is trained, so only the examples scored must exist."""
from __future__ import annotations

import json
from pathlib import Path

from omegaconf import DictConfig
from rich.console import Console

from optimas_cli.data_files import read_json, read_jsonl
from optimas_cli.errors import DataError, UserError
from optimas_cli.flows.run import ledger_summary, parse_failures, trace_sink
from optimas_cli.flows.setup import build_budget, build_context, build_pipeline, resolved, seed_everything
from optimas_cli.lrf.stage import LRF_DIR
from optimas_cli.provenance import code_record
from optimas_cli.system import Pipeline, SystemConfig, routes_by_lrf
from optimas_cli.system.evaluate import evaluate
from optimas_cli.system.results_file import write_results
from optimas_cli.system.run_folder import RunFolder, adapters_found_in


def evaluate_config(cfg: DictConfig, folder: RunFolder, console: Console) -> dict:
    seed_everything(int(cfg.seed))
    pipeline = build_pipeline(cfg)
    examples = eval_examples(cfg, pipeline)
    ctx = build_context(cfg, pipeline, folder)
    config = saved_config(pipeline, cfg.config_file)
    lrf = lrf_folder(config, cfg.config_file, cfg.lrf_dir)
    if lrf is not None:  # per-instance choices that route by the local reward need the trained model
        from optimas_cli.lrf.model import LocalRewardModel

        ctx = ctx.replace(lrf=LocalRewardModel.load(lrf))
    data = cfg.eval_file or "the test split"
    console.print(f"[bold]{pipeline.name}[/] · evaluating {cfg.config_file or 'the initial configuration'}"
                  f" on {data} ({len(examples)} examples)")
    with ctx.ledger.timed("test"):
        test = evaluate(pipeline, config, examples,
                        ctx.replace(phase="test", traces=trace_sink(folder, ctx.lrf, cfg)), int(cfg.repeats))
    results = {
        "pipeline": pipeline.name,
        "method": "eval",
        "metric": pipeline.metric.name,
        "test": test,
        "evaluated": {"config_file": cfg.config_file, "eval_file": cfg.eval_file, "lrf_dir": None if lrf is None else str(lrf)},
        "evaluated_config": config.to_dict(),
        "parse_failures": parse_failures(pipeline, ctx),
        "ledger": ledger_summary(ctx, cfg),
        "code": code_record(),
        "config": resolved(cfg),
    }
    write_results(folder, results)
    return results


def eval_examples(cfg: DictConfig, pipeline: Pipeline) -> list[dict]:
    """Every row of `eval_file`, else the pipeline's test split capped at budget.test_size."""
    if cfg.eval_file:
        return read_examples(Path(str(cfg.eval_file)), pipeline)
    size = build_budget(cfg).test_size
    rows = list(pipeline.splits.test)[: None if size is None else int(size)]
    if not rows:
        raise UserError(f"pipeline {pipeline.name!r} has no test examples to evaluate",
                        "check data_dir and budget.test_size, or pass eval_file=<examples.jsonl>")
    return rows


def read_examples(path: Path, pipeline: Pipeline) -> list[dict]:
    """A JSONL file (one example per line) or a JSON list, each example in the pipeline's own form: the
    system's input fields and the gold fields its metric reads (what the loader's rows hold)."""
    if not path.is_file():
        raise UserError(f"eval_file {path} does not exist", "pass a .jsonl (one example per line) or .json file")
    needed = pipeline.system.inputs
    if path.suffix in (".jsonl", ".gz") or path.name.endswith(".jsonl.gz"):
        rows = list(read_jsonl(path, validate=lambda row: check_inputs(row, needed)))
    else:
        rows = read_json(path)
        if not isinstance(rows, list):
            raise DataError(f"{path} holds a JSON {type(rows).__name__}, not a list of examples",
                            "write a JSON list of objects, or one object per line in a .jsonl file")
        for i, row in enumerate(rows):
            try:
                check_inputs(row, needed)
            except (KeyError, TypeError) as exc:
                raise DataError(f"malformed example {i} in {path}: {exc}", "fix or remove it") from None
    if not rows:
        raise DataError(f"{path} holds no examples", "add one example per line")
    return rows


def check_inputs(row, needed: tuple[str, ...]) -> None:
    """An example (or a new input) holds every field the system reads."""
    if not isinstance(row, dict):
        raise TypeError(f"expected a JSON object, got {type(row).__name__}")
    missing = [f for f in needed if f not in row]
    if missing:
        raise KeyError(f"missing the system input(s) {missing} (the system reads {list(needed)})")


def saved_config(pipeline: Pipeline, config_file) -> SystemConfig:
    """The configuration in `config_file` (null: the pipeline's initial one), checked against the pipeline."""
    default = pipeline.system.default_config()
    if not config_file:
        return default
    path = Path(str(config_file))
    if not path.is_file():
        raise UserError(f"config_file {path} does not exist", "pass a run's best_config.json")
    try:
        values = adapters_found_in(SystemConfig.load(path), path.parent)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise UserError(f"config_file {path} is not valid JSON ({exc})", "pass a run's best_config.json") from None
    return fitting_config(pipeline, values, f"config_file {path}")


def fitting_config(pipeline: Pipeline, values, source: str) -> SystemConfig:
    """`values` as the pipeline's configuration, refused in one line when its components are not the pipeline's."""
    default, config = pipeline.system.default_config(), SystemConfig(values)
    unknown = sorted(set(config) - set(default))
    missing = sorted(set(default) - set(config))
    if unknown or missing:
        raise UserError(f"{source} does not fit pipeline {pipeline.name!r} "
                        f"(unknown components {unknown}, missing {missing})",
                        f"pass a best_config.json written by a run of pipeline={pipeline.name}")
    return config


def lrf_folder(config: SystemConfig, config_file, lrf_dir) -> Path | None:
    """Where the local reward model LRF routes need lives: `lrf_dir`, else the lrf/ folder beside
    `config_file` (a run folder keeps both); None when no component routes by it."""
    routed = any(routes_by_lrf(value) for value in config.values())
    if lrf_dir is None and not routed:
        return None
    folder = Path(str(lrf_dir)) if lrf_dir else (Path(str(config_file)).parent / LRF_DIR if config_file else None)
    if folder is None or not folder.is_dir():
        raise UserError(f"the configuration routes by the local reward, and {folder or 'no lrf_dir'} holds no reward model",
                        "pass lrf_dir=<run>/lrf, the model the run that wrote the configuration trained")
    return folder
