"""Stage 1 sized by the run cap: its collection planned from a share of budget.max_runs, never past it.

Without a run cap (or with lrf.collect.cap_share=null) Stage 1 collects as lrf.collect and the training split
say. Under one, it may spend at most `cap_share` x max_runs executed runs, counted by expected_collection's
arithmetic (an upper bound: every sampled candidate distinct, every component run on every input). The
configured candidates and repeats say what one label is and what it is worth, the inputs how many labels
there are: the inputs are cut first, to as many as fit. Only where one input at the configured size does not
fit are the repeats cut to 1, then the candidates to 2 (the fewest that form a pair); where even that does not
fit every component, the components whose collections fit are kept, cheapest first, and the rest get no pairs.

Why a share of 1/3 by default (conf/lrf/minilm.yaml): a capped run spends its runs on three things, the local
rewards' data (Stage 1), their upkeep (Stage 2's adaptation) and the loop's searches and validation passes,
which are the only runs that turn a reward into an accepted change. No measurement says one deserves more
than another, so Stage 1 gets at most an equal third. It is not tuned on any result: the synthetic phase map's
Stage 1, unbounded, took 379 of 900 runs at 4 options and K=10 (docs/results/synthetic), which is what the share
bounds, not what chose it.
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass

from optimas_cli.errors import UserError
from optimas_cli.lrf.collect import ExecutionTally, expected_collection
from optimas_cli.system.compound import CompoundSystem
from optimas_cli.system.configuration import SystemConfig

DEFAULT_CAP_SHARE = 0.333  # conf/lrf/*.yaml's lrf.collect.cap_share; the module docstring says why


@dataclass(frozen=True)
class CollectionSize:
    """What Stage 1 collects under its share: the first `inputs` training inputs, `num_candidates` candidates and
    `mc_repeats` downstream repeats each, for `components` (in the order asked); `runs` is the plan's upper
    bound of its executed runs, `limit` the share of the cap it must stay within."""

    inputs: int
    num_candidates: int
    mc_repeats: int
    components: tuple[str, ...]
    runs: float
    limit: float

    def settings(self, collect: Mapping) -> dict:
        """lrf.collect with this size's candidates and repeats."""
        return {**collect, "num_candidates": self.num_candidates, "mc_repeats": self.mc_repeats}

    def to_dict(self) -> dict:
        return {**asdict(self), "components": list(self.components), "runs": round(self.runs, 4),
                "limit": round(self.limit, 4)}


def cap_share(collect: Mapping) -> float | None:
    """lrf.collect.cap_share, checked: a share of the run cap in (0, 1], or None (Stage 1 is not sized by it)."""
    raw = collect.get("cap_share", DEFAULT_CAP_SHARE)
    if raw is None:
        return None
    try:
        share = float(raw)
        if isinstance(raw, bool):
            raise ValueError
    except (TypeError, ValueError):
        share = math.nan
    if not 0 < share <= 1:
        raise UserError(f"lrf.collect.cap_share={raw!r} is not a share of the run cap in (0, 1]",
                        "e.g. lrf.collect.cap_share=0.333, or null to collect as lrf.collect says under any cap")
    return share


def stage1_limit(collect: Mapping, max_runs: float | None) -> float | None:
    """The executed runs Stage 1 may spend: the share of budget.max_runs (None without a run cap or a share)."""
    share = cap_share(collect)
    return None if share is None or max_runs is None else share * float(max_runs)


def planned_runs(system: CompoundSystem, config: SystemConfig, names: Sequence[str], n: int, collect: Mapping,
                 lm_temperature: float) -> float:
    """expected_collection's executed runs for `names` on n inputs (their shared prefix once)."""
    tally = ExecutionTally()
    expected_collection(system, config, n, collect, tally, lm_temperature, names)
    return tally.executions / len(system)


def size_collection(system: CompoundSystem, config: SystemConfig, names: Sequence[str], n_available: int,
                    collect: Mapping, lm_temperature: float, limit: float) -> CollectionSize:
    """The largest collection of `names` within `limit` executed runs (module docstring: inputs first, then
    repeats, then candidates, then components)."""
    asked_m, asked_r = int(collect.get("num_candidates", 4)), int(collect.get("mc_repeats", 2))
    ladder = list(dict.fromkeys([(asked_m, asked_r), (asked_m, 1), (min(asked_m, 2), 1)]))
    for m, r in ladder:
        settings = {**collect, "num_candidates": m, "mc_repeats": r}
        per_input = planned_runs(system, config, names, 1, settings, lm_temperature)
        n = n_available if per_input <= 0 else min(n_available, math.floor(limit / per_input))
        while n > 0 and planned_runs(system, config, names, n, settings, lm_temperature) > limit:
            n -= 1  # float rounding: fit exactly
        if n >= 1:
            return CollectionSize(n, m, r, tuple(names), planned_runs(system, config, names, n, settings,
                                                                     lm_temperature), limit)
    m, r = ladder[-1]
    settings = {**collect, "num_candidates": m, "mc_repeats": r}
    kept = fitting_components(system, config, names, min(1, n_available), settings, lm_temperature, limit)
    return CollectionSize(min(1, n_available) if kept else 0, m, r, tuple(kept),
                          planned_runs(system, config, kept, 1, settings, lm_temperature) if kept else 0.0, limit)


def fitting_components(system: CompoundSystem, config: SystemConfig, names: Sequence[str], n: int,
                       collect: Mapping, lm_temperature: float, limit: float) -> list[str]:
    """Those of `names` whose collections on n inputs fit `limit` together: every one where they all do, else
    the cheapest first while they fit (in the order asked)."""
    if planned_runs(system, config, names, n, collect, lm_temperature) <= limit:
        return list(names)
    kept: list[str] = []
    for name in sorted(names, key=lambda c: planned_runs(system, config, [c], n, collect, lm_temperature)):
        if planned_runs(system, config, [*kept, name], n, collect, lm_temperature) <= limit:
            kept.append(name)
    return [c for c in names if c in kept]
