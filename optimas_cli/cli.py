"""`optimas`: the command line. Subcommands dispatch onto the Hydra app after checking the overrides."""
from __future__ import annotations

import os
import re
import sys
from pathlib import Path

from omegaconf import OmegaConf

from optimas_cli.conf import (
    CONF_DIR,
    CONFIG_DIR_FLAGS,
    GROUPS,
    SearchPath,
    options,
    refuse_sweep,
    search_path,
    with_overrides,
)
from optimas_cli.config_schema import suggest_key
from optimas_cli.environment import prepare_process
from optimas_cli.errors import UserError
from optimas_cli.flows.resume import check_resume, refuse_a_run_in, refuse_a_sweep_in
from optimas_cli.flows.validate import check_values
from optimas_cli.system.run_folder import check_free_space, prepare_run_dir

HYDRA_TASKS = {"run": "run", "collect": "collect", "train-lrf": "train-lrf", "eval": "eval"}

HELP = """\
optimas — optimize compound AI systems with globally aligned local reward functions.

usage:
  optimas run [-m] [key=value ...]    optimize a pipeline and evaluate it (-m: a sweep over comma lists)
  optimas plan [key=value ...]        what `optimas run` with the same overrides will spend (no LM call)
  optimas headroom [key=value ...]    score the initial system, the single LLM and every single change on
                                      validation, with CIs: where there is room (--dry-run: the plan only)
  optimas collect [key=value ...]     collect preference pairs for every component (resumable)
  optimas train-lrf [key=value ...]   train the local reward functions and report their alignment
  optimas eval [key=value ...]        score a configuration (config_file=<run>/best_config.json) on the test
                                      split, or on every example of eval_file=<examples.jsonl>
  optimas report <run folders>        Table 2/3/4-style reports from finished runs
  optimas export <run> [--out FILE]   the optimized system as one readable YAML/JSON file, for
                                      optimas_cli.api.load in your own code (default <run>/export.yaml)
  optimas show <run> [<other run>]    per-component summary and examples of a run, or two runs lined up
                                      (--failed, --component NAME, --limit N, --split test|validation)
  optimas list                        pipelines, methods, LM backends, LRF backbones, budgets
  optimas model-path [NAME]           the transformers folder of an embedded model (converted once), to serve
                                      it with `transformers serve` or vLLM (docs/serving.md)

examples:
  optimas run pipeline=toy_retriever method=unoptimized
  optimas run pipeline=hotpotqa lm=openai budget=paper
  optimas run -m pipeline=pubmedqa,amazon method=unoptimized,single_llm
  optimas run --config-dir conf pipeline=my_pipeline        your own pipeline (docs/own_pipeline.md)
  optimas run pipeline=toy_hint tracking=mlflow             log the finished run to MLflow (or tracking=wandb)

Hydra's own flags work too (e.g. `optimas run --cfg job` prints the composed config).
"""


def fail(err: UserError) -> int:
    print(f"optimas: {err}", file=sys.stderr)
    return 2


def list_groups(args: list[str]) -> int:
    """Every group's options; with --config-dir / hydra.searchpath / group=<file.yaml>, what each adds."""
    try:
        found = search_path(args)
    except UserError as err:
        return fail(err)
    # conf/optimizer/ is no top-level choice (not in GROUPS): the loop methods' defaults put it at method.optimizer.
    how = {"optimizer": "  (the loop methods' method.optimizer: optimizer@method.optimizer=NAME)"}
    listed = (*GROUPS, *how)
    for group in listed:
        names = options(group)
        if names:
            print(f"{group + 's':<12} {', '.join(names)}{how.get(group, '')}")
    for root in found.roots:
        for group in listed:
            added = [n for n in options(group, (root,)) if n not in options(group)]
            if added:
                print(f"{group + 's':<12} {', '.join(added)}  (from {root})")
    return 0


# Hydra flags that take a value (the value is not an override).
VALUED_FLAGS = {"--cfg", "-c", "--package", "-p", "--config-name", "-cn", "--config-path", "-cp",
                "--config-dir", "-cd", "--shell-completion", "-sc", "--experimental-rerun", "--info", "-i"}


def overrides_only(args: list[str]) -> list[str]:
    """The key=value overrides among Hydra's command-line arguments."""
    out, skip = [], False
    for a in args:
        if skip:
            skip = False
            if "=" not in a:  # --info takes an optional value
                continue
        if a.startswith("-"):
            skip = a in VALUED_FLAGS
            continue
        out.append(a)
    return out


