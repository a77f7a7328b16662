"""The report's parse-failure table: per run and component, the share of test outputs the component
could not parse (results.json `parse_failures`), so a weak LM's unreadable replies are visible beside
its score instead of hiding behind each parser's fallback.

results.json counts every test execution, each of the `repeats` test passes included; the table counts
one test pass (the counts divided by the run's repeats), so a greedy run's 3 identical passes do not
show each unparsed reply three times (Amazon's "171 of 297" was 57 of its 99 test questions)."""
from __future__ import annotations

from collections import defaultdict

from optimas_cli.report.formatting import Table, compact, percent
from optimas_cli.report.paper_tables import method_key, method_label
from optimas_cli.report.runs import Run

PHASE = "test"


def parse_failure_table(runs: list[Run], sources: str) -> Table | None:
    counted = [r for r in runs if r.results.get("parse_failures")]
    if not counted:
        return None
    table = Table("parse_failures", "Parse failures on the test split (share of the component's outputs)",
                  ["Pipeline", "Method", "Component", "Runs", "Failed", "Outputs"], left=3, runs=counted,
                  csv_headers=["pipeline", "method", "variant", "folder", "component", "failures_per_pass",
                               "outputs_per_pass", "rate", "test_repeats"])
    # Seeds of one pipeline x method are summed into one line; the CSV keeps a line per run.
    totals: dict[tuple, list[int]] = defaultdict(lambda: [0, 0, 0])
    for run in sorted(counted, key=lambda r: (r.pipeline, method_key(r.method, r.variant), str(r.folder))):
        for component, phases in sorted(run.results["parse_failures"].items()):
            test = phases.get(PHASE)
            if not test or not test["executions"]:
                continue
            repeats = test_passes(run)
            failed, outputs = test["count"] / repeats, test["executions"] / repeats
            total = totals[(run.pipeline, run.method, run.variant, component)]
            total[0] += 1
            total[1] += failed
            total[2] += outputs
            table.csv_rows.append([run.pipeline, run.method, run.variant, str(run.folder), component,
                                   round(failed, 4), round(outputs, 4), test["rate"], repeats])
    for (pipeline, method, variant, component), (n, failed, outputs) in totals.items():
        table.rows.append([pipeline, method_label(method, variant), component, str(n),
                           f"{percent(failed / outputs)} ({compact(round(failed, 2))})", compact(round(outputs, 2))])
    table.footnote = ("Outputs: the component's test executions in one test pass (a run's executions divided by its "
                      "test repeats; summed over the runs). A failed output is replaced by its parser's fallback (the "
                      f"input, an empty answer, the default label). {sources}")
    return table


def test_passes(run: Run) -> int:
    """How many times the run evaluated its test split (results.json test.scores: one score per pass)."""
    return max(1, len((run.results.get("test") or {}).get("scores") or [None]))
