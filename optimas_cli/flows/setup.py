"""Turning a resolved Hydra config into live objects: pipeline, LM client, run context, method."""
from __future__ import annotations

import math
import os
import random

from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf
from rich.console import Console

from optimas_cli.config_schema import build_parameters
from optimas_cli.errors import UserError
from optimas_cli.flows.matched import matched_max_runs
from optimas_cli.flows.resume import ORIGINAL_CONFIG
from optimas_cli.system import Pipeline, RunContext, RunLedger, Splits
from optimas_cli.system.budget import Budget
from optimas_cli.system.caps import BudgetCaps
from optimas_cli.system.run_folder import RunFolder


class LazyLM:
    """Builds the LM client on first use, so pipelines that never call an LM never load one."""

    def __init__(self, cfg: DictConfig):
        self.cfg = cfg
        self._client = None
        self._earlier_usage: dict | None = None  # usage a resumed run's checkpoint recorded
        self._run: tuple[str, float | None] | None = None  # (run folder, time of its last checkpoint)
        self._servers_checked: set[str] = set()

    @property
    def temperature(self) -> float:
        """The configured decoding temperature, known without loading the client (preference
        collection asks it whether downstream repeats can differ)."""
        return float(self.cfg.get("temperature") or 0.0)

    @property
    def client(self):
        if self._client is None:
            from optimas_cli.lm.client import build_lm

            self._client = build_lm(self.cfg)
            if self._earlier_usage:
                self._client.usage.restore(self._earlier_usage)
            if self._run is not None:
                self._client.attach_run(*self._run)
        return self._client

    @property
    def model(self) -> str | None:
        """The run's default model, known without loading it (the prompt proposer's `auto` reads it)."""
        return self.cfg.get("model")

    def attach_run(self, run_id: str, replay_since: float | None) -> None:
        self._run = (run_id, replay_since)
        if self._client is not None:
            self._client.attach_run(run_id, replay_since)

    def complete(self, requests, component: str = "-", phase: str = "-"):
        self._check_servers(requests)
        return self.client.complete(requests, component=component, phase=phase)

    def _check_servers(self, requests) -> None:
        """Before a model's first call: its server answers and serves it (lm/server_check.py)."""
        client = self.client
        if client.api_base is None or client.mock_response is not None:
            return
        from optimas_cli.lm.local.registry import is_local
        from optimas_cli.lm.server_check import check_server

        for model in dict.fromkeys(r.model or client.model for r in requests):
            if model in self._servers_checked or is_local(model):
                continue
            key = os.environ.get(client.api_key_env) if client.api_key_env else None
            check_server(client.api_base, model, key)
            self._servers_checked.add(model)

    def usage(self) -> dict:
        if self._client is None:
            return dict(self._earlier_usage or {})
        return self._client.usage.to_dict()

    def restore_usage(self, saved: dict) -> None:
        if self._client is not None:
            self._client.usage.restore(saved)
        else:
            self._earlier_usage = saved

    def usage_snapshot(self) -> dict:
        return self.usage()

    def reset_usage(self, snapshot: dict) -> None:
        if self._client is not None:
            self._client.usage.reset(snapshot)
        else:
            self._earlier_usage = snapshot or None


def seed_everything(seed: int) -> None:
    random.seed(seed)
    try:
        import numpy as np

        np.random.seed(seed)
        import torch

        torch.manual_seed(seed)
    except ImportError:
        pass


def build_pipeline(cfg: DictConfig) -> Pipeline:
    target = str(OmegaConf.select(cfg, "pipeline._target_"))
    build_parameters(target)  # one line if it cannot be imported
    try:
        return instantiate(cfg.pipeline, data_dir=cfg.data_dir, _convert_="all")
    except Exception as exc:
        raise build_failed(target, exc) from exc


def build_failed(target: str, exc: BaseException) -> UserError:
    """What a pipeline's build() raised (Hydra wraps it): a UserError as it is, anything else in one line
    with the file and line where it happened, the deepest inside the build module's folder (the user's
    own code, not Hydra's or a library's frames)."""
    import sys
    import traceback

    while exc.__cause__ is not None and not isinstance(exc, UserError):
        exc = exc.__cause__
    if isinstance(exc, UserError):
        return exc
    module = sys.modules.get(target.rpartition(".")[0])
    home = os.path.dirname(os.path.abspath(module.__file__)) if getattr(module, "__file__", None) else None
    frames = traceback.extract_tb(exc.__traceback__)
    inside = [f for f in frames if home and os.path.abspath(f.filename).startswith(home + os.sep)]
    where = (inside or frames)[-1] if frames else None
    message = (str(exc).strip().splitlines() or [""])[0]
    shown = where and os.path.abspath(where.filename)
    if shown and shown.startswith(os.getcwd() + os.sep):  # the user's own folder: the short name they know
        shown = os.path.relpath(shown)
    at = f" at {shown}:{where.lineno}" if where else ""
    return UserError(f"{target}() raised {type(exc).__name__}: {message}{at}",
                     "fix the pipeline's build() there (see docs/own_pipeline.md)")


def build_budget(cfg: DictConfig) -> Budget:
    return Budget.from_mapping(OmegaConf.to_container(cfg.budget, resolve=True))