def check_overrides(overrides: list[str], found: SearchPath | None = None, with_hydra: bool = False,
                    sweep: bool = False):
    """Catch unknown group options, malformed overrides and bad values before Hydra prints a stack
    trace; returns the config composed with each sweep's first value (`with_hydra`: and its hydra node).
    `found`: the user's config folders. `sweep` (-m): every job of the sweep is composed and checked, so a
    bad value in its last job stops the sweep before its first job runs."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    args = overrides_only(overrides)
    try:
        parsed = OverridesParser.create().parse_overrides(args)
    except HydraException as exc:
        first = str(exc).strip().splitlines()[0]
        raise UserError(f"cannot parse the overrides ({first})", "write them as key=value, e.g. pipeline=hotpotqa") from None
    for o in parsed:
        group = o.key_or_group.lstrip("+~")
        if group not in GROUPS:
            continue
        values = list(o.sweep_string_iterator()) if o.is_sweep_override() else [o.value()]
        known = options(group, found.roots if found else ())
        for v in values:
            if str(v) not in known:
                raise UserError(
                    f"unknown {group} {str(v)!r}; available {group}s: {', '.join(known)}",
                    f"pass one of them, e.g. {group}={known[0] if known else '...'}",
                )
    searchpath = found.override(every_root=True) if found else []
    first = None
    for job in _sweep_jobs(parsed, searchpath) if sweep else [_first_values(parsed)]:
        cfg = _compose(job, searchpath, with_hydra)
        check_values(cfg)
        _check_costs(cfg)
        resume = OmegaConf.select(cfg, "resume")
        if resume:
            check_resume(str(resume), cfg)
        first = cfg if first is None else first
    return first


def _check_costs(cfg) -> None:
    """Caps, prices, the tracker's package and its database folder are checked before anything runs: a bad
    one is one line, not a late traceback."""
    from optimas_cli.flows.setup import run_costs
    from optimas_cli.lm.pricing import CallPrice
    from optimas_cli.system import RunContext, RunLedger
    from optimas_cli.system.caps import BudgetCaps
    from optimas_cli.tracking.trackers import check_installed, check_store

    check_installed(str(OmegaConf.select(cfg, "tracking.name") or "none"))
    check_store(OmegaConf.select(cfg, "tracking") or {})
    BudgetCaps.from_budget(cfg.budget)
    CallPrice.from_config(OmegaConf.select(cfg, "lm.price"))
    run_costs(RunContext(ledger=RunLedger(1)), cfg)  # compute.price_per_hour


def _task_overrides(parsed) -> list:
    """The overrides of the run's config, not of Hydra's own (hydra.*, hydra/launcher=...)."""
    return [o for o in parsed if not o.key_or_group.startswith(("hydra", "+hydra", "~hydra"))]


def _first_values(parsed) -> list[str]:
    """The overrides with each sweep's first value."""
    return [f"{o.get_key_element()}={next(iter(o.sweep_string_iterator()))}" if o.is_sweep_override()
            else o.input_line for o in _task_overrides(parsed)]


def _sweep_jobs(parsed, searchpath: list[str]) -> list[list[str]]:
    """Each job's overrides, as Hydra's basic sweeper makes them when `-m` starts: every combination of the
    comma lists of hydra.sweeper.params (an experiment's, read from the config composed without the swept
    keys, as Hydra does) and of the command line, whose own win."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    fixed = [o.input_line for o in _task_overrides(parsed) if not o.is_sweep_override()]
    hydra = _compose(fixed, searchpath, with_hydra=True).hydra
    params = [f"{key}={value}" for key, value in (OmegaConf.select(hydra, "sweeper.params") or {}).items()]
    try:
        swept = [*OverridesParser.create().parse_overrides(params), *_task_overrides(parsed)]
        (jobs,) = BasicSweeper.split_arguments(swept, None)
    except HydraException as exc:
        raise UserError(f"cannot expand the sweep ({str(exc).strip().splitlines()[0]})",
                        "write each swept key as key=a,b,c") from None
    return jobs


def _compose(overrides: list[str], searchpath: list[str], with_hydra: bool = False):
    """Compose the config, so an unknown key fails here, readably; Hydra's own fix, when it names one
    ("To append to your config use +key=value"), is kept."""
    from hydra import compose, initialize_config_dir
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    try:
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
            return compose(config_name="config", overrides=[*overrides, *searchpath], return_hydra_config=with_hydra)
    except (HydraException, OmegaConfBaseException) as exc:
        first, *rest = str(exc).strip().splitlines()
        typo = re.match(r"Could not override '([^']+)'", first)
        if typo and (err := suggest_key(typo[1])):
            raise err from None
        hydra_fix = next((line.strip() for line in rest if line.startswith("To ")), None)
        keys = "run `optimas list` and `optimas run --cfg job` to see valid keys"
        raise UserError(f"bad override: {first}", f"{hydra_fix} ({keys})" if hydra_fix else keys) from None


def quiet_libraries() -> None:
    """Library defaults for a terminal run, set before those libraries are imported: litellm's
    per-call INFO lines and weight-loading bars would drown the run's own progress lines."""
    os.environ.setdefault("LITELLM_LOG", "ERROR")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    # Idle OpenMP threads sleep instead of spinning: generation in the provider's thread and LRF
    # training in the main thread share the cores, and spinning stalls both on a busy machine.
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


