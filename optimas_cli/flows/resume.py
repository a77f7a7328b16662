"""`resume=<folder>`: continue only a run of the same pipeline and method with compatible settings.

Checked before Hydra touches the folder, so a refused resume leaves it exactly as it was. Settings
that decide what was already computed must match; caps, iterations, the test size, repeats and the
LM's transport settings (concurrency, timeouts) may change (e.g. resume a stopped run with a raised cap).
A run that finished with the very settings asked for has nothing left to do: that is said, and nothing runs.
A folder that holds a run is continued only by resume= naming it: a new run there is refused (refuse_a_run_in).
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from optimas_cli.conf import CONF_DIR, options
from optimas_cli.errors import UserError
from optimas_cli.system.results_file import RESULTS, read_results
from optimas_cli.system.run_folder import (
    ACCOUNTS_FILE,
    damaged_file,
    failed_before_start,
    read_state,
    refuse_if_locked,
)

ORIGINAL_CONFIG = "config.yaml"
# What Stage 1, the loop's checkpoints and the call cache were computed with.
# The data and the server decide them too: another data_dir is other examples, another lm.api_base
# another model behind the same name.
DECIDING = ("seed", "data_dir", "paired_noise", "lrf", "lm.model", "lm.api_base", "lm.temperature", "lm.max_tokens",
            "budget.train_size", "budget.val_size", "budget.search_size", "budget.num_candidates", "budget.num_steps",
            "budget.fresh_size")
# Settings added since runs were first written, with what a folder that lacks one ran with
INTRODUCED = {"paired_noise": "independent", "lrf.collect.labels": "mc"}
# Modules renamed since runs were first written: a folder's build target is read under its new name
RENAMED_MODULES = {"pipelines.": "optimas_pipelines."}
LRF_ONLY_TASKS = ("collect", "train-lrf")  # their folders hold no method's state: any method may build on them


def check_resume(path: str, cfg: Any) -> None:
    """Raise a UserError (one line) unless `path` is a run folder that `cfg` may continue."""
    folder = Path(path)
    if not folder.is_dir():
        raise UserError(f"resume={path}: no such run folder",
                        "pass the folder of an earlier run (outputs/<date>/<time>-<pipeline>-<method>), or drop resume=")
    refuse_if_locked(folder, "the run folder")  # a run still going on in it: resume it once it ends
    if not (folder / ORIGINAL_CONFIG).is_file():
        raise UserError(f"resume={path}: not a run folder (it has no {ORIGINAL_CONFIG})",
                        "pass the folder of an earlier optimas run, or drop resume= to start a new one")
    before = _original_config(folder / ORIGINAL_CONFIG)
    for state in sorted(folder.glob("*.json")):  # checkpoints, accounts: refused now, not after a model loads
        if state.name != RESULTS:  # rewritten at the end: a damaged one holds nothing the run reads back
            read_state(state)
    now = OmegaConf.to_container(cfg, resolve=True)
    for key, value in INTRODUCED.items():
        _set_default(before, key, value)
    _rename_target(before.get("pipeline"))
    _same(path, before, now, "pipeline", "pipeline", option_name(before, "pipeline"), option_name(now, "pipeline"))
    _differs(path, "pipeline", before.get("pipeline"), now.get("pipeline"))
    if before.get("task") not in LRF_ONLY_TASKS:
        _same(path, before, now, "method", "method", option_name(before, "method"), option_name(now, "method"))
        # method.lrf and method.budget copy the lrf and budget groups: a difference there is named as the
        # user set it (lrf.min_steps, not method.lrf.min_steps, which Hydra would not take back)
        method_settings = {k: v for k, v in (before.get("method") or {}).items() if k not in ("budget", "lrf")}
        now_settings = {k: v for k, v in (now.get("method") or {}).items() if k not in ("budget", "lrf")}
        _differs(path, "method", method_settings, now_settings)
    for key in DECIDING:
        _differs(path, key, _get(before, key), _get(now, key))
    _refuse_if_finished(path, folder, now)


def _set_default(cfg: dict, dotted: str, value: Any) -> None:
    """Give `cfg` the value of `dotted` that it ran with when it predates the key (its parents exist)."""
    *parents, last = dotted.split(".")
    node = cfg
    for name in parents:
        node = node.get(name) if isinstance(node, dict) else None
    if isinstance(node, dict):
        node.setdefault(last, value)


def _rename_target(node: Any) -> None:
    target = node.get("_target_") if isinstance(node, dict) else None
    for old, new in RENAMED_MODULES.items():
        if isinstance(target, str) and target.startswith(old):
            node["_target_"] = new + target[len(old):]


def _original_config(file: Path) -> dict:
    """The run's config.yaml, written whole by its first process. A file cut short still parses as YAML, and
    was read as a run of whatever method its last whole lines named: its last line is unended, or it lacks
    `task` and `seed`, which follow every group."""
    try:
        text = file.read_text()
        before = OmegaConf.to_container(OmegaConf.load(file), resolve=True)
    except Exception as error:  # not YAML, not UTF-8, a hand edit that no longer resolves
        raise damaged_file(file, str(error).splitlines()[0]) from None
    if not isinstance(before, dict) or not {"task", "seed"} <= before.keys() or not text.endswith("\n"):
        raise damaged_file(file, "it ends part-way: the file was cut short")
    return before


def _refuse_if_finished(path: str, folder: Path, now: dict) -> None:
    """A run whose results.json holds final results computed with these very settings: going on would only
    recompute them and rewrite the file. (A run stopped by a cap, or resumed with other settings, goes on.)"""
    try:
        results = read_results(folder)
    except UserError:  # unreadable: nothing says the run finished
        return
    if not isinstance(results, dict) or results.get("stopped") or not isinstance(results.get("config"), dict):
        return
    if _settings(results["config"]) != _settings(json.loads(json.dumps(now, default=str))):
        return
    raise UserError(f"resume={path} already finished: its results are in {folder / RESULTS}",
                    "nothing to continue; to evaluate it otherwise add the setting (e.g. repeats=3), "
                    "to start over drop resume=")


def _settings(cfg: dict) -> dict:
    """A run's settings, less the resume= that continued it."""
    return {key: value for key, value in cfg.items() if key != "resume"}


