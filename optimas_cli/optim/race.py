"""Shortlist and race: the local reward ranks a component's candidates, validation decides among the top few.

A learned r_k ranks candidates with noise (on the synthetic phase map 69-80% of its Stage 1 labels agree with
the true order), and the loop validates only the one its local optimizer picks. With `optimizer.race.shortlist`
= s >= 2 the loop instead races the s candidates r_k ranks highest (a global choice's values, a prompt search's
scored instructions with the current one; per-input routes and LoRA weights have no ranked list) on paired
validation minibatches, by successive halving (Jamieson & Talwalkar 2016; the rule of optuna's
SuccessiveHalvingPruner, implemented here so the core does not import optuna): every contender runs on the
same first b_0 validation examples, the best 1/eta by summed reward (the strict gate's statistic; ties go to
the higher r_k) go on to the first b_1 = eta b_0, and so on until one is left. Each rung reuses the examples run
before it, and the gate's full validation pass is the last rung: the winner runs only on the examples it has
not run yet, then faces the existing strict gate against the current configuration like any proposal. The
current value, when shortlisted, races for free (its validation scores are known).

Rung sizes: b_r = ceil(N / eta^(R - r)) for the R rungs that take s contenders down to one (N validation
examples), so the last rung before the gate has N / eta of them; `min_examples` sets b_0 instead (optuna's
min_resource), b_r = min(N, b_0 eta^r). Where the winner is not the candidate r_k ranked first, the race has
contradicted the local reward: the loop's lazy adaptation re-collects that component's pairs the next time it
is picked (optim/loop.py), and only then.

Off by default (shortlist 0): every figure the project reports was measured without it, and a race spends more
validation runs per iteration (s = 3, eta = 3: 3 contenders on N/3 examples, then the winner on the other 2N/3,
1.67 validation passes instead of 1) for a better pick, a trade no matched-runs comparison has measured yet.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from optimas_cli.optim.proposal import Proposal
from optimas_cli.optim.settings import RaceSettings


def ranked_candidates(proposal: Proposal, current: Any) -> list[tuple[Any, float]]:
    """(value, r_k score) of every candidate the local optimizer scored, best first (ties keep their order), each
    value once: a global choice's values, or a prompt search's instructions and the current one. Empty where the
    optimizer ranks nothing (a per-input route, a LoRA adapter)."""
    details = proposal.details
    if "values" in details and "scores" in details:
        scored = list(zip(details["values"], details["scores"], strict=True))
    elif "candidates" in details and proposal.baseline_score is not None:
        scored = [(c["prompt"], c["score"]) for c in details["candidates"]] + [(current, proposal.baseline_score)]
    else:
        return []
    best: list[tuple[Any, float]] = []
    for value, score in scored:  # values may be unhashable (aggregator weights): compared by equality
        seen = next((i for i, (v, _) in enumerate(best) if v == value), None)
        if seen is None:
            best.append((value, float(score)))
        elif score > best[seen][1]:
            best[seen] = (value, float(score))
    return sorted(best, key=lambda pair: -pair[1])


def rungs(contenders: int, n_val: int, settings: RaceSettings) -> list[int]:
    """The validation examples each racing rung has run when it ranks (cumulative), before the gate's full pass."""
    eta, rounds, left = settings.reduction_factor, 0, contenders
    while left > 1:
        left, rounds = math.ceil(left / eta), rounds + 1
    if settings.min_examples is not None:
        return [min(n_val, settings.min_examples * eta ** r) for r in range(rounds)]
    return [max(1, math.ceil(n_val / eta ** (rounds - r))) for r in range(rounds)]


def example_runs(contenders: int, n_val: int, settings: RaceSettings) -> int:
    """Validation examples a race of `contenders` runs, the winner's full pass included (at most: none of them the
    current value, which races for free)."""
    total, alive, done = 0, contenders, 0
    for size in rungs(contenders, n_val, settings):
        total += alive * (size - done)
        alive, done = math.ceil(alive / settings.reduction_factor), size
    return total + (n_val - done)


@dataclass
class Evaluated:
    """A contender's validation so far: its trajectories and rewards on the first len(scores) examples, and the
    ledger's provisional charges of the runs behind them (kept if the gate accepts it)."""

    trajectories: list = field(default_factory=list)
    scores: list[float] = field(default_factory=list)
    charges: list = field(default_factory=list)


@dataclass
class RaceResult:
    winner: Any = None
    lrf_top: Any = None
    head: Evaluated | None = None  # the winner's validation so far (None: it is the current value)
    rungs: list[dict] = field(default_factory=list)
    stopped: bool = False          # a rung would have crossed the run cap: the race ended without a winner

    @property
    def contradicts_lrf(self) -> bool:
        return not self.stopped and self.winner != self.lrf_top


def race(contenders: Sequence[Any], current: Any, current_scores: Sequence[float], n_val: int,
         settings: RaceSettings, evaluate: Callable[[Any, int, int], Evaluated],
         fits: Callable[[Any, int], bool]) -> RaceResult:
    """Successive halving over `contenders` (best r_k first) on the validation examples (module docstring).
    `evaluate(value, lo, hi)` runs a value on validation examples lo..hi; `fits(value, n)` says whether running it
    on n more examples stays within the run cap (checked before each, so the race never crosses it)."""
    result = RaceResult(lrf_top=contenders[0])
    seen = {i: Evaluated() for i in range(len(contenders))}
    alive = list(range(len(contenders)))
    for size in rungs(len(contenders), n_val, settings):
        for i in alive:
            value, got = contenders[i], seen[i]
            if value == current:
                got.scores = list(current_scores[:size])
                continue
            if size > len(got.scores):
                if not fits(value, size - len(got.scores)):
                    result.stopped = True
                    return result
                more = evaluate(value, len(got.scores), size)
                got.trajectories += more.trajectories
                got.scores += more.scores
                got.charges += more.charges
        totals = {i: sum(seen[i].scores[:size]) for i in alive}
        kept = sorted(alive, key=lambda i: (-totals[i], i))[:math.ceil(len(alive) / settings.reduction_factor)]
        result.rungs.append({"examples": size, "lrf_ranks": list(alive),  # 0: the candidate r_k ranked first
                             "totals": [round(totals[i], 6) for i in alive], "kept": list(kept)})
        alive = kept
    result.winner = contenders[alive[0]]
    result.head = None if result.winner == current else seen[alive[0]]
    return result
