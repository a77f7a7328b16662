"""The second phase map's verdict (issue 59), the rule committed before its runs (docs/synthetic.md, "The phase map
again"), every regret read at 1x the cap (synthetic_readings.py): in the headline cell learned Optimas' regret is at
most HALF the better of coordinate ascent's and TPE's, the seed-level 95% interval of the difference excluding 0;
and learned Optimas beats random reward at equal total spend in every 4- and 32-option cell of the map (interaction
on: the control is named apart). Otherwise the brackets are named cell by cell where it fails: reward quality
(exact-label LRF against learned), cost (free against charged oracle), loop (coordinate ascent against the oracle).
A method that had not left its initial configuration by then "did not move": it wins nothing, and a clause waits
for all of its cell's planned seeds."""
from __future__ import annotations

import statistics
from dataclasses import dataclass, field

from optimas_cli.report.regret import moved_by
from optimas_cli.report.synthetic_brackets import charged_at, charged_oracle
from optimas_cli.report.synthetic_grid import EXACT_LABELS, LEARNED, ORACLE, RANDOM, Cell, Grid
from optimas_cli.report.synthetic_plan import Plan
from optimas_cli.report.synthetic_readings import AT_CAP, DID_NOT_MOVE, Reading, Readings, history, read
from optimas_cli.report.synthetic_verdict import HALF, paired
from optimas_cli.stats import seed_interval

RIVALS = ("coordinate_ascent", "tpe")  # the global searches of the headline clause
RANDOM_OPTIONS = (4, 32)  # the options of the cells where learned Optimas must beat random reward
CHARGED = "charged oracle"  # the free oracle's curve read at 1x the cap minus learned Optimas' Stage 1
STATES = {True: "met", False: "not met", None: "not measured yet"}
# each bracket: (name, better-informed side, the side it is set against); it fails where the first's regret is
# lower with the seed-level 95% interval of the difference below 0
BRACKETS = (("reward quality", EXACT_LABELS, LEARNED), ("cost", ORACLE, CHARGED), ("loop", "coordinate_ascent", ORACLE))


@dataclass
class Verdict:
    state: str  # "met", "not met" or "not measured yet"
    lines: list[str] = field(default_factory=list)
    failing: dict[str, list[str]] = field(default_factory=dict)  # cell -> the clause it fails, then failing brackets

    @property
    def summary(self) -> str:
        """One line for the figure."""
        where = "; ".join(f"{cell}: {', '.join(why)}" for cell, why in self.failing.items())
        return f"Verdict: {self.state}" + (f" ({where})" if where else "")


def difference(a: Reading, b: Reading) -> str:
    """a - b on their common seeds: the estimate with its seed-level 95% interval."""
    diffs = paired(a.regret, b.regret)
    if not diffs:
        return "no seed in common"
    ci = seed_interval(diffs)
    return (f"{diffs[0]:+.3f} (one seed)" if ci is None else f"{ci.estimate:+.3f} [{ci.low:+.3f}, {ci.high:+.3f}]")


def complete(reading: Reading | None, plan: Plan, cell: Cell) -> bool:
    return reading is not None and set(plan.seeds[cell.name]) <= set(reading.regret)


def seeds_note(readings: list[Reading | None], plan: Plan, cell: Cell) -> str:
    have = min((len(r.regret) for r in readings if r is not None), default=0)
    return f"{have} of {len(plan.seeds[cell.name])} seeds run"


def headline_clause(at: Readings, plan: Plan) -> tuple[bool | None, str]:
    """Learned Optimas at most HALF the better of coordinate ascent and TPE in the headline cell, the interval of
    the per-seed difference excluding 0; None until every planned seed of the three has run."""
    cell = plan.headline
    own, rivals = at.get((cell.name, LEARNED)), {m: at[(cell.name, m)] for m in RIVALS if (cell.name, m) in at}
    if own is None or not rivals:
        return None, f"{LEARNED} or {' and '.join(RIVALS)} not run in {cell.name}"
    best = min(rivals, key=lambda m: rivals[m].mean)
    theirs = rivals[best]
    stuck = "" if theirs.moved else f" ({DID_NOT_MOVE}: the initial regret)"
    detail = (f"{LEARNED} {own.shown()} vs {best} {theirs.mean:.3f}{stuck}, the better of "
              f"{' and '.join(RIVALS)} (half: {HALF * theirs.mean:.3f}); difference {difference(own, theirs)}")
    if not all(complete(r, plan, cell) for r in (own, *rivals.values())):
        return None, f"{detail}; {seeds_note([own, *rivals.values()], plan, cell)}"
    ci = seed_interval(paired(own.regret, theirs.regret))
    return own.moved and own.mean <= HALF * theirs.mean and ci is not None and ci.excludes_zero, detail


def random_clause(at: Readings, plan: Plan, cell: Cell) -> tuple[bool | None, list[str]]:
    """Learned Optimas' mean regret below random reward's, both at 1x the cap (equal total spend), on their seeds;
    a learned Optimas that did not move beats nothing. The table row's cells after the cell's name."""
    own, rnd = at.get((cell.name, LEARNED)), at.get((cell.name, RANDOM))
    if own is None or rnd is None:
        return None, [own.shown() if own else "not run", rnd.shown() if rnd else "not run", "-", "not run"]
    shown = [own.shown(), rnd.shown(), difference(own, rnd)]
    if not (complete(own, plan, cell) and complete(rnd, plan, cell)):
        return None, [*shown, seeds_note([own, rnd], plan, cell)]
    beaten = own.moved and statistics.fmean(paired(own.regret, rnd.regret)) < 0
    return beaten, [*shown, "yes" if beaten else f"no{'' if own.moved else f' ({LEARNED} {DID_NOT_MOVE})'}"]


