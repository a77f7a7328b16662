"""The synthetic report's phase map: per interaction, options x K, Optimas' mean regret minus the best global
search's (blue: Optimas lower), with the cell's lowest-regret method; for the second phase map (issue 59), the share
of the initial regret each method closed per cell, with its verdict."""
from __future__ import annotations

import statistics
import textwrap
from collections.abc import Sequence
from pathlib import Path

from optimas_cli.report.synthetic_grid import LEARNED, Cell, Grid, mean_of, regrets_of
from optimas_cli.report.synthetic_readings import AT_CAP, DID_NOT_MOVE, read
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


def plot_closed_share(grid: Grid, cells: Sequence[Cell], methods: Sequence[str], headline: Cell, summary: str,
                      path: Path) -> Path:
    """The second phase map (issue 59): per cell (a row, in `cells`' order) and method, the share of the initial
    regret closed at 1x the cap; the headline cell outlined, a method that did not move hatched, the verdict on top."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np
    from matplotlib.patches import Rectangle

    at = read(grid, AT_CAP)
    values = np.full((len(cells), len(methods)), np.nan)
    fig, ax = plt.subplots(figsize=(1.3 * len(methods) + 2.5, 0.42 * len(cells) + 2.2))
    for i, cell in enumerate(cells):
        for j, m in enumerate(methods):
            got = at.get((cell.name, m))
            if got is None:
                ax.text(j, i, "not run", ha="center", va="center", fontsize=7, color="grey")
                continue
            if not got.moved:  # left uncoloured: a method that did nothing is not ranked
                ax.add_patch(Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False, hatch="///", edgecolor="grey", lw=0))
                ax.text(j, i, DID_NOT_MOVE, ha="center", va="center", fontsize=7)
                continue
            values[i, j] = statistics.fmean(got.closed.values())
            ax.text(j, i, f"{values[i, j]:.0%}", ha="center", va="center", fontsize=7, color="white"
                    if values[i, j] < 0.5 else "black")
    image = ax.imshow(values, cmap="viridis", vmin=0, vmax=1, aspect="auto")
    fig.colorbar(image, ax=ax, fraction=0.03, label="share of the initial regret closed")
    if headline in cells:
        row = cells.index(headline)
        ax.add_patch(Rectangle((-0.5, row - 0.5), len(methods), 1, fill=False, edgecolor="red", lw=2.5))
    ax.set_xticks(range(len(methods)), methods, rotation=30, ha="right", fontsize=8)
    ax.set_yticks(range(len(cells)), [c.name + (" (headline)" if c == headline else "") for c in cells], fontsize=8)
    ax.set_title("Share of the initial regret closed at 1x the cap (90 K executed runs), mean over seeds;\n"
                 f"hatched: {DID_NOT_MOVE}\n{textwrap.fill(summary, 110)}", fontsize=9)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
