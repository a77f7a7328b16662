"""`optimas export <run folder> [--out FILE]`: a finished run's optimized system as one standalone file a
person reads and diffs (YAML, or JSON for a .json name) and `optimas_cli.api.load` reads back: each
component's configuration (instructions, demos, model choices, router tables; LoRA adapter folders and
the local reward model named relative to the file), the pipeline's name and settings, the LM it ran on,
the seed, and the run's test score with its 95% CI. Keys inside each block are sorted, so two exports
diff line by line."""
from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path

import yaml
from omegaconf import DictConfig, OmegaConf

from optimas_cli.errors import UserError
from optimas_cli.stats import mean_ci
from optimas_cli.system.results_file import read_results
from optimas_cli.system.run_folder import adapters_found_in

FORMAT = "optimas-export/1"
EXPORT_FILE = "export.yaml"  # the default name, inside the run folder


@dataclass
class SavedSystem:
    """What rebuilds an optimized system: the config its pipeline and LM come from, the component values
    (adapter paths made absolute) and the local reward model's folder (None: nothing routes by it)."""

    cfg: DictConfig
    values: dict | None  # None: the run wrote no best_config.json
    lrf: Path | None
    source: Path


def from_run_folder(folder: Path) -> SavedSystem:
    """A finished run's config.yaml (a resumed run's own config first), best_config.json and lrf/."""
    saved = next((folder / n for n in ("config.resumed.yaml", "config.yaml") if (folder / n).is_file()), None)
    if saved is None:
        raise UserError(f"{folder} holds no config.yaml", "pass a run folder written by `optimas run`")
    results = _results(folder)
    if results.get("method") == "single_llm":
        raise UserError(f"{folder} is a single_llm run: it replaced the system by one LM call",
                        "load a run of a method that configures the compound system")
    from optimas_cli.lrf.stage import LRF_DIR  # here: the stage's imports (torch) load only for a run folder

    best = folder / "best_config.json"
    try:
        values = adapters_found_in(json.loads(best.read_text()), folder.resolve()) if best.is_file() else None
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise UserError(f"{best} is not valid JSON", "restore it, or run the experiment again") from None
    lrf = folder / LRF_DIR
    return SavedSystem(OmegaConf.load(saved), values, lrf if lrf.is_dir() else None, best if best.is_file() else folder)


