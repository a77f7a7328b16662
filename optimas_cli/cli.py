"""`optimas`: the command line. Subcommands dispatch onto the Hydra app after checking the overrides."""
from __future__ import annotations

import os
import sys

from omegaconf import OmegaConf

from optimas_cli.conf import CONF_DIR, GROUPS, options
from optimas_cli.environment import prepare_process
from optimas_cli.errors import UserError
from optimas_cli.flows.resume import check_resume
from optimas_cli.flows.validate import check_values

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
  optimas eval [key=value ...]        evaluate a configuration (e.g. config_file=<run>/best_config.json)
  optimas report <run folders>        Table 2/3/4-style reports from finished runs
  optimas show <run> [<other run>]    per-component summary and examples of a run, or two runs lined up
                                      (--failed, --component NAME, --limit N, --split test|validation)
  optimas list                        pipelines, methods, LM backends, LRF backbones, budgets

examples:
  optimas run pipeline=toy_retriever method=unoptimized
  optimas run pipeline=hotpotqa lm=openai budget=paper
  optimas run -m pipeline=pubmedqa,amazon method=unoptimized,single_llm

Hydra's own flags work too (e.g. `optimas run --cfg job` prints the composed config).
"""


def fail(err: UserError) -> int:
    print(f"optimas: {err}", file=sys.stderr)
    return 2


def list_groups() -> int:
    for group in GROUPS:
        names = options(group)
        if names:
            print(f"{group + 's':<12} {', '.join(names)}")
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


def check_overrides(overrides: list[str]):
    """Catch unknown group options, malformed overrides and bad values before Hydra prints a stack
    trace; returns the config composed with each sweep's first value."""
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
        known = options(group)
        for v in values:
            if str(v) not in known:
                raise UserError(
                    f"unknown {group} {str(v)!r}; available {group}s: {', '.join(known)}",
                    f"pass one of them, e.g. {group}={known[0] if known else '...'}",
                )
    cfg = _compose_first(parsed)
    check_values(cfg)
    _check_costs(cfg)
    resume = OmegaConf.select(cfg, "resume")
    if resume:
        check_resume(str(resume), cfg)
    return cfg


def _check_costs(cfg) -> None:
    """Caps and prices are checked before anything runs: a bad one is one line, not a late traceback."""
    from optimas_cli.flows.setup import run_costs
    from optimas_cli.lm.pricing import CallPrice
    from optimas_cli.system import RunContext, RunLedger
    from optimas_cli.system.caps import BudgetCaps

    BudgetCaps.from_budget(cfg.budget)
    CallPrice.from_config(OmegaConf.select(cfg, "lm.price"))
    run_costs(RunContext(ledger=RunLedger(1)), cfg)  # compute.price_per_hour


def _compose_first(parsed):
    """Compose the config with each sweep's first value, so an unknown key fails here, readably."""
    from hydra import compose, initialize_config_dir
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    single = []
    for o in parsed:
        if o.key_or_group.startswith(("hydra", "+hydra", "~hydra")):
            continue
        if o.is_sweep_override():
            first = next(iter(o.sweep_string_iterator()))
            single.append(f"{o.get_key_element()}={first}")
        else:
            single.append(o.input_line)
    try:
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
            return compose(config_name="config", overrides=single)
    except (HydraException, OmegaConfBaseException) as exc:
        first = str(exc).strip().splitlines()[0]
        raise UserError(f"bad override: {first}", "run `optimas list` and `optimas run --cfg job` to see valid keys") from None


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
    if any(a.startswith("-") for a in args):
        return fail(UserError("optimas plan takes key=value overrides only", "plan one run at a time, without -m"))
    try:
        cfg = check_overrides(args)
        quiet_libraries()
        from optimas_cli.flows.plan import plan_run

        print(plan_run(cfg))
    except UserError as err:
        return fail(err)
    return 0


def main(argv: list[str] | None = None) -> int:
    prepare_process()
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(HELP)
        return 0
    command, rest = argv[0], argv[1:]
    if command == "list":
        return list_groups()
    if command == "report":
        from optimas_cli.report.cli import report_main

        return report_main(rest)
    if command == "show":
        from optimas_cli.report.show import show_main

        return show_main(rest)
    if command == "plan":
        return plan_command(rest)
    if command == "headroom":
        from optimas_cli.flows.headroom import headroom_main

        return headroom_main(rest)
    if command not in HYDRA_TASKS:
        return fail(UserError(f"unknown command {command!r}", "run `optimas --help` to see the commands"))
    try:
        check_overrides(rest)
    except UserError as err:
        return fail(err)
    # `run` keeps the config's task, so an experiment that sets one (table4: train-lrf) is respected.
    extra = [] if command == "run" else [f"task={HYDRA_TASKS[command]}"]
    resume = next((a.split("=", 1)[1] for a in rest if a.startswith("resume=")), None)
    if resume:  # continue inside the earlier run folder
        extra.append(f"hydra.run.dir={resume}")
    quiet_libraries()
    from optimas_cli.app import main as hydra_main

    sys.argv = ["optimas", *rest, *extra]
    hydra_main()
    return 0


if __name__ == "__main__":
    sys.exit(main())
