"""The report's parse-failure table: per run and component, the share of test outputs the component
could not parse (results.json `parse_failures`), so a weak LM's unreadable replies are visible beside
its score instead of hiding behind each parser's fallback."""
from __future__ import annotations

from optimas_cli.report.formatting import Table, percent
from optimas_cli.report.paper_tables import method_key, method_label
from optimas_cli.report.runs import Run

PHASE = "test"


def parse_failure_table(runs: list[Run], sources: str) -> Table | None:
    counted = [r for r in runs if r.results.get("parse_failures")]
    if not counted:
        return None
    table = Table("parse_failures", "Parse failures on the test split (share of the component's outputs)",
                  ["Pipeline", "Method", "Component", "Failed", "Outputs"], left=3,
                  csv_headers=["pipeline", "method", "variant", "folder", "component", "failures", "outputs", "rate"])
    for run in sorted(counted, key=lambda r: (r.pipeline, method_key(r.method, r.variant), str(r.folder))):
        for component, phases in sorted(run.results["parse_failures"].items()):
            test = phases.get(PHASE)
            if not test or not test["executions"]:
                continue
            table.rows.append([run.pipeline, method_label(run.method, run.variant), component,
                               f"{percent(test['rate'])} ({test['count']:,})", f"{test['executions']:,}"])
            table.csv_rows.append([run.pipeline, run.method, run.variant, str(run.folder), component,
                                   test["count"], test["executions"], test["rate"]])
    table.footnote = ("Outputs: the component's test executions (all repeats). A failed output is replaced by "
                      f"its parser's fallback (the input, an empty answer, the default label). {sources}")
    return table