def plan_command(args: list[str]) -> int:
    """`optimas plan`: composed like `optimas run`, but outside the Hydra app, so no run folder is made."""
    if any(a.startswith("-") and a.partition("=")[0] not in CONFIG_DIR_FLAGS for a in args):
        return fail(UserError("optimas plan takes key=value overrides (and --config-dir) only",
                              "plan one run at a time, without -m"))
    try:
        found = search_path(args)
        refuse_sweep(found.args, "plan one value at a time (`optimas run -m ...` runs a sweep)")
        cfg = check_overrides(found.args, found)
        quiet_libraries()
        from optimas_cli.flows.plan import plan_run

        run_dir = next((a.partition("=")[2] for a in found.args if a.startswith("hydra.run.dir=")), None)
        print(plan_run(cfg, Path(run_dir) if run_dir else None))
    except UserError as err:
        return fail(err)
    except Exception as exc:  # Hydra wraps what a pipeline's build raises: the same one line as `run`
        from optimas_cli.app import user_error_in

        err = user_error_in(exc)
        if err is None:
            raise
        return fail(err)
    return 0


def headroom_command(args: list[str]) -> int:
    """`optimas headroom [--dry-run] <overrides>`: composed like `optimas run`, outside the Hydra app."""
    dry_run = "--dry-run" in args
    rest = [a for a in args if a != "--dry-run"]
    if any(a.startswith("-") for a in rest):
        return fail(UserError("optimas headroom takes key=value overrides and --dry-run only",
                              "scan one pipeline at a time, without -m"))
    try:
        refuse_sweep(rest, "scan one value at a time")
        cfg = check_overrides(rest)
        quiet_libraries()
        from rich.console import Console

        from optimas_cli.flows.headroom import scan

        scan(cfg, Console(highlight=False, soft_wrap=True), dry_run=dry_run)
    except UserError as err:
        return fail(err)
    return 0


def importable_here() -> None:
    """A user's pipeline module beside their config imports as it would under `python -m`: the working
    directory goes on the import path, for this process and the sweep jobs it starts."""
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    paths = os.environ.get("PYTHONPATH", "").split(os.pathsep)
    if cwd not in paths:
        os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (cwd, *paths) if p)


def main(argv: list[str] | None = None) -> int:
    prepare_process()
    importable_here()
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(HELP)
        return 0
    command, rest = argv[0], argv[1:]
    if command == "list":
        return list_groups(rest)
    if command == "report":
        from optimas_cli.report.cli import report_main

        return report_main(rest)
    if command == "show":
        from optimas_cli.report.show import show_main

        return show_main(rest)
    if command == "export":
        from optimas_cli.flows.export import export_main

        return export_main(rest)
    if command == "plan":
        return plan_command(rest)
    if command == "model-path":
        from optimas_cli.lm.local.convert import model_path_command

        return model_path_command(rest)
    if command == "headroom":
        return headroom_command(rest)
    if command not in HYDRA_TASKS:
        return fail(UserError(f"unknown command {command!r}", "run `optimas --help` to see the commands"))
    try:
        found = search_path(rest)
        sweep = "-m" in rest or "--multirun" in rest
        if not sweep:
            refuse_sweep(found.args, f"add -m to run one job per value: optimas {command} -m ...")
        check_overrides(found.args, found, sweep=sweep)
    except UserError as err:
        return fail(err)
    rest = found.args
    # `run` keeps the config's task, so an experiment that sets one (table4: train-lrf) is respected.
    extra = [] if command == "run" else [f"task={HYDRA_TASKS[command]}"]
    if command == "eval":  # the folder says what it holds: <time>-<pipeline>-eval, not the default method's name
        extra.append("+run_label=eval")
    resume = next((a.split("=", 1)[1] for a in rest if a.startswith("resume=")), None)
    if resume:  # continue inside the earlier run folder
        extra.append(f"hydra.run.dir={resume}")
    run_dir = resume or next((a.split("=", 1)[1] for a in rest if a.startswith("hydra.run.dir=")), None)
    sweep_dir = next((a.split("=", 1)[1] for a in rest if a.startswith("hydra.sweep.dir=")), None)
    try:
        if run_dir and "${" not in run_dir and "-m" not in rest and "--multirun" not in rest:
            refuse_a_run_in(run_dir, resume)  # before Hydra writes its .hydra/ files there
            prepare_run_dir(run_dir)
        else:
            if sweep and sweep_dir and "${" not in sweep_dir:
                refuse_a_sweep_in(sweep_dir)
            check_free_space("outputs" if "-m" not in rest and "--multirun" not in rest else "multirun")
    except UserError as err:
        return fail(err)
    quiet_libraries()
    from optimas_cli.app import EXIT_CAPPED, STOPPED_BY_CAP
    from optimas_cli.app import main as hydra_main

    sys.argv = ["optimas", *with_overrides(rest, extra)]
    STOPPED_BY_CAP.clear()
    hydra_main()
    return EXIT_CAPPED if STOPPED_BY_CAP else 0


if __name__ == "__main__":
    sys.exit(main())
