"""What a run spent of its budget caps: the capped quantity (optimization only: the final validation and
the test evaluations are outside budget.max_runs), and whether a cap ended the run (report/cap_tables.py
shows them; Table 2 marks the cells)."""
from __future__ import annotations

from optimas_cli.report.runs import Run
from optimas_cli.system.budget import EVALUATION_PHASES, optimization_runs
from optimas_cli.system.caps import CAPS


def capped_spend(ledger: dict, cap: str) -> float | None:
    """What a cap limits, as the run's ledger counts it: executed runs and wall seconds spent optimizing,
    dollars of the whole run (the ledger keeps no per-phase dollars; max_usd covers the test too)."""
    if cap == "max_runs":
        return optimization_runs(ledger)
    if cap == "max_wall":
        phases = ledger.get("by_phase") or {}
        return float(ledger.get("seconds", 0.0)) - sum(float((phases.get(p) or {}).get("seconds", 0.0))
                                                       for p in EVALUATION_PHASES)
    return float(ledger.get("usd", 0.0))


def cap_uses(run: Run) -> list[tuple[str, float, float]]:
    """(cap, limit, spent) for each cap the run ran under."""
    ledger = run.results.get("ledger") or {}
    uses = []
    for cap, limit in sorted((ledger.get("caps") or {}).items()):
        spent = capped_spend(ledger, cap)
        if cap in CAPS and limit is not None and spent is not None:
            uses.append((cap, float(limit), spent))
    return uses


def ended_by_cap(run: Run) -> bool:
    """The run was stopped by a cap, or spent all of one (a matched-cost run ends there as planned)."""
    return bool(run.results.get("stopped")) or any(spent >= limit for _, limit, spent in cap_uses(run))
