"""`optimas report <run folders | multirun folders> [--out DIR]`: Tables 2-4, CSVs and plots from finished runs
(synthetic runs: their regret tables and phase map too, report/synthetic.py)."""
from __future__ import annotations

import argparse
import io
import itertools
import sys
from pathlib import Path

from rich.cells import cell_len
from rich.console import Console
from rich.markdown import Markdown

from optimas_cli.errors import UserError
from optimas_cli.provenance import code_label
from optimas_cli.report import floor_tables, paper_tables, plots, synthetic, targets
from optimas_cli.report.cap_tables import cap_table, stopped_lines
from optimas_cli.report.parse_failures import parse_failure_table
from optimas_cli.report.render import markdown, write_csv
from optimas_cli.report.routing import routing_table
from optimas_cli.report.runs import RunSet, load_runs, split_duplicates
from optimas_cli.report.variants import assign
from optimas_cli.system.run_folder import lock_holder

USAGE = "optimas report RUN_OR_MULTIRUN_FOLDER [...] [--out DIR]"


def parse(args: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="optimas report", usage=USAGE, description=__doc__)
    parser.add_argument("folders", nargs="+", help="run folders, or folders above them (a Hydra multirun folder)")
    parser.add_argument("--out", help="where to write report.md, the CSVs and plots/ "
                                      "(default: <folder>/report for one folder, else ./report)")
    return parser.parse_args(args)


def report_main(args: list[str]) -> int:
    console = Console(highlight=False, soft_wrap=True)
    try:
        opts = parse(args)
    except SystemExit as exc:  # argparse already printed the usage line
        return 0 if exc.code == 0 else 2
    out = Path(opts.out) if opts.out else (Path(opts.folders[0]) / "report" if len(opts.folders) == 1 else Path("report"))
    try:
        refuse_live_folder(out)
        found = load_runs(opts.folders)
    except UserError as err:
        print(f"optimas: {err}", file=sys.stderr)
        return 2
    text = write_report(found, out)
    print_report(console, text)
    if found.problems:
        console.print(f"[yellow]{len(found.problems)} run folder(s) left out; reasons in {out / 'report.md'}[/]")
    console.print(f"report: {out / 'report.md'} · CSV and plots beside it")
    return 0 if found.runs else 1


def print_report(console: Console, text: str) -> None:
    """The report with every number whole. rich shrinks a table wider than the console until its cells read
    '0.…', so off a terminal (a pipe, a file) the Markdown goes out as report.md holds it, and on a terminal a
    table too wide for it goes out as Markdown lines (the terminal wraps them; no digit is dropped)."""
    if not console.is_terminal:
        console.out(text, highlight=False)
        return
    for is_table, lines in itertools.groupby(text.splitlines(), key=lambda line: line.startswith("|")):
        block = "\n".join(lines)
        if is_table and rendered_width(block) > console.width:
            console.out(f"\n{block}\n", highlight=False)
        else:
            console.print(Markdown(block))


def rendered_width(block: str) -> int:
    """How many columns rich needs for a Markdown table without shrinking a cell."""
    wide = Console(width=100_000, file=io.StringIO(), color_system=None)
    wide.print(Markdown(block))
    return max((cell_len(line.rstrip()) for line in wide.file.getvalue().splitlines()), default=0)


def refuse_live_folder(out: Path) -> None:
    """A run still going on owns its folder (its lock): a report written into it would race the run's own
    files and be stale before the run ends."""
    for place in (out.absolute(), *out.absolute().parents):
        pid = lock_holder(place)
        if pid is not None:
            raise UserError(f"{place} is the folder of a run still going on (pid {pid}); the report is not "
                            "written into it", "wait for the run to end, or write the report elsewhere: --out DIR")


