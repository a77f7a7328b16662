"""Turning a resolved Hydra config into live objects: pipeline, LM client, run context, method."""
from __future__ import annotations

import random

from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from optimas_cli.errors import UserError
from optimas_cli.system import Pipeline, RunContext, RunLedger, Splits
from optimas_cli.system.run_folder import RunFolder


class LazyLM:
    """Builds the LM client on first use, so pipelines that never call an LM never load one."""

    def __init__(self, cfg: DictConfig):
        self.cfg = cfg
        self._client = None
        self._earlier_usage: dict | None = None  # usage a resumed run's checkpoint recorded

    @property
    def client(self):
        if self._client is None:
            from optimas_cli.lm.client import build_lm

            self._client = build_lm(self.cfg)
            if self._earlier_usage:
                self._client.usage.restore(self._earlier_usage)
        return self._client

    @property
    def model(self) -> str | None:
        """The run's default model, known without loading it (the prompt proposer's `auto` reads it)."""
        return self.cfg.get("model")

    def complete(self, requests, component: str = "-"):
        return self.client.complete(requests, component=component)

    def usage(self) -> dict:
        if self._client is None:
            return dict(self._earlier_usage or {})
        return self._client.usage.to_dict()

    def restore_usage(self, saved: dict) -> None:
        if self._client is not None:
            self._client.usage.restore(saved)
        else:
            self._earlier_usage = saved


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
    return instantiate(cfg.pipeline, data_dir=cfg.data_dir, _convert_="all")


def budget_splits(pipeline: Pipeline, budget: DictConfig) -> Splits:
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
    ctx = RunContext(ledger=RunLedger(len(pipeline.system)), lm=LazyLM(cfg.lm), seed=int(cfg.seed))
    folder.restore_accounts(ctx)
    return ctx


def build_method(cfg: DictConfig):
    return instantiate(cfg.method, _convert_="all")


def resolved(cfg: DictConfig) -> dict:
    return OmegaConf.to_container(cfg, resolve=True)

