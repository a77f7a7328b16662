"""Checks of a run's values before any work: a bad size, repeat count or temperature is one clear line.

Hydra accepts any value an override spells (`budget.train_size=abc`, `repeats=0`), and without these
checks they surface late and badly: a traceback, a negative size slicing from the end of a split, a
test score of 0.0 from zero repeats, a temperature the provider clamps or rejects mid-run.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from omegaconf import DictConfig

from optimas_cli.config_schema import check_config
from optimas_cli.errors import UserError
from optimas_cli.system.budget import Budget

# Sampling temperature each provider accepts; the model name's prefix says which provider serves it.
# OpenAI-compatible servers (vLLM, SGLang, Ollama) follow OpenAI's range; the embedded model samples
# at any positive temperature, and past 2 its 135M output is noise, so it gets the same bound.
TEMPERATURE_RANGES = {"anthropic": (0.0, 1.0), "default": (0.0, 2.0)}


def provider_of(model: str) -> str:
    name = str(model).lower()
    return "anthropic" if name.startswith("anthropic/") or name.startswith("claude") else "default"


def _integer(key: str, value: Any, least: int, nullable: bool) -> None:
    if value is None and nullable:
        return
    if isinstance(value, bool) or not isinstance(value, int):
        whole = " (or null for the whole split)" if nullable else ""
        raise UserError(f"{key} must be a whole number, got {value!r}", f"set {key}=<integer >= {least}>{whole}")
    if value < least:
        raise UserError(f"{key} must be at least {least}, got {value}", f"set {key} to {least} or more")


def _temperature(key: str, value: Any, model: str) -> None:
    if value is None:
        return
    low, high = TEMPERATURE_RANGES[provider_of(model)]
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise UserError(f"{key} must be a number, got {value!r}", f"set {key} to a value in [{low}, {high}]")
    if not low <= value <= high:
        raise UserError(f"{key}={value} is outside [{low}, {high}], the range {model} accepts",
                        f"set {key} to a value in [{low}, {high}]")


def _scheduler(policy: Any) -> None:
    """Algorithm 1's component scheduler; checked here, not first after Stage 1 has been paid for."""
    if policy is None:
        return
    from optimas_cli.optim.scheduler import ComponentScheduler

    try:
        ComponentScheduler(["-"], str(policy))
    except ValueError as error:
        raise UserError(f"method.scheduler: {error}", "e.g. method.scheduler=uniform") from None


def check_values(cfg: DictConfig | Mapping) -> None:
    """Raise UserError on the first bad value among the budget sizes, repeats, the loop's
    scheduler and LM temperatures, then every other key against config_schema's tables. `optimas plan`
    and `optimas run` both pass here."""
    if cfg.get("budget") is not None:
        Budget.from_mapping(cfg["budget"])  # the budget group's one home for its keys and bounds
    if "repeats" in cfg:
        _integer("repeats", cfg["repeats"], 1, False)
    _scheduler((cfg.get("method") or {}).get("scheduler"))
    lm = cfg.get("lm") or {}
    model = str(lm.get("model", ""))
    _temperature("lm.temperature", lm.get("temperature"), model)
    collect = (cfg.get("lrf") or {}).get("collect") or {}
    _temperature("lrf.collect.temperature", collect.get("temperature"), model)
    check_config(cfg)
