"""The command line's overrides checked before Hydra runs them (by `optimas` and by the Python API alike):
an unknown group option, a malformed override, a bad value or a bad price is one line, before any folder."""
from __future__ import annotations

import re

from omegaconf import OmegaConf

from optimas_cli.conf import CONF_DIR, GROUPS, SearchPath, options
from optimas_cli.config_schema import suggest_key
from optimas_cli.errors import UserError
from optimas_cli.flows.resume import check_resume
from optimas_cli.flows.validate import check_values

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
                    sweep: bool = False, fit: bool = False):
    """Catch unknown group options, malformed overrides and bad values before Hydra prints a stack
    trace; returns the config composed with each sweep's first value (`with_hydra`: and its hydra node).
    `found`: the user's config folders. `sweep` (-m): every job of the sweep is composed and checked, so a
    bad value in its last job stops the sweep before its first job runs. `fit` (`optimas run`): each job's method
    can change something of its pipeline (flows/setup.refuse_unfit)."""
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
    first, built = None, {}
    for job in _sweep_jobs(parsed, searchpath) if sweep else [_first_values(parsed)]:
        cfg = _compose(job, searchpath, with_hydra)
        check_values(cfg)
        _check_costs(cfg)
        resume = OmegaConf.select(cfg, "resume")
        if resume:
            check_resume(str(resume), cfg)
        if fit and OmegaConf.select(cfg, "task") == "run":
            from optimas_cli.flows.setup import refuse_unfit  # builds the pipeline: only for a run

            refuse_unfit(cfg, built)
        first = cfg if first is None else first
    return first


def _check_costs(cfg) -> None:
    """Caps, prices, the method's and the tracker's packages and the tracker's database folder are checked
    before anything runs: a bad one is one line, not a late traceback."""
    from optimas_cli.flows.setup import run_costs
    from optimas_cli.lm.pricing import CallPrice
    from optimas_cli.methods import extras
    from optimas_cli.system import RunContext, RunLedger
    from optimas_cli.system.caps import BudgetCaps
    from optimas_cli.tracking.trackers import check_installed, check_store

    extras.check_installed(str(OmegaConf.select(cfg, "method._target_")), str(OmegaConf.select(cfg, "method.name")))
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