def budget_splits(pipeline: Pipeline, budget: Budget) -> Splits:
    """Cap each split at the budget's size (null keeps the whole split); the order is the loader's."""
    s = pipeline.splits

    def cap(rows, n):
        return list(rows) if n is None else list(rows)[: int(n)]

    splits = Splits(cap(s.train, budget.train_size), cap(s.val, budget.val_size), cap(s.test, budget.test_size))
    empty = [k for k, v in splits.sizes().items() if v == 0]
    if empty:
        raise UserError(f"pipeline {pipeline.name!r} has empty split(s) {empty}", "check data_dir and the budget sizes")
    return splits


def build_context(cfg: DictConfig, pipeline: Pipeline, folder: RunFolder) -> RunContext:
    """A fresh context, or, in a resumed run folder, one that goes on counting from its last checkpoint."""
    ctx = RunContext(ledger=RunLedger(len(pipeline.system)), lm=LazyLM(cfg.lm), seed=int(cfg.seed),
                     paired_noise=cfg.get("paired_noise", "independent") == "shared")  # runs before it: independent
    checkpointed_at = folder.restore_accounts(ctx)
    if checkpointed_at is None:
        # No checkpoint yet (a run killed or failed early, or a method that never checkpoints): every call
        # an earlier process of this run made is one the resumed run must count, not a free cache hit.
        checkpointed_at = _started(folder)
    ctx.lm.attach_run(str(folder.path.resolve()), checkpointed_at)
    ctx.caps = BudgetCaps.from_budget(cfg.budget, spent=lambda: spending(ctx, cfg))
    matched = matched_max_runs(cfg, pipeline.name, folder.path)
    if matched is not None:  # budget.max_runs_from: the reference method's spend is this run's cap
        ctx.caps.max_runs = matched
    return ctx


def _started(folder: RunFolder) -> float | None:
    """When the run in this folder started: its first process wrote the original config.yaml."""
    config = folder.file(ORIGINAL_CONFIG)
    return config.stat().st_mtime if config.exists() else None


def spending(ctx: RunContext, cfg: DictConfig) -> dict:
    """What the run has spent so far, in the units of the budget caps (see system/caps.py)."""
    costs = run_costs(ctx, cfg)
    return {"max_usd": costs["usd"], "max_runs": ctx.ledger.equivalent_runs(), "max_wall": ctx.ledger.elapsed()}


def run_costs(ctx: RunContext, cfg: DictConfig | None) -> dict:
    """Dollars and compute seconds so far: API calls priced per call (unpriced ones counted apart, never
    as $0), local generation and training as compute seconds, dollars too when compute.price_per_hour is set."""
    lm = ctx.lm.usage() if hasattr(ctx.lm, "usage") else {}
    total = (lm or {}).get("total", {})
    compute = {"local_generation": float(total.get("compute_seconds", 0.0)), **ctx.ledger.compute_so_far()}
    compute_seconds = sum(compute.values())
    rate = _compute_rate(cfg)
    compute_usd = None if rate is None else compute_seconds * rate / 3600
    api_usd = float(total.get("cost", 0.0))
    return {
        "usd": api_usd + (compute_usd or 0.0),
        "api_usd": round(api_usd, 6),
        "unpriced_calls": int(total.get("unpriced", 0)),
        "compute_seconds": round(compute_seconds, 3),
        "compute_by_kind": {k: round(v, 3) for k, v in sorted(compute.items())},
        "compute_usd": None if compute_usd is None else round(compute_usd, 6),
    }


def _compute_rate(cfg: DictConfig | None) -> float | None:
    rate = None if cfg is None else OmegaConf.select(cfg, "compute.price_per_hour")
    if rate is None:
        return None
    try:
        value = float(rate)
    except (TypeError, ValueError):
        value = -1.0
    if isinstance(rate, bool) or not (math.isfinite(value) and value >= 0):  # nan: a cap would never fire
        raise UserError(f"compute.price_per_hour must be dollars per hour (a finite number, 0 or more), got {rate!r}",
                        "e.g. compute.price_per_hour=2.5, or null to report compute in seconds only")
    return value


def build_method(cfg: DictConfig, budget: Budget, console: Console | None = None):
    """The method of the run, sized by the run's one Budget and reporting on `console`."""
    # Partial, then called: instantiate would turn the Budget dataclass into a plain dict.
    return instantiate(cfg.method, _partial_=True, _convert_="all")(budget=budget, console=console)



def refuse_unfit(cfg: DictConfig, built: dict | None = None) -> None:
    """Before a run folder exists: the run's method can change something of its pipeline (Method.fit), with the
    pipeline and the method built as the run builds them (a pipeline that cannot be built, e.g. for missing data,
    says so in its own one line). `built`: pipelines already built for earlier jobs of a sweep, by their config."""
    key = repr((OmegaConf.to_container(cfg.pipeline, resolve=True), cfg.data_dir))
    built = {} if built is None else built
    if key not in built:
        built[key] = build_pipeline(cfg)
    build_method(cfg, build_budget(cfg)).fit(built[key])


def resolved(cfg: DictConfig) -> dict:
    return OmegaConf.to_container(cfg, resolve=True)

