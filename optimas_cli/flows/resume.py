"""`resume=<folder>`: continue only a run of the same pipeline and method with compatible settings.

Checked before Hydra touches the folder, so a refused resume leaves it exactly as it was. Settings
that decide what was already computed must match; caps, iterations, the test size, repeats and the
LM's transport settings (concurrency, timeouts) may change (e.g. resume a stopped run with a raised cap).
A run that finished with the very settings asked for has nothing left to do: that is said, and nothing runs.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from optimas_cli.conf import CONF_DIR, options
from optimas_cli.errors import UserError
from optimas_cli.system.run_folder import refuse_if_locked

ORIGINAL_CONFIG = "config.yaml"
RESULTS = "results.json"
# What Stage 1, the loop's checkpoints and the call cache were computed with.
# The data and the server decide them too: another data_dir is other examples, another lm.api_base
# another model behind the same name.
DECIDING = ("seed", "data_dir", "lrf", "lm.model", "lm.api_base", "lm.temperature", "lm.max_tokens",
            "budget.train_size", "budget.val_size", "budget.search_size", "budget.num_candidates", "budget.num_steps",
            "budget.fresh_size")
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
    try:
        before = OmegaConf.to_container(OmegaConf.load(folder / ORIGINAL_CONFIG), resolve=True)
    except Exception as error:  # a damaged or hand-edited file
        raise UserError(f"resume={path}: cannot read its {ORIGINAL_CONFIG} ({str(error).splitlines()[0]})",
                        "restore the file, or start a new run without resume=") from None
    now = OmegaConf.to_container(cfg, resolve=True)
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


def _refuse_if_finished(path: str, folder: Path, now: dict) -> None:
    """A run whose results.json holds final results computed with these very settings: going on would only
    recompute them and rewrite the file. (A run stopped by a cap, or resumed with other settings, goes on.)"""
    try:
        results = json.loads((folder / RESULTS).read_text())
    except (OSError, ValueError):  # none yet, or unreadable: nothing says the run finished
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
