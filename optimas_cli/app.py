"""The Hydra application behind `optimas run|collect|train-lrf|eval` (single runs and -m sweeps)."""
from __future__ import annotations

import logging
import sys
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf
from rich.console import Console

from optimas_cli.conf import CONF_DIR
from optimas_cli.errors import UserError
from optimas_cli.flows.resume import ORIGINAL_CONFIG
from optimas_cli.flows.validate import check_values
from optimas_cli.system.caps import BudgetExhausted
from optimas_cli.system.run_folder import RunFolder

log = logging.getLogger("optimas")
console = Console(highlight=False, soft_wrap=True)
errors = Console(stderr=True, highlight=False, soft_wrap=True)


def _flow(task: str):
    if task == "run":
        from optimas_cli.flows.run import run

        return run
    if task in ("collect", "train-lrf"):
        from optimas_cli.flows import lrf_tasks

        return lrf_tasks.collect if task == "collect" else lrf_tasks.train_lrf
    if task == "eval":
        from optimas_cli.flows.evaluate import evaluate_config

        return evaluate_config
    raise UserError(f"unknown task {task!r}", "use one of: optimas run | collect | train-lrf | eval")


@hydra.main(config_path=str(CONF_DIR), config_name="config", version_base="1.3")
def main(cfg: DictConfig) -> float | None:
    # Launchers that run jobs in other processes (joblib, submitit) pickle this function by value,
    # with the globals it uses; the rich console holds a lock that cannot be pickled. Keep this a
    # one-liner so only run_task, pickled by reference as a plain module function, travels.
    return run_task(cfg)


def run_task(cfg: DictConfig) -> float | None:
    folder = RunFolder(HydraConfig.get().runtime.output_dir)
    # The folder's original config stays as it was (a resume is checked against it); a resumed run's
    # own config goes beside it.
    original = folder.file(ORIGINAL_CONFIG)
    OmegaConf.save(cfg, folder.file("config.resumed.yaml") if original.exists() else original, resolve=True)
    try:
        check_values(cfg)  # each job of a sweep: the command line checked only the first values
        results = _flow(cfg.task)(cfg, folder, console)
    except BudgetExhausted as stop:  # collect / train-lrf stopped by a cap (`run` handles its own)
        errors.print(f"[yellow]optimas: {stop}; continue with a raised cap: optimas {cfg.task} ... resume={folder}[/]")
        sys.exit(3)
    except Exception as exc:  # Hydra wraps errors raised while instantiating configs: unwrap ours
        err = _user_error(exc)
        if err is None:
            raise
        log.error("%s", err)
        errors.print(f"[red]optimas: {err}[/]")
        sys.exit(2)
    except KeyboardInterrupt:
        console.print(f"[yellow]interrupted; continue with: optimas {cfg.task} ... resume={folder}[/]")
        sys.exit(130)
    where = _shown(folder.file("results.json"))
    test = results.get("test")
    if results.get("stopped"):
        where += f" · stopped by budget.{results['stopped']}"
    if test:
        line = (
            f"test {results['metric']} = {test['mean']:.4f} ± {test['std']:.4f} "
            f"(n={test['n']}, {len(test['scores'])} repeat(s)) · results: {where}"
        )
    else:
        line = f"done · results: {where}"
    log.info(line)
    console.print(line)
    return test["mean"] if test else None


def _user_error(exc: BaseException | None) -> UserError | None:
    while exc is not None:
        if isinstance(exc, UserError):
            return exc
        exc = exc.__cause__ or exc.__context__
    return None


def _shown(path: Path) -> str:
    """Paths under the working directory are shown relative to it: shorter, and still copy-pastable."""
    try:
        return str(path.resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(path)
