"""The synthetic report's phase map: per interaction, options x K, Optimas' mean regret minus the best global
search's (blue: Optimas lower), with the cell's lowest-regret method."""
from __future__ import annotations

from pathlib import Path

from optimas_cli.report.synthetic_grid import LEARNED, Grid, mean_of, regrets_of
from optimas_cli.report.synthetic_verdict import against_global


def plot_phase_map(grid: Grid, path: Path) -> Path | None:
    """The map of the cells that share the headline's metric and cap; None when there is no cell."""
    headline = grid.headline()
    if headline is None:
        return None
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    cells = {(c.options, c.k, c.interaction): c for c in grid.cells if (c.metric, c.cap) == (headline.metric, headline.cap)}
    options = sorted({o for o, _, _ in cells})
    ks = sorted({k for _, k, _ in cells})
    interactions = sorted({i for _, _, i in cells})
    reg = regrets_of(r for r in grid.rows if r["method"] in grid.methods)
    fig, axes = plt.subplots(1, len(interactions), figsize=(5 * len(interactions), 4.8), squeeze=False)
    for ax, interaction in zip(axes[0], interactions, strict=True):
        values = np.full((len(options), len(ks)), np.nan)
        for i, o in enumerate(options):
            for j, k in enumerate(ks):
                cell = cells.get((o, k, interaction))
                means = {} if cell is None else {m: v for m in grid.methods if (v := mean_of(reg, cell, m)) is not None}
                if not means:
                    ax.text(j, i, "not run", ha="center", va="center", fontsize=8)
                    continue
                best, diff = against_global(reg, cell, LEARNED)
                own, theirs = mean_of(reg, cell, LEARNED), None if best is None else mean_of(reg, cell, best)
                text = f"lowest: {min(means, key=means.get)}\n"
                if own is None:
                    text += f"{LEARNED} not run"
                elif theirs is not None:
                    values[i, j] = own - theirs
                    text += f"{LEARNED} − {best}\n{own - theirs:+.3f}"
                    if diff is not None:
                        text += f" [{diff.low:+.3f}, {diff.high:+.3f}]"
                ax.text(j, i, text, ha="center", va="center", fontsize=7)
        ax.imshow(values, cmap="RdBu_r", vmin=-0.4, vmax=0.4, aspect="auto")
        ax.set_xticks(range(len(ks)), [f"K={k}" for k in ks])
        ax.set_yticks(range(len(options)), [f"{o} options" for o in options])
        ax.set_title(f"interaction={interaction}")
    fig.suptitle("Optimas − best global search, mean regret (blue: Optimas lower) [seed-level 95% CI]", fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
