"""PNG plots: validation reward per Algorithm 1 iteration, test score against system runs spent, the gate's
decisions, and accuracy against cost per pipeline (the Pareto plot, with its data as pareto.csv)."""
from __future__ import annotations

import math
import statistics
from collections import defaultdict
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only: no display on servers and CI
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

from optimas_cli.report.evidence import cell_evidence  # noqa: E402
from optimas_cli.report.floor_tables import floors_by_pipeline  # noqa: E402
from optimas_cli.report.paper_tables import _group, method_key, method_label  # noqa: E402
from optimas_cli.report.render import write_csv  # noqa: E402
from optimas_cli.report.runs import Run  # noqa: E402
from optimas_cli.system.budget import optimization_runs  # noqa: E402


def _grid(n: int):
    cols = min(n, 3)
    rows = math.ceil(n / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(5 * cols, 3.6 * rows), squeeze=False)
    for ax in axes.flat[n:]:
        ax.set_visible(False)
    return fig, list(axes.flat)


def _by_pipeline(runs: list[Run]) -> dict[str, list[Run]]:
    out: dict[str, list[Run]] = defaultdict(list)
    for run in sorted(runs, key=lambda r: (r.pipeline, method_key(r.method, r.variant), str(r.folder))):
        out[run.pipeline].append(run)
    return dict(sorted(out.items()))


def _val_scale(run: Run) -> tuple[float, str]:
    """Gates compare totals; plots show the mean when the number of scored examples is known (each
    history entry's `n`; runs made before it existed: the validation split's size)."""
    history = run.results.get("history") or []
    size = (history[0].get("n") if history else None) or (run.results.get("splits") or {}).get("val")
    return (float(size), "mean") if size else (1.0, "sum")


def validation_curve(run: Run) -> tuple[list[int], list[float], str]:
    """Iteration 0 is the start; then the validation score after each iteration."""
    history = run.results["history"]
    scale, kind = _val_scale(run)
    xs = [0] + [int(e.get("iteration", i + 1)) for i, e in enumerate(history)]
    ys = [float(history[0]["val_before"]) / scale] + [float(e["val_after"]) / scale for e in history]
    return xs, ys, kind


def rejected_points(run: Run) -> list[tuple[int, float]]:
    """The validation score of each proposal the gate rejected (it never became the configuration)."""
    scale, _ = _val_scale(run)
    return [(int(e.get("iteration", i + 1)), float(e["val_candidate"]) / scale)
            for i, e in enumerate(run.results["history"])
            if not e.get("accepted") and e.get("val_candidate") is not None]


