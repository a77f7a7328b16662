"""Tables to Markdown (report.md, printed with rich) and to CSV (unrounded values)."""
from __future__ import annotations

import csv
from collections import Counter
from pathlib import Path

from optimas_cli.provenance import mixed_code_note
from optimas_cli.report.formatting import Table


def _escape(cell: str) -> str:
    return cell.replace("|", "\\|")


def markdown(table: Table) -> str:
    lines = [f"### {table.title}", "", "| " + " | ".join(table.headers) + " |",
             "|" + "|".join(["---"] * table.left + ["---:"] * (len(table.headers) - table.left)) + "|"]
    for i, row in enumerate(table.rows):
        cells = [f"**{_escape(c)}**" if (i, j) in table.bold else _escape(c) for j, c in enumerate(row)]
        lines.append("| " + " | ".join(cells) + " |")
    if not table.rows:
        lines.append("| " + " | ".join(["(no runs)"] + [""] * (len(table.headers) - 1)) + " |")
    if table.summary:
        lines += ["", table.summary]
    pooled = {run.folder: run.results.get("code") for run in table.runs}  # a run in several rows counts once
    if code := mixed_code_note(list(pooled.values())):
        lines += ["", code]
    if noise := paired_noise_note([run.results.get("config") or {} for run in table.runs]):
        lines += ["", noise]
    lines += ["", f"<sub>{table.footnote}</sub>", ""]
    return "\n".join(lines)


def paired_noise_note(configs: list[dict]) -> str:
    """Which runs compared configurations on shared random numbers (`paired_noise`: validation and pair
    labels; runs from before the setting were independent), so a comparison says which methods had it."""
    counts = Counter(c.get("paired_noise", "independent") for c in configs)
    if not counts:
        return ""
    if len(counts) == 1:
        return f"Paired noise: {next(iter(counts))} in every run."
    return "Paired noise: " + ", ".join(f"{mode} in {n} run{'' if n == 1 else 's'}" for mode, n in counts.most_common()) + "."


def write_csv(path: Path, headers: list[str], rows: list[list]) -> Path:
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(headers)
        for row in rows:
            writer.writerow(["" if v is None else repr(v) if isinstance(v, float) else v for v in row])
    return path
