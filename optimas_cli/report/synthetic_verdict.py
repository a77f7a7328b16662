"""The synthetic benchmark's verdict, a rule fixed before its runs (issue 44): in the headline cell Optimas' mean
regret is at most HALF the best global search's, the seed-level 95% interval of the per-seed difference below 0;
and from the fewest to the most options (the headline's K and interaction) its regret falls or holds while the
best global search's rises. If not, the oracle bracket says why: the oracle misses it too, the loop; only the
learned LRF misses it, the LRF."""
from __future__ import annotations

from collections.abc import Callable, Mapping

from optimas_cli.report.synthetic_grid import LEARNED, ORACLE, Cell, Grid, Regrets, best_global, mean_of
from optimas_cli.stats import Interval, seed_interval

HALF = 0.5  # the headline: Optimas' regret at most half the best global search's


def fmt(x, digits: int = 3) -> str:
    return "-" if x is None else f"{x:.{digits}f}" if isinstance(x, float) else str(x)


def paired(a: Mapping[int, float], b: Mapping[int, float]) -> list[float]:
    """a - b on the seeds both have (a seed is one instance: the same in both)."""
    return [a[s] - b[s] for s in sorted(set(a) & set(b))]


def against_global(reg: Regrets, cell: Cell, method: str) -> tuple[str | None, Interval | None]:
    """(best global search, seed-level 95% interval of method - it) in `cell`, or (name, None) when unmeasured."""
    best = best_global(reg, cell)
    if best is None or (cell.name, method) not in reg:
        return best, None
    diffs = paired(reg[(cell.name, method)], reg[(cell.name, best)])
    return best, seed_interval(diffs) if diffs else None


def headline_met(reg: Regrets, headline: Cell, method: str) -> tuple[bool | None, str]:
    """In the headline cell: mean regret at most HALF the best global search's, and the seed-level 95% interval
    of the difference below 0. None when either is unmeasured."""
    best, diff = against_global(reg, headline, method)
    own, theirs = mean_of(reg, headline, method), None if best is None else mean_of(reg, headline, best)
    if own is None or theirs is None:
        return None, f"{method} or the global searches not measured in {headline.name}"
    met = own <= HALF * theirs and diff is not None and diff.high < 0
    interval = "no interval (one seed)" if diff is None else f"{diff.estimate:+.3f} [{diff.low:+.3f}, {diff.high:+.3f}]"
    return met, f"{method} {own:.3f} vs {best} {theirs:.3f} (half: {HALF * theirs:.3f}); difference {interval}"


def rise(reg: Regrets, method_of: Callable[[Cell], str | None], low: Cell, high: Cell) -> Interval | None:
    """Seed-level 95% interval of regret in `high` minus in `low` (per seed); `method_of(cell)` names the method
    per cell. None when unmeasured or one seed."""
    a, b = method_of(high), method_of(low)
    if a is None or b is None or (high.name, a) not in reg or (low.name, b) not in reg:
        return None
    diffs = paired(reg[(high.name, a)], reg[(low.name, b)])
    return seed_interval(diffs) if diffs else None


def trend_met(reg: Regrets, grid: Grid, headline: Cell, method: str) -> tuple[bool | None, str]:
    """At the headline's K and interaction, from the fewest to the most options: `method`'s regret falls or
    holds (its rise's interval does not lie above 0) while the best global search's rises (above 0)."""
    path = grid.along_options(headline)
    low, high = path[0], path[-1]
    own = rise(reg, lambda c: method, low, high) if low != high else None
    theirs = rise(reg, lambda c: best_global(reg, c), low, high) if low != high else None
    if own is None or theirs is None:
        return None, (f"{method} or the global searches not measured at {low.options} and more options "
                      f"(K {headline.k}, interaction {headline.interaction}, 2+ seeds)")
    met = own.low <= 0 < theirs.low
    steps = " → ".join(fmt(mean_of(reg, c, method)) for c in path)
    best_steps = " → ".join(fmt(mean_of(reg, c, best_global(reg, c) or "")) for c in path)
    return met, (f"{method} {steps} (rise {own.estimate:+.3f} [{own.low:+.3f}, {own.high:+.3f}]); best global search "
                 f"{best_steps} (rise {theirs.estimate:+.3f} [{theirs.low:+.3f}, {theirs.high:+.3f}])")


def verdict(reg: Regrets, grid: Grid) -> list[str]:
    """The headline verdict, computed: met when learned Optimas passes both tests; otherwise the bracket that
    explains it (the oracle LRF fails too: the loop; only the learned LRF fails: the LRF)."""
    headline = grid.headline()
    if headline is None:
        return ["**Verdict: not measured yet** (no synthetic run)."]
    learned = [headline_met(reg, headline, LEARNED), trend_met(reg, grid, headline, LEARNED)]
    oracle = [headline_met(reg, headline, ORACLE), trend_met(reg, grid, headline, ORACLE)]
    lines = [f"- Headline ({headline.name}): {learned[0][1]}.", f"- Options trend: {learned[1][1]}.",
             f"- Oracle bracket: {oracle[0][1]}; {oracle[1][1]}."]
    if any(met is None for met, _ in learned):
        return [*lines, "", "**Verdict: not measured yet** (fill the grid: the sweep above)."]
    if all(met for met, _ in learned):
        return [*lines, "", "**Verdict: met.** Optimas' regret is at most half the best global search's in the "
                "headline cell (the seed-level 95% interval of the difference below 0), and it falls or holds as "
                "options grow while the best global search's rises."]
    if any(met is None for met, _ in oracle):
        return [*lines, "", "**Verdict: not met**; the oracle bracket is not measured, so which part explains it is open."]
    cause = ("the LRF: with a perfect local reward (lrf=oracle) the same loop meets it, the learned one does not"
             if all(met for met, _ in oracle) else
             "the loop: the oracle bracket (a perfect local reward, lrf=oracle) misses it too")
    return [*lines, "", f"**Verdict: not met.** What explains it: {cause}."]