def plot_validation(runs: list[Run], path: Path) -> Path | None:
    with_history = [r for r in runs if isinstance(r.results.get("history"), list) and r.results["history"]
                    and all(isinstance(e, dict) and {"val_before", "val_after"} <= set(e) for e in r.results["history"])]
    if not with_history:
        return None
    groups = _by_pipeline(with_history)
    fig, axes = _grid(len(groups))
    for ax, (pipeline, members) in zip(axes, groups.items(), strict=False):
        kind = "mean"
        for run in members:
            xs, ys, kind = validation_curve(run)
            scored_on = run.results["history"][0].get("scored_on", "validation")
            where = "" if scored_on == "validation" else f" ({scored_on})"
            ax.step(xs, ys, where="post", marker="o", markersize=3,
                    label=f"{method_label(run.method, run.variant)}{where} · {run.folder.name}")
            accepted = [(x, y) for x, y, e in zip(xs[1:], ys[1:], run.results["history"], strict=True) if e.get("accepted")]
            if accepted:
                ax.scatter(*zip(*accepted, strict=True), s=30, facecolors="none", edgecolors="black", zorder=3)
            rejected = rejected_points(run)
            if rejected:
                ax.scatter(*zip(*rejected, strict=True), s=25, marker="x", color="grey", zorder=3)
        ax.set(title=pipeline, xlabel="iteration", ylabel=f"validation reward ({kind})")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.legend(fontsize=7, framealpha=0.5)  # see-through: a point under the legend stays visible
        ax.grid(alpha=0.3)
    fig.suptitle("Validation reward per iteration\n(circled: accepted update; x: a rejected proposal's score)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def plot_accuracy_vs_runs(runs: list[Run], path: Path) -> Path | None:
    scored = [r for r in runs if r.kind == "run"]
    if not scored:
        return None
    groups = _by_pipeline(scored)
    fig, axes = _grid(len(groups))
    for ax, (pipeline, members) in zip(axes, groups.items(), strict=False):
        by_method: dict[str, list[Run]] = defaultdict(list)
        for run in members:
            by_method[method_label(run.method, run.variant)].append(run)
        for label, group in by_method.items():
            xs = [optimization_runs(r.results["ledger"]) for r in group]
            ys = [float(r.results["test"]["mean"]) for r in group]
            ax.scatter(xs, ys, label=label, s=36)
        ax.set(title=pipeline, xlabel="system runs spent optimizing", ylabel=f"test {members[0].results['metric']}")
        ax.legend(fontsize=7)
        ax.grid(alpha=0.3)
    fig.suptitle("Test score vs optimization cost (one point per run)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def gate_points(run: Run) -> list[tuple[int, float, float, float, bool]]:
    """(iteration, Δ, CI low, CI high, accepted) for every history entry the gate judged."""
    return [(int(e.get("iteration", i + 1)), float(g["delta"]), float(g["ci_low"]), float(g["ci_high"]),
             bool(g["accepted"]))
            for i, e in enumerate(run.results.get("history") or [])
            if isinstance(e, dict) and isinstance(g := e.get("gate"), dict)]


def plot_gate(runs: list[Run], path: Path) -> Path | None:
    """Each gate decision: the candidate's mean per-example validation gain over the current
    configuration, with its one-sided CI (the paired gate accepts when the low end is above 0)."""
    judged = [r for r in runs if gate_points(r)]
    if not judged:
        return None
    groups = _by_pipeline(judged)
    fig, axes = _grid(len(groups))
    for ax, (pipeline, members) in zip(axes, groups.items(), strict=False):
        width = 0.6 / len(members)
        for j, run in enumerate(members):
            points = gate_points(run)
            xs = [p[0] + (j - (len(members) - 1) / 2) * width for p in points]
            ys = [p[1] for p in points]
            errs = [[p[1] - p[2] for p in points], [p[3] - p[1] for p in points]]
            rules = sorted({e["gate"]["rule"] for e in run.results["history"] if isinstance(e.get("gate"), dict)})
            line = ax.errorbar(xs, ys, yerr=errs, fmt="none", capsize=3, alpha=0.7,
                               label=f"{method_label(run.method, run.variant)} · gate {'/'.join(rules)} · {run.folder.name}")
            color = line.lines[2][0].get_color() if line.lines[2] else None
            accepted = [(x, y) for x, y, p in zip(xs, ys, points, strict=True) if p[4]]
            rejected = [(x, y) for x, y, p in zip(xs, ys, points, strict=True) if not p[4]]
            if accepted:
                ax.scatter(*zip(*accepted, strict=True), s=36, marker="o", color=color, zorder=3)
            if rejected:
                ax.scatter(*zip(*rejected, strict=True), s=36, marker="x", color=color, zorder=3)
        ax.axhline(0, color="black", linewidth=0.8)
        last = max(p[0] for run in members for p in gate_points(run))
        ax.set(title=pipeline, xlabel="iteration", ylabel="validation Δ per example", xlim=(0.5, last + 0.5))
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.legend(fontsize=7, framealpha=0.5)
        ax.grid(alpha=0.3)
    fig.suptitle("Validation gate: candidate minus current,\nmean per-example Δ and its one-sided CI\n"
                 "(dot: accepted; x: rejected; paired accepts\nonly when the bar's low end is above 0)", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


PARETO_HEADERS = ["pipeline", "kind", "method", "variant", "label", "runs", "score", "ci_low", "ci_high",
                  "executed_runs", "lm_tokens", "on_frontier"]


def _frontier_rows(rows: list[list], axis: int) -> list[list]:
    """The rows no other row beats on cost (column `axis`) and score (column 6): as cheap or cheaper and at
    least as good, one of them strictly. A row without that cost is on no frontier."""
    placed = [r for r in rows if r[axis] is not None]
    return [r for r in placed if not any(q[axis] <= r[axis] and q[6] >= r[6] and (q[axis], q[6]) != (r[axis], r[6])
                                         for q in placed)]


def plot_pareto(runs: list[Run], path: Path, csv_path: Path) -> Path | None:
    """Per pipeline, each method's mean test score with its 95% CI (the floors table's two-level bootstrap)
    against the executed system runs it spent optimizing, and against the LM tokens it used where any were
    counted; the pipeline's floors as horizontal lines (the floors table's values); the Pareto frontier
    (cheapest for its score) joined. The same numbers go to `csv_path`, a row per method and per floor."""
    cells = _group([r for r in runs if r.kind == "run" and "test" in r.results],
                   lambda r: (r.pipeline, r.method, r.variant))
    if not cells:
        return None
    floors = floors_by_pipeline(runs)
    rows: list[list] = []
    for pipeline, method, variant in sorted(cells, key=lambda k: (k[0], method_key(k[1], k[2]))):
        members = cells[(pipeline, method, variant)]
        ci = cell_evidence(members, None).ci
        spent = [optimization_runs(r.results["ledger"]) for r in members]
        tokens = [r.results["ledger"].get("tokens") for r in members]
        rows.append([pipeline, "method", method, variant, method_label(method, variant), len(members),
                     statistics.fmean(float(r.results["test"]["mean"]) for r in members),
                     ci.low if ci else None, ci.high if ci else None,
                     None if None in spent else statistics.fmean(spent),
                     None if None in tokens else statistics.fmean(tokens), ""])
    for row in rows:
        row[11] = "+".join(name for axis, name in ((9, "runs"), (10, "tokens"))
                           if row in _frontier_rows([r for r in rows if r[0] == row[0]], axis))
    for pipeline, found in sorted(floors.items()):
        rows += [[pipeline, "floor", f"floor:{f.name}", "", f.name, None, f.mean, None, None, None, None, ""]
                 for f in found.defined]
    write_csv(csv_path, PARETO_HEADERS, rows)

    pipelines = sorted({row[0] for row in rows})
    fig, axes = plt.subplots(len(pipelines), 2, figsize=(11, 3.8 * len(pipelines)), squeeze=False)
    for (by_runs, by_tokens), pipeline in zip(axes, pipelines, strict=True):
        methods = [row for row in rows if row[0] == pipeline and row[1] == "method"]
        metric = next(r for r in runs if r.pipeline == pipeline).results.get("metric", "score")
        for ax, axis, xlabel in ((by_runs, 9, "executed system runs spent optimizing"),
                                 (by_tokens, 10, "LM tokens (the whole run, test included)")):
            placed = [row for row in methods if row[axis] is not None]
            if axis == 10 and not any(row[10] for row in placed):
                ax.set_visible(False)  # no LM tokens counted (a pipeline without an LM): nothing to place
                continue
            for row in placed:
                err = [[row[6] - row[7]], [row[8] - row[6]]] if row[7] is not None else None
                ax.errorbar([row[axis]], [row[6]], yerr=err, fmt="o", capsize=3, label=row[4])
            frontier = sorted((row[axis], row[6]) for row in _frontier_rows(placed, axis))
            if len(frontier) > 1:
                ax.step(*zip(*frontier, strict=True), where="post", color="black", linewidth=0.8, alpha=0.6,
                        label="Pareto frontier")
            for i, row in enumerate(r for r in rows if r[0] == pipeline and r[1] == "floor"):
                ax.axhline(row[6], linestyle=("--", ":", "-.")[i % 3], linewidth=1, color="dimgray",
                           label=f"floor: {row[4]}")
            ax.set(title=pipeline, xlabel=xlabel, ylabel=f"test {metric} (95% CI)")
            ax.legend(fontsize=7, framealpha=0.5)
            ax.grid(alpha=0.3)
    fig.suptitle("Accuracy vs cost: each method's mean test score and 95% CI; grey lines: floors (no LM)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
