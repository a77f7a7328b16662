"""The budget group (conf/budget/*.yaml) as one typed object: split sizes and loop sizes.

Built once from the config and handed to the runner (split caps) and to every method (loop sizes),
so no method carries a default of its own for these numbers.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from optimas_cli.errors import UserError
from optimas_cli.settings import from_mapping


@dataclass(frozen=True)
class Budget:
    name: str
    train_size: int | None   # caps on the loader's splits (null keeps the whole split)
    val_size: int | None
    test_size: int | None
    search_size: int         # training inputs the local optimizers score candidates on
    num_candidates: int      # prompt candidates per optimizer step
    num_steps: int           # optimizer steps per local optimization
    fresh_size: int          # Stage 2: fresh training inputs collected after each accepted update
    iterations: int          # Algorithm 1's T (also the baselines' rounds / trials / steps)
    weights: Any = None      # GRPO sizes for every loop method on this budget (conf/optimizer/default.yaml reads them)
    max_live_tokens: int | None = None  # the embedded model's rows in flight x their widest KV cache on this budget
                                        # (conf/lm/local.yaml reads it; null: its default)
    # Hard caps (null: none); their one home is system/caps.py (BudgetCaps), which checks them.
    max_usd: Any = None
    max_runs: Any = None
    max_wall: Any = None
    # Matched cost: a method name. Every other method's max_runs is what that method's run of the same
    # pipeline, seed and budget in this sweep spent optimizing (flows/matched.py); it runs uncapped.
    max_runs_from: str | None = None

    @classmethod
    def from_mapping(cls, cfg: Mapping | None) -> Budget:
        budget = from_mapping(cls, cfg, "budget")
        for key in ("train_size", "val_size", "test_size"):
            size = getattr(budget, key)
            if size is not None and size < 1:
                raise UserError(f"budget.{key}={size} must be at least 1", f"e.g. budget.{key}=10, or null for the whole split")
        for key in ("search_size", "num_candidates", "num_steps", "fresh_size"):
            if getattr(budget, key) < 1:
                raise UserError(f"budget.{key}={getattr(budget, key)} must be at least 1", f"e.g. budget.{key}=3")
        if budget.iterations < 0:
            raise UserError(f"budget.iterations={budget.iterations} must be 0 or more", "e.g. budget.iterations=4")
        return budget


# -- what a run spent of its budget, from its ledger as results.json stores it ---------------------------------
# The final validation and the test evaluations are outside budget.max_runs (Table 3's budget is the optimization).
EVALUATION_PHASES = ("final_validation", "test", "test_initial")


def optimization_runs(ledger: Mapping, count: str = "runs") -> float | None:
    """Equivalent system runs spent before the final validation and the test evaluations (what
    budget.max_runs caps), by one of the ledger's two counts: "runs" (executed) or "paper_runs" (the
    paper's accounting). None where the ledger predates that count."""
    if count not in ledger:
        return None
    phases = ledger.get("by_phase") or {}
    spent = sum(float((phases.get(p) or {}).get(count, 0.0)) for p in EVALUATION_PHASES)
    return round(float(ledger[count]) - spent, 4)


def optimization_pace(ledger: Mapping) -> float | None:
    """Wall seconds per executed optimization run (the `optimize` phase over the runs before the final
    validation and test); None where nothing was executed yet."""
    runs = optimization_runs(ledger)
    seconds = ((ledger.get("by_phase") or {}).get("optimize") or {}).get("seconds")
    return float(seconds) / runs if runs and seconds else None