def refuse_a_run_in(path: str | Path, resume: str | None = None, key: str = "hydra.run.dir") -> None:
    """A new run never writes into a folder that holds one (it went on from that run's Stage 1, checkpoints and
    results under its own settings, and wrote results.json labelled with them): refused in one line, the folder
    untouched, unless resume= names it (check_resume then decides). A folder whose run failed before it started
    holds nothing to go on from: its command runs there again."""
    folder = Path(path)
    if not folder.is_dir() or (resume and Path(resume).resolve() == folder.resolve()):
        return
    refuse_if_locked(folder, "the run folder")  # a run still going on in it: that is the line to say
    if _holds_a_run(folder):
        raise UserError(f"{path} already holds {_run_in(folder)}",
                        f"continue it with resume={path}, or choose another {key}")


def refuse_a_sweep_in(path: str | Path) -> None:
    """`optimas run -m` into a sweep folder that holds runs: its jobs' folders (<job number>-<pipeline>-<method>)
    are those runs' folders, so the sweep is refused as a run would be, before Hydra writes there."""
    folder = Path(path)
    held = sorted(p for p in folder.iterdir() if p.is_dir() and _holds_a_run(p)) if folder.is_dir() else []
    if held:
        raise UserError(f"{path} already holds the runs of a sweep ({held[0].name}{', ...' if len(held) > 1 else ''})",
                        f"choose another hydra.sweep.dir, or continue one of its runs: optimas run <its overrides> "
                        f"resume={held[0]}")


def _holds_a_run(folder: Path) -> bool:
    """Whether `folder` holds a run: its config, a checkpoint's accounts or its results, and more than what a run
    that failed before it started leaves (its config and the error in its log)."""
    return (any((folder / name).exists() for name in (ORIGINAL_CONFIG, ACCOUNTS_FILE, RESULTS))
            and failed_before_start(folder) is None)


def _run_in(folder: Path) -> str:
    """The run a folder holds, in words: its pipeline, method (or task) and seed as its config.yaml says."""
    try:
        cfg = OmegaConf.to_container(OmegaConf.load(folder / ORIGINAL_CONFIG), resolve=True)
        task = cfg.get("task", "run")
        doing = f"method {option_name(cfg, 'method')}" if task == "run" else f"optimas {task}"
        return f"a run of pipeline {option_name(cfg, 'pipeline')}, {doing}, seed {cfg['seed']}"
    except Exception:  # no config.yaml, or one that does not read: the refusal stands without the details
        return "an optimas run"


def option_name(cfg: dict, group: str) -> str:
    """The group option a config node came from (its conf/<group>/*.yaml with the same name or target)."""
    node = cfg.get(group) or {}
    if node.get("name"):
        return str(node["name"])
    for option in options(group):
        if OmegaConf.load(CONF_DIR / group / f"{option}.yaml").get("_target_") == node.get("_target_"):
            return option
    return str(node.get("_target_"))


def _same(path: str, before: dict, now: dict, group: str, what: str, was: str, asked: str) -> None:
    if before.get(group) != now.get(group) and was != asked:
        raise UserError(f"resume={path} is a run of {what} {was!r}, not {asked!r}",
                        f"resume it with {what}={was}, or drop resume= to start a new run")


def _differs(path: str, key: str, was: Any, now: Any) -> None:
    """Refuse naming the first differing setting under `key` (`lrf.train.epochs`, not `lrf`)."""
    if was == now:
        return
    key, was, now = _first_difference(key, was, now)
    raise UserError(f"resume={path} was run with other {key} ({_short(was)} there, {_short(now)} now)",
                    f"resume with {key}={_spelled(was)} (the folder's {ORIGINAL_CONFIG}), or drop resume= to start a new run")


def _first_difference(key: str, was: Any, now: Any) -> tuple[str, Any, Any]:
    if not (isinstance(was, dict) and isinstance(now, dict)):
        return key, was, now
    for name in sorted(set(was) | set(now), key=str):
        if was.get(name) != now.get(name):
            return _first_difference(f"{key}.{name}", was.get(name), now.get(name))
    return key, was, now


def _get(cfg: dict, dotted: str) -> Any:
    node: Any = cfg
    for part in dotted.split("."):
        node = node.get(part) if isinstance(node, dict) else None
    return node


def _spelled(value: Any) -> str:
    """A value as an override spells it."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    return _short(value) if isinstance(value, dict | list) else str(value)


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
