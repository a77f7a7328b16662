"""Hard budget caps: dollars, equivalent system runs, wall time. Checked before each unit of work.

A unit is one component's Stage 1 collection, an LRF training epoch, the judge's calls, the loop's
opening validation, an iteration's validation pass (and each method's own safe points). Before a
unit, the run stops once a cap is reached, and also when the unit's known cost (`ahead`: a
validation pass's system runs) would cross it, so a cap is overshot by at most one unit whose cost
is not known in advance. The stop raises BudgetExhausted naming the cap; what was done up to the last
checkpoint is saved and the run resumes with a raised cap (work after it is redone, as after a kill).
A method whose steps have no known cost (a rollout batch, a local search, an LM-driven step) runs them
inside `stops_mid_phase`: the caps are checked after every batch of component executions, so such a
step stops within one batch past the cap, and its partial result is dropped (only a configuration
validated within the cap is returned).
Warnings at 50% and 80% of each cap, each when it is crossed: a unit that crosses both warns once, at 80%.
"""
from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from optimas_cli.errors import UserError

log = logging.getLogger("optimas")
CAPS = {"max_usd": "dollars", "max_runs": "equivalent system runs", "max_wall": "seconds of wall time"}
WARN_AT = (0.5, 0.8)
# Caps on what the whole run may spend: once one is reached, even the test evaluation would cross it.
# max_runs counts the optimization's system runs (Table 3's budget), which the test evaluation is not part of.
FORBIDS_TEST = ("max_usd", "max_wall")


class BudgetExhausted(Exception):
    """Raised at a safe point once a cap is reached; the run's state was checkpointed just before."""

    def __init__(self, cap: str, spent: float, limit: float, ahead: float = 0.0):
        self.cap, self.spent, self.limit = cap, spent, limit
        if spent >= limit or not ahead:
            super().__init__(f"budget cap {cap}={limit:g} reached ({spent:.4g} {CAPS[cap]} spent)")
        else:
            super().__init__(f"budget cap {cap}={limit:g} would be crossed ({spent:.4g} {CAPS[cap]} spent, "
                             f"the next step needs {ahead:.4g} more)")

    @property
    def forbids_test(self) -> bool:
        return self.cap in FORBIDS_TEST


@dataclass
class BudgetCaps:
    """`spent()` returns what the run has spent so far, keyed like CAPS (set by the run's flow)."""

    max_usd: float | None = None
    max_runs: float | None = None
    max_wall: float | None = None
    spent: Callable[[], Mapping[str, float]] | None = None
    on_warning: Callable[[str], None] | None = None
    stopped: BudgetExhausted | None = None  # the cap that stopped the run, once one has
    _warned: set = field(default_factory=set)

    @classmethod
    def from_budget(cls, budget: Mapping[str, Any], **kwargs: Any) -> BudgetCaps:
        """The caps of a conf/budget node; a negative or non-numeric value is a UserError."""
        values = {}
        for cap in CAPS:
            raw = budget.get(cap)
            if raw is None:
                continue
            try:
                value = float(raw)
                if isinstance(raw, bool):
                    raise ValueError
            except (TypeError, ValueError):
                raise UserError(f"budget.{cap} must be a number of {CAPS[cap]}, got {raw!r}",
                                f"e.g. budget.{cap}=10, or budget.{cap}=null for no cap") from None
            if not value > 0:
                raise UserError(f"budget.{cap} must be above 0, got {raw!r}",
                                f"e.g. budget.{cap}=10, or budget.{cap}=null for no cap")
            values[cap] = value
        return cls(**values, **kwargs)

    def limits(self) -> dict[str, float]:
        return {cap: getattr(self, cap) for cap in CAPS if getattr(self, cap) is not None}

    def check(self, ahead: Mapping[str, float] | None = None) -> None:
        """Before a unit of work: warn at 50% and 80% of a cap, raise BudgetExhausted once one is
        reached or would be crossed by `ahead` (the unit's cost, keyed like CAPS, where known)."""
        limits = self.limits()
        if not limits or self.spent is None:
            return
        spent = self.spent()
        for cap, limit in limits.items():
            used, needed = float(spent.get(cap, 0.0)), float((ahead or {}).get(cap, 0.0))
            if used >= limit or used + needed > limit:
                self.stopped = BudgetExhausted(cap, used, limit, needed)
                raise self.stopped
            crossed = [share for share in WARN_AT if used >= share * limit]
            if crossed and (cap, crossed[-1]) not in self._warned:
                self._warned.update((cap, share) for share in crossed)  # the lower ones are past too
                message = (f"budget: {used:.4g} of {cap}={limit:g} {CAPS[cap]} spent "
                           f"({100 * crossed[-1]:.0f}% reached)")
                log.warning(message)
                if self.on_warning is not None:
                    self.on_warning(message)


    def check_exceeded(self) -> None:
        """After a batch of work inside `stops_mid_phase`: raise BudgetExhausted once a cap is exceeded
        (a step that ends exactly at the cap is within it)."""
        limits = self.limits()
        if not limits or self.spent is None:
            return
        spent = self.spent()
        for cap, limit in limits.items():
            used = float(spent.get(cap, 0.0))
            if used > limit:
                self.stopped = BudgetExhausted(cap, used, limit)
                raise self.stopped


