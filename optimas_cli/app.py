"""The Hydra application behind `optimas run|collect|train-lrf|eval` (single runs and -m sweeps)."""
from __future__ import annotations

import logging
import sys
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf
from rich.console import Console

from optimas_cli.conf import CONF_DIR
from optimas_cli.errors import LMCallFailed, UserError
from optimas_cli.flows.resume import ORIGINAL_CONFIG, refuse_a_run_in
from optimas_cli.flows.validate import check_values
from optimas_cli.interrupts import SIGTERM_EXIT, Terminated, sigterm_as_interrupt
from optimas_cli.provenance import code_record
from optimas_cli.stats import Interval, mean_ci
from optimas_cli.system.caps import BudgetExhausted
from optimas_cli.system.run_folder import RunFolder, disk_full, disk_full_error

log = logging.getLogger("optimas")
# One rule for every task: a job that a budget cap stopped (what it did is saved, `resume=` with a
# raised cap continues it) makes the command exit with EXIT_CAPPED once all jobs of a sweep ran.
EXIT_CAPPED = 3
STOPPED_BY_CAP: list[str] = []
console = Console(highlight=False, soft_wrap=True)
errors = Console(stderr=True, highlight=False, soft_wrap=True)


def task_flow(task: str):
    code_record()  # read before the work: a checkout edited or switched during a long run is not what it ran
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
    try:
        # The command line refused a named folder that holds a run before Hydra wrote there; this is a sweep's
        # job, or a default folder named after the same second, pipeline and method as an earlier run's.
        sweep = HydraConfig.get().mode == RunMode.MULTIRUN
        refuse_a_run_in(folder.path, cfg.get("resume"), "hydra.sweep.dir" if sweep else "hydra.run.dir")
        folder.lock()  # one writer per folder: a second process on it stops here, before writing
    except UserError as err:
        errors.print(f"[red]optimas: {err}[/]")
        sys.exit(2)
    try:
        return _run_locked(cfg, folder)
    except Exception as exc:  # every writer's full disk (json, safetensors, torch, the LM cache) is one line
        full = disk_full(exc)
        if full is None:
            raise
        logging.raiseExceptions = False  # the log file is on the full disk too: no traceback per log line
        errors.print(f"optimas: {disk_full_error(folder.path, full, cfg.task)}", style="red", markup=False)
        sys.exit(2)
    finally:
        folder.unlock()


def _run_locked(cfg: DictConfig, folder: RunFolder) -> float | None:
    save_config(cfg, folder)
    try:
        with sigterm_as_interrupt():
            check_values(cfg)  # again: the app started directly (python -m optimas_cli.app) skips the CLI's checks
            results = task_flow(cfg.task)(cfg, folder, console)
    except BudgetExhausted as stop:  # collect / train-lrf stopped by a cap (`run` handles its own)
        errors.print(f"[yellow]optimas: {stop}; continue with a raised cap: optimas {cfg.task} ... resume={folder}[/]")
        STOPPED_BY_CAP.append(str(folder))
        return None
    except Exception as exc:  # Hydra wraps errors raised while instantiating configs: unwrap ours
        if disk_full(exc) is not None:  # the LM cache's UserError too: run_task says it as every full disk
            raise
        err = user_error_in(exc)
        if err is None:
            raise
        if isinstance(err, LMCallFailed):  # mid-run: what was done is kept, so say how to go on from it
            err = LMCallFailed(err.problem, f"{err.fix + ', then ' if err.fix else ''}continue with: "
                                            f"optimas {cfg.task} ... resume={folder}")
        log.error("%s", err)
        errors.print(f"optimas: {err}", style="red", markup=False)  # no markup: "[Errno 111]" is text
        sys.exit(2)
    except KeyboardInterrupt as stop:
        what = "terminated (SIGTERM)" if isinstance(stop, Terminated) else "interrupted"
        log.warning("%s", what)
        console.print(f"[yellow]{what}; continue with: optimas {cfg.task} ... resume={folder}[/]")
        sys.exit(SIGTERM_EXIT if isinstance(stop, Terminated) else 130)
    where = _shown(folder.file("results.json"))
    test = results.get("test")
    if results.get("stopped"):
        where += f" · stopped by budget.{results['stopped']}"
        STOPPED_BY_CAP.append(str(folder))
    line = f"done · results: {where}" if not test else (
        f"test {results['metric']} = {test['mean']:.4f} ± {test['std']:.4f} "
        f"(n={test['n']}, {len(test['scores'])} repeat(s)) · results: {where}")
    log.info(line)
    console.print(line)
    if results.get("test_gain"):
        console.print(before_after_line(results))
        console.print(f"report: optimas report {_shown(folder.path)}")
    return test["mean"] if test else None


def save_config(cfg: DictConfig, folder: RunFolder) -> None:
    """The resolved config into the run folder. The folder's original config stays as it was (a resume
    is checked against it); a resumed run's own config goes beside it."""
    # Written whole or not at all: a half-written one blocks resume. Without resume= the folder holds no earlier
    # run (refuse_a_run_in), or one that failed before it started: this run's config is the folder's.
    folder.write_text("config.resumed.yaml" if cfg.get("resume") else ORIGINAL_CONFIG, OmegaConf.to_yaml(cfg, resolve=True))


def before_after_line(results: dict) -> str:
    """Initial vs final configuration on the same test examples, each with its 95% CI, and the paired gain."""
    def scored(split: dict) -> str:
        ci = mean_ci(split["per_example"])
        return f"{ci.estimate:.4f} [{ci.low:.4f}, {ci.high:.4f}]"

    gain = results["test_gain"]
    interval = Interval(gain["delta"], gain["ci_low"], gain["ci_high"])
    verdict = "a real change" if interval.excludes_zero else "not distinguishable from 0"
    return (f"test {results['metric']}: initial {scored(results['test_initial'])} → {results['method']} "
            f"{scored(results['test'])} · paired gain {gain['delta']:+.4f} [{gain['ci_low']:+.4f}, "
            f"{gain['ci_high']:+.4f}] (95% CI, {verdict})")


def user_error_in(exc: BaseException | None) -> UserError | None:
    """The UserError behind `exc` (Hydra wraps what instantiated code raises), or None."""
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