def write_report(found: RunSet, out: Path) -> str:
    out.mkdir(parents=True, exist_ok=True)
    # Repeats (seeds) share a label and are averaged; ablation values and other budgets get their own.
    assign(found.runs, lambda r: (r.pipeline, r.method), "variant")
    assign([r for r in found.runs if "lrf" in r.results], lambda r: (r.pipeline,), "lrf_variant", exclude=("method",))
    # The same seed and settings twice is one measurement, not two replicates: one counts.
    runs, found.duplicates = split_duplicates(found.runs)
    sources = (f"Source: {len(runs)} run(s) under {', '.join(found.sources)}"
               + (f"; {len(found.problems)} left out (listed below)" if found.problems else "")
               + (f"; {len(found.duplicates)} duplicate(s) not counted (listed below)" if found.duplicates else "")
               + "; every run is listed in runs.csv.")
    made = [paper_tables.table2(runs, sources), paper_tables.table2_paired(runs, sources),
            paper_tables.table3(runs, sources), paper_tables.table4(runs, sources)]
    optional = [floor_tables.floor_table(runs, sources), floor_tables.group_table(runs, sources),
                paper_tables.eval_table(runs, sources), targets.gain_table(runs, sources),
                targets.mean_table(runs, sources),
                targets.matched_table(runs, sources), parse_failure_table(runs, sources), cap_table(runs, sources),
                routing_table(runs, sources)]
    made += [table for table in optional if table is not None]
    for table in made:
        write_csv(out / f"{table.name}.csv", table.csv_headers, table.csv_rows)
    write_csv(out / "table4_components.csv", *paper_tables.component_rows(runs))
    write_csv(out / "runs.csv", *run_rows(found))

    (out / "plots").mkdir(exist_ok=True)
    images = [
        ("Validation reward per iteration", plots.plot_validation(runs, out / "plots" / "validation_reward.png")),
        ("Test score vs system runs spent", plots.plot_accuracy_vs_runs(runs, out / "plots" / "accuracy_vs_runs.png")),
        ("Validation gate decisions (Δ and CI per iteration)", plots.plot_gate(runs, out / "plots" / "gate_decisions.png")),
        ("Accuracy vs cost, floors as grey lines (data: pareto.csv)", plots.plot_pareto(runs, out / "plots" / "pareto.png", out / "pareto.csv")),
    ]
    parts = ["# Optimas report", "", f"{len(runs)} run(s) from {', '.join(found.sources)}.", ""]
    parts += [markdown(t) for t in made]
    regret = synthetic.section(runs, out)  # synthetic runs: regret against the simulator's exact optimum
    if regret:
        parts.append(regret)
    parts.append("### Plots\n")
    for title, path in images:
        parts.append(f"![{title}](plots/{path.name})\n" if path else f"- {title}: no run to plot.\n")
    parts.append(problems_section(found))
    if found.duplicates:
        parts.append(duplicates_section(found))
    text = "\n".join(parts)
    (out / "report.md").write_text(text)
    return text


def problems_section(found: RunSet) -> str:
    stopped = [r for r in found.runs if r.results.get("stopped")]
    lines = []
    if stopped:  # in the tables with the best configuration found before the cap: say which they are
        lines += stopped_lines(stopped)
    if not found.problems:
        return "\n".join([*lines, "### Runs left out\n\nNone: every run folder had a complete results.json.\n"])
    lines += ["### Runs left out", "", "| Folder | Reason |", "|---|---|"]
    lines += [f"| {p.folder} | {p.reason.replace('|', '/')} |" for p in found.problems]
    return "\n".join(lines) + "\n"


def duplicates_section(found: RunSet) -> str:
    lines = ["### Duplicate runs (not counted)", "",
             "Same pipeline, method, settings and seed as a run that is counted (the newest); pooling them "
             "would count one measurement several times.", "", "| Folder | Duplicate of |", "|---|---|"]
    lines += [f"| {d.folder} | {d.kept} |" for d in found.duplicates]
    return "\n".join(lines) + "\n"


def run_rows(found: RunSet) -> tuple[list[str], list[list]]:
    headers = ["folder", "status", "pipeline", "method", "variant", "test_mean", "test_std", "test_n",
               "system_runs", "lm_tokens", "code", "reason"]
    rows = []
    duplicate_of = {d.folder: d.kept for d in found.duplicates}
    for run in found.runs:
        test = run.results.get("test") or {}
        ledger = run.results.get("ledger") or {}
        status = ("ok" if not run.results.get("stopped") else f"stopped by budget.{run.results['stopped']}")
        if run.folder in duplicate_of:
            status = f"duplicate of {duplicate_of[run.folder]}"
        rows.append([str(run.folder), status, run.pipeline, run.method, run.variant, test.get("mean"), test.get("std"),
                     test.get("n"), ledger.get("runs"), ledger.get("tokens"), code_label(run.results.get("code")), ""])
    rows += [[str(p.folder), "left out", "", "", "", None, None, None, None, None, None, p.reason] for p in found.problems]
    return headers, rows