@contextmanager
def stops_mid_phase(ctx) -> Iterator[None]:
    """Inside the block every batch of component executions the ledger records is followed by a cap
    check (BudgetCaps.check_exceeded): a step of unknown cost that crosses a cap raises BudgetExhausted
    after the batch that crossed it, mid-phase. The caller catches it and returns what it validated
    within the cap."""
    caps = getattr(ctx, "caps", None)
    if caps is None:
        yield
        return
    ledger, before = ctx.ledger, ctx.ledger.after_record
    ledger.after_record = caps.check_exceeded
    try:
        yield
    finally:
        ledger.after_record = before


def check_caps(ctx, ahead: Mapping[str, float] | None = None) -> None:
    """The call before a unit of work: a no-op for a run without caps."""
    caps = getattr(ctx, "caps", None)
    if caps is not None:
        caps.check(ahead)


def cap_reached(ctx, ahead: Mapping[str, float] | None = None) -> bool:
    """For a loop that stops itself before a unit: True once a cap is reached or `ahead` would cross
    it (`ctx.caps.stopped` then names it), after the same warnings as check_caps."""
    try:
        check_caps(ctx, ahead)
    except BudgetExhausted:
        return True
    return False


def runs_left(ctx) -> float | None:
    """The equivalent system runs a max_runs cap still allows (None without one): what a unit of adjustable
    size (Optimas' lazy LRF refresh) is sized from, so that it fits before the cap rather than crossing it."""
    caps = getattr(ctx, "caps", None)
    if caps is None or caps.max_runs is None or caps.spent is None:
        return None
    return max(0.0, caps.max_runs - float(caps.spent().get("max_runs", 0.0)))


def ends_at_run_cap(matched: bool, caps: BudgetCaps | None) -> bool:
    """Whether the run cap, not an iteration count, ends a matched-cost run's search (budget.max_runs_from
    set its max_runs), so the baseline spends what the reference spent."""
    return matched and caps is not None and caps.max_runs is not None


def end_as_planned(matched: bool, caps: BudgetCaps | None, what: str) -> None:
    """At the end of a matched-cost search (see ends_at_run_cap): the run cap is where it was meant to end,
    so it is not a stop (no `stopped` in results.json, exit 0, no "continue with a raised cap")."""
    if ends_at_run_cap(matched, caps) and caps.stopped is not None and caps.stopped.cap == "max_runs":
        log.info("matched cost: %s; %s ends there, as planned", caps.stopped, what)
        caps.stopped = None


def iterations_in_words(matched: bool, iterations: int, caps: BudgetCaps | None) -> str:
    """How long such a search runs, in the words the terminal prints at its start."""
    if ends_at_run_cap(matched, caps):
        return f"iterations until the matched cap of {caps.max_runs:g} executed runs"
    return f"{iterations} iterations"
