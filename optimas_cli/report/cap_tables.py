"""The report's cap tables: each capped run's limit beside the capped quantity it spent, and how far past it."""
from __future__ import annotations

from optimas_cli.report.caps import cap_uses
from optimas_cli.report.formatting import Table, compact
from optimas_cli.report.paper_tables import method_key, method_label
from optimas_cli.report.runs import Run


def cap_table(runs: list[Run], sources: str) -> Table | None:
    rows = [(r, cap, limit, spent) for r in runs for cap, limit, spent in cap_uses(r)]
    if not rows:
        return None
    table = Table("caps", "Budget caps: what each capped run spent of its cap",
                  ["Pipeline", "Method", "Run", "Cap", "Limit", "Spent", "Over by"], left=4, runs=[r for r, *_ in rows],
                  csv_headers=["pipeline", "method", "variant", "folder", "cap", "limit", "spent", "over_by",
                               "over_by_pct", "stopped"])
    for run, cap, limit, spent in sorted(rows, key=lambda x: (x[0].pipeline, method_key(x[0].method, x[0].variant),
                                                              str(x[0].folder))):
        over = spent - limit
        table.rows.append([run.pipeline, method_label(run.method, run.variant), run.folder.name, f"budget.{cap}",
                           compact(round(limit, 4)), compact(round(spent, 4)),
                           f"{compact(round(over, 4))} ({100 * over / limit:+.1f}%)" if over > 0 else "—"])
        table.csv_rows.append([run.pipeline, run.method, run.variant, str(run.folder), cap, limit, round(spent, 4),
                               round(max(over, 0.0), 4), round(100 * max(over, 0.0) / limit, 2),
                               run.results.get("stopped")])
    table.footnote = (
        "Spent: the capped quantity. budget.max_runs counts the executed runs spent optimizing (the final validation "
        "and the test evaluations are not part of it); max_wall the seconds spent optimizing; max_usd the whole "
        "run's dollars. Over by: past the cap, in its unit and as a share of it. A run may go past its cap by at "
        "most one batch of component executions (system/caps.py); runs made before caps were exact may show more. "
        f"{sources}")
    return table


def stopped_lines(runs: list[Run]) -> list[str]:
    """The report's list of runs a cap stopped, each with the capped quantity beside its cap."""
    lines = ["### Runs stopped by a budget cap", "",
             "| Folder | Cap | Limit | Spent of it | All runs, test included |", "|---|---|---:|---:|---:|"]
    for run in runs:
        cap = run.results["stopped"]
        use = next(((limit, spent) for c, limit, spent in cap_uses(run) if c == cap), None)
        limit, spent = ("—", "—") if use is None else (compact(round(use[0], 4)), compact(round(use[1], 4)))
        lines.append(f"| {run.folder} | budget.{cap} | {limit} | {spent} | {run.results['ledger']['runs']:g} |")
    return [*lines, ""]
