"""One benchmark instance, drawn from its settings: the DAG, each component's kind and quality tables.

Quality model (exact.py computes its expectations in closed form). Example x has an input type t(x).
Component k under value v writes a text whose `marks` quality marks are "solid" or "shaky"; the share
of solid marks has expectation

    y_k(x) = q_k(v, t(x)) * (1 - coupling + coupling * mean over parents p of solid share of p)

(sources: y_k = q_k). The global reward of an example is the mean solid share over all K outputs.
Every y_k is a polynomial with nonnegative coefficients in the q's, so the expected reward rises with
each q_k: the optimum takes every component's best value, per input type for a router. A prompt's or
a global choice's quality is the same for every input type (that keeps the optimum in closed form for
any K); routers carry the heterogeneity: each input type has its own best option, which a
context-free leaderboard (the routers' naive local metric) does not know.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from optimas_cli.errors import UserError

SHAPES = ("chain", "tree", "diamond")
KINDS = ("prompt", "choice", "route", "mix")
TYPES = ("legal", "medical", "travel", "finance", "coding", "retail", "sports", "science")
STRATEGIES = ("stepwise", "outline-first", "checklist", "cite-sources", "self-check", "plain-summary",
              "worked-example", "contrastive")
OPTIONS = ("model-a", "model-b", "model-c", "model-d", "model-e", "model-f", "model-g", "model-h")
UNGUIDED = "unguided"  # what a prompt component does under an instruction naming no strategy it knows
BEST_QUALITY = 0.95
OTHER_QUALITY = (0.35, 0.8)  # every other value's quality is drawn uniformly from this range
UNGUIDED_QUALITY = 0.3


@dataclass(frozen=True)
class ComponentSpec:
    index: int
    name: str
    kind: str  # prompt | choice | route
    parents: tuple[int, ...]
    values: tuple[str, ...]  # strategies (prompt) or options (choice, route)
    quality: dict  # value -> quality (prompt, choice) or value -> tuple of qualities per input type (route)
    default: str  # the initial strategy (prompt) or option (choice); routers start on the leaderboard
    leaderboard: dict = field(default_factory=dict)  # route: value -> context-free score (naive local metric)

    @property
    def field(self) -> str:
        return f"draft_{self.index:02d}"

    def q(self, value: str, type_index: int) -> float:
        table = self.quality[value] if value in self.quality else UNGUIDED_QUALITY
        return float(table[type_index]) if isinstance(table, tuple) else float(table)


@dataclass(frozen=True)
class Instance:
    components: tuple[ComponentSpec, ...]
    types: tuple[str, ...]
    coupling: float
    noise: float
    marks: int


def parents_of(shape: str, k: int) -> tuple[int, ...]:
    """Component k's parents (0-indexed). chain: k-1; tree: an out-tree, (k-1)//2; diamond: a stack of
    diamonds, single joins at 0, 3, 6, ... reading the two branches before them, branches reading the join."""
    if k == 0:
        return ()
    if shape == "chain":
        return (k - 1,)
    if shape == "tree":
        return ((k - 1) // 2,)
    if k % 3 == 0:  # a join: both branches of the diamond before it
        return (k - 2, k - 1)
    return (k - k % 3,)  # a branch of the diamond opened by the join before it


def kind_of(kinds: str, k: int) -> str:
    return ("prompt", "choice", "route")[k % 3] if kinds == "mix" else kinds


def draw_instance(components: int = 10, shape: str = "chain", kinds: str = "mix", options: int = 4,
                  input_types: int = 3, noise: float = 0.5, coupling: float = 0.5, marks: int = 8,
                  instance: int = 0) -> Instance:
    if not 2 <= int(components) <= 50:
        raise UserError(f"pipeline.components={components}", "use 2 to 50 components")
    if shape not in SHAPES or kinds not in KINDS:
        raise UserError(f"pipeline.shape={shape}, pipeline.kinds={kinds}",
                        f"shape is one of {', '.join(SHAPES)}; kinds one of {', '.join(KINDS)}")
    if not 2 <= int(options) <= len(OPTIONS) or not 1 <= int(input_types) <= len(TYPES):
        raise UserError(f"pipeline.options={options}, pipeline.input_types={input_types}",
                        f"options 2 to {len(OPTIONS)}, input_types 1 to {len(TYPES)}")
    if not (0 <= noise <= 1 and 0 <= coupling <= 1 and 1 <= marks <= 64):
        raise UserError(f"pipeline.noise={noise}, coupling={coupling}, marks={marks}",
                        "noise and coupling lie in [0, 1]; marks 1 to 64")
    rng = np.random.default_rng([int(instance), 27])
    types = TYPES[: int(input_types)]
    specs = []
    for k in range(int(components)):
        kind = kind_of(kinds, k)
        pool = STRATEGIES if kind == "prompt" else OPTIONS
        values = tuple(str(v) for v in rng.choice(pool, size=int(options), replace=False))
        if kind == "route":
            quality = {v: tuple(float(x) for x in rng.uniform(*OTHER_QUALITY, size=len(types))) for v in values}
            best = rng.integers(len(values), size=len(types))  # each type's own best option
            for t, b in enumerate(best):
                row = list(quality[values[b]])
                row[t] = BEST_QUALITY
                quality[values[b]] = tuple(row)
            leaderboard = {v: float(np.mean(quality[v])) for v in values}
            default = max(values, key=leaderboard.get)
        else:
            best = int(rng.integers(len(values)))
            quality = {v: BEST_QUALITY if i == best else float(rng.uniform(*OTHER_QUALITY)) for i, v in enumerate(values)}
            default = values[int(rng.choice([i for i in range(len(values)) if i != best]))]
            leaderboard = {}
        specs.append(ComponentSpec(k, f"step_{k:02d}", kind, parents_of(shape, k), values, quality, default,
                                   leaderboard))
    return Instance(tuple(specs), types, float(coupling), float(noise), int(marks))
