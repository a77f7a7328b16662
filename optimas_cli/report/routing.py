"""The report's routing table: per run, how often the simulator's routers pick each input's exact best value
(results.json `routing`, measured by optimas_cli/lrf/routing.py on the test split), for the run's value
scorer (pre: ranked before running) beside the oracle, a leaderboard (the best single value) and a random
pick; accuracy and regret are macro means over the run's routers."""
from __future__ import annotations

from optimas_cli.report.formatting import Table, percent
from optimas_cli.report.paper_tables import method_key, method_label
from optimas_cli.report.runs import Run

ROUTERS = ("pre", "leaderboard", "random", "oracle")


def routing_table(runs: list[Run], sources: str) -> Table | None:
    measured = [r for r in runs if (r.results.get("routing") or {}).get("mean")]
    if not measured:
        return None
    table = Table("routing", "Routing accuracy against the exact per-input best (test split)",
                  ["Pipeline", "Method", "Run", "Routers", *(f"{r} acc." for r in ROUTERS), "pre regret",
                   "leaderboard regret"], left=3, runs=measured,
                  csv_headers=["pipeline", "method", "variant", "folder", "routers", "router", "accuracy", "regret"])
    for run in sorted(measured, key=lambda r: (r.pipeline, method_key(r.method, r.variant), str(r.folder))):
        routing = run.results["routing"]
        mean = routing["mean"]
        table.rows.append([run.pipeline, method_label(run.method, run.variant), run.folder.name,
                           str(len(routing["per_component"])),
                           *(percent(mean[r]["accuracy"]) if r in mean else "-" for r in ROUTERS),
                           *(f"{mean[r]['regret']:.4f}" if r in mean else "-" for r in ("pre", "leaderboard"))])
        table.csv_rows += [[run.pipeline, run.method, run.variant, str(run.folder), len(routing["per_component"]),
                            r, mean[r]["accuracy"], mean[r]["regret"]] for r in ROUTERS if r in mean]
    table.footnote = ("pre: the run's value scorer s_k(x, v), which ranks a router's values before running any "
                      "(lrf/value_scorer.py; '-' where the run trained none); leaderboard: the one value with the "
                      "highest mean exact reward on these inputs; random: a uniform pick, in expectation; oracle: the "
                      "exact best. Accuracy: the share of router inputs whose pick is a best value; regret: the mean "
                      f"exact reward the pick leaves behind the best's. {sources}")
    return table