def charged(grid: Grid, cell: Cell) -> Reading | None:
    """The charged oracle at 1x the cap: the free oracle's curve read at 1x minus learned Optimas' Stage 1, seed by
    seed (report/synthetic_brackets.py)."""
    of = {(r["method"], r["seed"]): r for r in grid.rows if r["cell"] == cell.name}
    pairs = [(o, of[(LEARNED, s)]) for (m, s), o in of.items() if m == ORACLE and (LEARNED, s) in of]
    if not pairs:
        return None
    cap = AT_CAP * cell.reference_cap
    got = Reading()
    for o, learned in pairs:
        got.add(o["seed"], charged_oracle(o, learned, cap), o["optimum"] - o["initial"],
                moved_by(history(o), charged_at(learned, cap)))
    return got


def bracket_row(at: Readings, grid: Grid, cell: Cell) -> tuple[list[str], list[str]]:
    """(the failing brackets' names, the table row's bracket cells) in `cell`."""
    sides = {**{m: at.get((cell.name, m)) for b in BRACKETS for m in b[1:]}, CHARGED: charged(grid, cell)}
    failing, shown = [], []
    for name, better, against in BRACKETS:
        a, b = sides[better], sides[against]
        if a is None or b is None:
            shown.append(f"{better if a is None else against} not run")
            continue
        ci = seed_interval(paired(a.regret, b.regret))
        state = ("no interval" if ci is None else "fails" if ci.high < 0 else "holds" if ci.low > 0 else "within noise")
        stuck = [m for m, r in ((better, a), (against, b)) if not r.moved]
        shown.append(f"{difference(a, b)}: {state}" + (f" ({DID_NOT_MOVE}: {', '.join(stuck)})" if stuck else ""))
        failing += [name] if state == "fails" else []
    return failing, shown


def verdict(grid: Grid, plan: Plan) -> Verdict:
    """The rule applied to the grid's runs: its clauses, the verdict, and where it is not met, the brackets."""
    at = read(grid, AT_CAP)
    head = plan.headline
    headline, detail = headline_clause(at, plan)
    cells = [c for c in plan.cells if c.interaction == "on" and c.options in RANDOM_OPTIONS]
    randoms = [(c, *random_clause(at, plan, c)) for c in cells]
    clauses = [(head, headline, "the half rule"), *((c, met, "random reward not beaten") for c, met, _ in randoms)]
    met = [m for _, m, _ in clauses]
    judged = Verdict("not met" if False in met else "not measured yet" if None in met else "met")
    for cell, m, why in clauses:
        if m is False:
            judged.failing.setdefault(cell.name, []).append(why)
    count = {state: sum(m is state for _, m, _ in randoms) for state in (True, False, None)}
    judged.lines = [
        "Every regret read at 1x the cap (90 K executed runs) on the runs' anytime curves.", "",
        f"- Headline ({head.name}): {detail}: {STATES[headline]}.",
        f"- Random reward at equal total spend (both read at 1x the cap) in the {len(cells)} cells of "
        f"{' and '.join(map(str, RANDOM_OPTIONS))} options, interaction on (the control is not in the rule): learned "
        f"Optimas beats it in {count[True]}, does not in {count[False]}, not measured in {count[None]}.", "",
        f"| cell | {LEARNED} | {RANDOM} | {LEARNED} − {RANDOM} [95% CI] | beaten |", "|---|---|---|---|---|",
        *(f"| {c.name} | " + " | ".join(row) + " |" for c, _, row in randoms), ""]
    if judged.state == "met":
        judged.lines.append("**Verdict: met.** Learned Optimas' regret at 1x the cap is at most half the better global "
                            "search's in the headline cell, the interval of the difference excluding 0, and it beats "
                            "random reward at equal total spend in every 4- and 32-option cell.")
    elif judged.state == "not measured yet":
        waiting = ", ".join(dict.fromkeys(c.name for c, m, _ in clauses if m is None))
        judged.lines.append(f"**Verdict: not measured yet** (waiting for {waiting}: every planned seed of the "
                            "methods the rule compares there).")
    else:
        judged.lines += bracket_table(at, grid, plan, judged.failing)
    return judged


def bracket_table(at: Readings, grid: Grid, plan: Plan, failing: dict[str, list[str]]) -> list[str]:
    """The verdict's lines where it is not met: per failing cell, what it fails and each bracket; the failing
    brackets are added to `failing`."""
    lines = ["**Verdict: not met.** The brackets where it fails, at 1x the cap: each sets the better-informed side "
             "against the other (difference of regret, seed-level 95% interval) and fails where the interval lies "
             "below 0.", "",
             "| cell | fails | " + " | ".join(f"{name}: {a} − {b}" for name, a, b in BRACKETS) + " |",
             "|---|---|" + "---|" * len(BRACKETS)]
    for name, why in failing.items():
        brackets, shown = bracket_row(at, grid, next(c for c in plan.cells if c.name == name))
        lines.append(f"| {name} | {', '.join(why)} | " + " | ".join(shown) + " |")
        why += [f"{b} fails" for b in brackets]
    return lines