def from_export(path: Path) -> SavedSystem:
    """An export file: its pipeline, LM and seed as a config (data_dir as this machine resolves it), its
    component values with adapter paths resolved against the file's folder."""
    try:
        data = json.loads(path.read_text()) if path.suffix == ".json" else yaml.safe_load(path.read_text())
    except (yaml.YAMLError, json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise UserError(f"{path} is not a readable export ({str(exc).splitlines()[0]})",
                        "pass a file written by `optimas export`, or a run folder") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise UserError(f"{path} is not an optimas export (no `format: {FORMAT}`)",
                        "pass a file written by `optimas export`, or a run folder")
    here = path.resolve().parent
    try:
        cfg = OmegaConf.create({"pipeline": data["pipeline"]["settings"], "lm": data["lm"], "seed": data["seed"],
                                "data_dir": None})
        values = {name: _absolute(value, here) for name, value in data["components"].items()}
    except (KeyError, TypeError, AttributeError) as exc:
        raise UserError(f"{path} lacks part of an export ({type(exc).__name__}: {exc})",
                        "export the run again with `optimas export <run folder>`") from None
    return SavedSystem(cfg, values, here / data["lrf"] if data.get("lrf") else None, path)


def export_run(folder: Path, out: Path | None = None) -> Path:
    """Write the export of run `folder` to `out` (default <folder>/export.yaml); returns where."""
    saved, results = from_run_folder(folder), _results(folder)
    if saved.values is None and not results:
        raise UserError(f"{folder} holds no best_config.json: the run did not finish",
                        f"continue it with its command plus resume={folder}, then export it")
    if saved.values is None:
        raise UserError(f"{folder} holds no best_config.json: an `optimas {results.get('method')}` folder "
                        "configures no system", "export the folder of an `optimas run`")
    out = out or folder / EXPORT_FILE
    here = out.resolve().parent
    cfg = OmegaConf.to_container(saved.cfg, resolve=True)
    data = {
        "format": FORMAT,
        "pipeline": {"name": results.get("pipeline") or str(folder.name), "settings": _sorted(cfg["pipeline"])},
        "method": results.get("method"),
        "test": _test_score(results),
        "components": {name: _sorted(_relative(value, here)) for name, value in saved.values.items()},
        "lrf": os.path.relpath(saved.lrf.resolve(), here) if saved.lrf else None,
        "lm": _sorted(cfg["lm"]),
        "seed": cfg["seed"],
        "run": os.path.relpath(folder.resolve(), here),
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(data, indent=2, ensure_ascii=False) + "\n" if out.suffix == ".json" else \
        yaml.dump(data, Dumper=_Readable, sort_keys=False, allow_unicode=True, width=100)
    out.write_text(text)
    return out


def export_program(folder: Path, out: Path) -> Path:
    """Write run `folder`'s optimized system in the form its user wrote it (Pipeline.to_program): for
    pipeline=dspy, the DSPy program with the optimized instructions, in DSPy's save format (`program.load`)."""
    from optimas_cli.flows.evaluate import fitting_config
    from optimas_cli.flows.setup import build_pipeline

    saved = from_run_folder(folder)
    if saved.values is None:
        raise UserError(f"{folder} holds no best_config.json: the run did not finish",
                        f"continue it with its command plus resume={folder}, then export it")
    pipeline = build_pipeline(saved.cfg)
    if pipeline.to_program is None:
        raise UserError(f"pipeline {pipeline.name!r} is not a program of yours: --program has nothing to write",
                        "use --program with runs of pipeline=dspy; `optimas export <run>` writes any run")
    if out.suffix != ".json":
        raise UserError(f"--program {out} must name a .json file (DSPy's save format)", f"use {out.with_suffix('.json')}")
    out.parent.mkdir(parents=True, exist_ok=True)
    pipeline.to_program(fitting_config(pipeline, saved.values, str(saved.source))).save(str(out))
    return out


def _results(folder: Path) -> dict:
    return read_results(folder) or {}


def _test_score(results: dict) -> dict | None:
    """The run's test score with its 95% CI over the test examples (the interval the run's last line shows)."""
    test = results.get("test")
    if not isinstance(test, dict) or "mean" not in test:
        return None
    ci = mean_ci(test["per_example"]) if test.get("per_example") else None
    return {"metric": results.get("metric"), "mean": test["mean"], "ci_low": ci.low if ci else None,
            "ci_high": ci.high if ci else None, "n": test.get("n")}


def _relative(value, here: Path):
    """An adapter folder (a path that exists) named relative to the export's folder."""
    if isinstance(value, str) and os.path.isabs(value) and os.path.exists(value):
        return os.path.relpath(value, here)
    return value


def _absolute(value, here: Path):
    if isinstance(value, str) and "adapters/" in value and (here / value).exists():
        return str((here / value).resolve())
    return value


def _sorted(value):
    if isinstance(value, dict):
        return {k: _sorted(value[k]) for k in sorted(value)}
    if isinstance(value, list):
        return [_sorted(v) for v in value]
    return value


class _Readable(yaml.SafeDumper):
    """Multi-line strings (instructions, demos) as literal blocks: a diff then shows the changed line."""


def _string(dumper: yaml.SafeDumper, text: str):
    return dumper.represent_scalar("tag:yaml.org,2002:str", text, style="|" if "\n" in text else None)


_Readable.add_representer(str, _string)


def export_main(args: list[str]) -> int:
    """`optimas export <run folder> [--out FILE]`."""
    import argparse

    parser = argparse.ArgumentParser(prog="optimas export", description="write a run's optimized system to one file")
    parser.add_argument("folder", help="a finished run folder (outputs/<date>/<time>-<pipeline>-<method>)")
    parser.add_argument("--out", help=f"the file to write (.yaml or .json; default <folder>/{EXPORT_FILE})")
    parser.add_argument("--program", help="instead, write the optimized program in its own format: for "
                        "pipeline=dspy, DSPy's save format (.json), which your program's .load(FILE) reads")
    try:
        opts = parser.parse_args(args)
    except SystemExit as exc:  # argparse printed its usage line
        return 0 if exc.code == 0 else 2
    folder = Path(opts.folder)
    try:
        if not folder.is_dir():
            raise UserError(f"{folder} is not a folder", "pass a run folder written by `optimas run`")
        if opts.program:
            out = export_program(folder, Path(opts.program))
            print(f"exported: {out} (load it with your_program.load({str(out)!r}))")
            return 0
        out = export_run(folder, Path(opts.out) if opts.out else None)
    except UserError as err:
        print(f"optimas: {err}", file=sys.stderr)
        return 2
    print(f"exported: {out} (load it with optimas_cli.api.load({str(out)!r}))")
    return 0
