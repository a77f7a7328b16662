"""`optimas`: the command line. Subcommands dispatch onto the Hydra app after checking the overrides."""
from __future__ import annotations

import sys
from pathlib import Path

from optimas_cli.conf import CONFIG_DIR_FLAGS, GROUPS, options, refuse_sweep, search_path, with_overrides
from optimas_cli.environment import importable_here, prepare_process, quiet_libraries
from optimas_cli.errors import UserError
from optimas_cli.flows.resume import refuse_a_run_in, refuse_a_sweep_in
from optimas_cli.overrides import check_overrides
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
                                      (--program FILE.json: a pipeline=dspy run as your DSPy program's save file)
  optimas show <run> [<other run>]    per-component summary and examples of a run, or two runs lined up
                                      (--failed, --component NAME, --limit N, --split test|validation)
  optimas list                        pipelines, methods, LM backends, LRF backbones, budgets
  optimas model-path [NAME]           the transformers folder of an embedded model (converted once), to serve
                                      it with `transformers serve` or vLLM (docs/serving.md)
  optimas device-check [--out FILE]   the embedded LM, the LRF and GRPO on this machine's GPU (CPU without
                                      one) on tiny models built in seconds: one PASS/FAIL line per check

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
    if command == "device-check":
        from optimas_cli.flows.device_check import device_check_main

        return device_check_main(rest)
    if command not in HYDRA_TASKS:
        return fail(UserError(f"unknown command {command!r}", "run `optimas --help` to see the commands"))
    try:
        found = search_path(rest)
        sweep = "-m" in rest or "--multirun" in rest
        if not sweep:
            refuse_sweep(found.args, f"add -m to run one job per value: optimas {command} -m ...")
        check_overrides(found.args, found, sweep=sweep, fit=command == "run")
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
