"""PNG plots: validation reward per Algorithm 1 iteration, and test score against system runs spent."""
from __future__ import annotations

import math
from collections import defaultdict
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only: no display on servers and CI
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

from optimas_cli.report.paper_tables import method_key, method_label, optimization_runs  # noqa: E402
from optimas_cli.report.runs import Run  # noqa: E402


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
