"""One benchmark instance, drawn from its settings: the DAG, each component's kind and quality tables.

Quality model (exact.py computes its expectations and optimum exactly). Example x has an input type
t(x). Component k under value v writes a text whose `marks` quality marks are "solid" or "shaky"; the
share of solid marks has expectation y_k(x), given the shares s_p of what its parents wrote:

interaction=none (separable):
    y_k(x) = q_k(v, t(x)) * (1 - coupling + coupling * mean over parents p of s_p)
Every y_k is a polynomial with nonnegative coefficients in the q's, so the expected reward rises with
each q_k: the optimum takes every component's best value, per input type for a router. A prompt's or
a global choice's quality is the same for every input type; routers carry the heterogeneity: each
input type has its own best option, which a context-free leaderboard (the routers' naive local metric)
does not know.

interaction=on (a component's quality depends on what it receives):
    y_k(x) = (1 - coupling) * q_k(v, t(x)) * mean over parents p of m_kp(v_p, v) + coupling * mean_p s_p
where v_p is the value parent p used and m_kp a seeded compatibility table in [0.5, 1]: a draft keeps
its own quality in full only from inputs that fit its strategy or model, and at worst half of it. The
second term is what it inherits: a poor input draft still makes a poorer draft. Every component's
quality q_k(v, t) now depends on the input type (each type has its own best value, as a router's
does), so a prompt or a global choice must trade types off, and a component's best value depends on
its parents' and children's values: one coordinate sweep need not find the optimum, and a router's
best option depends on the request type and on what its parents did, which it reads in its input.
Sources (no parents) write y_k = q_k(v, t) in both modes. The propagation coefficient (coupling over
the number of parents) does not depend on any value, so the expected reward is a weighted sum of
terms over single components and parent-child pairs (exact.py solves it exactly by elimination).

The reward of an example (metric): `mean` (the default), the mean of the K drafts' solid shares;
`sink`, the solid share of the last draft alone: component K-1, the highest index. Parents come before
their children, so no component reads K-1: it is a sink of every shape. In a chain it is the only sink
and every component feeds it. In a tree (an out-tree) it is the last leaf, and only its ancestors (the
path k -> (k-1)//2 up to the root) feed it: every component off that path, every other leaf included,
does not affect the reward at all. In a stack of diamonds it is the last join (K = 1 mod 3) or a branch
of the last diamond; when K is a multiple of 3, its sibling branch K-2 does not affect the reward. Real
pipelines (HotpotQA, Amazon, PubMedQA) score only their final output; under `mean` every component's
own share is in the reward, which makes local credit unusually easy.

Values: up to 8 named strategies or options; beyond 8 (up to 128) the pool adds generated names
("approach-009", "model-009", ...), drawn per instance like the named ones. The interaction tables
come from a random stream of their own, so interaction=none instances are unchanged by them.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import cached_property

import numpy as np

from optimas_cli.errors import UserError

SHAPES = ("chain", "tree", "diamond")
KINDS = ("prompt", "choice", "route", "mix")
TYPES = ("legal", "medical", "travel", "finance", "coding", "retail", "sports", "science")
STRATEGIES = ("stepwise", "outline-first", "checklist", "cite-sources", "self-check", "plain-summary",
              "worked-example", "contrastive")
OPTIONS = ("model-a", "model-b", "model-c", "model-d", "model-e", "model-f", "model-g", "model-h")
MAX_OPTIONS = 128
# Pools beyond 8 values: fixed-width generated names (no name is a substring of another).
STRATEGY_POOL = STRATEGIES + tuple(f"approach-{i:03d}" for i in range(len(STRATEGIES) + 1, MAX_OPTIONS + 1))
OPTION_POOL = OPTIONS + tuple(f"model-{i:03d}" for i in range(len(OPTIONS) + 1, MAX_OPTIONS + 1))
INTERACTIONS = ("none", "on")
METRICS = ("mean", "sink")  # the reward: every draft's mean solid share, or the last draft's (docstring)
UNGUIDED = "unguided"  # what a prompt component does under an instruction naming no strategy it knows
BEST_QUALITY = 0.95
OTHER_QUALITY = (0.35, 0.8)  # every other value's quality is drawn uniformly from this range
UNGUIDED_QUALITY = 0.3
COMPATIBILITY = (0.5, 1.0)  # interaction=on: the share of a draft's own quality an input's fit keeps


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
    # interaction=on: per parent (in `parents` order), parent value -> value -> compatibility m_kp
    compatibility: tuple[dict, ...] = ()

    @property
    def field(self) -> str:
        return f"draft_{self.index:02d}"

    def q(self, value: str, type_index: int) -> float:
        table = self.quality[value] if value in self.quality else UNGUIDED_QUALITY
        return float(table[type_index]) if isinstance(table, tuple) else float(table)

    def fit(self, parent_position: int, parent_value: str, value: str) -> float:
        """m_kp: how well `value` uses what parent number `parent_position` wrote with `parent_value`
        (a value outside the tables, e.g. `unguided`, fits worst)."""
        return float(self.compatibility[parent_position].get(parent_value, {}).get(value, COMPATIBILITY[0]))

    @cached_property
    def quality_table(self) -> np.ndarray:
        """q as an array: [value (in `values` order), input type] (a per-type table: a router's, or any
        component's under interaction=on)."""
        return np.array([self.quality[v] for v in self.values], dtype=float)

    @cached_property
    def fit_tables(self) -> tuple[np.ndarray, ...]:
        """Per parent, m_kp as an array: [parent value (in the parent's `values` order), value (in `values` order)]."""
        return tuple(np.array([[row[v] for v in self.values] for row in table.values()]) for table in self.compatibility)


@dataclass(frozen=True)
class Instance:
    components: tuple[ComponentSpec, ...]
    types: tuple[str, ...]
    coupling: float
    noise: float
    marks: int
    interaction: str = "none"
    metric: str = "mean"  # METRICS: which drafts the reward of an example reads

    def share(self, spec: ComponentSpec, value: str, type_index: int, parents: list[tuple[str, float]]) -> float:
        """y_k: the expected solid share of `spec` under `value` on input type `type_index`, given each
        parent's (value, solid share) in `spec.parents` order; the one home of the quality model."""
        y = spec.q(value, type_index)
        if not parents:
            return y
        upstream = sum(s for _, s in parents) / len(parents)
        if self.interaction == "none":
            return y * (1 - self.coupling + self.coupling * upstream)
        fit = sum(spec.fit(i, v, value) for i, (v, _) in enumerate(parents)) / len(parents)
        return (1 - self.coupling) * y * fit + self.coupling * upstream


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
                  instance: int = 0, interaction: str = "none", metric: str = "mean") -> Instance:
    if not 2 <= int(components) <= 50:
        raise UserError(f"pipeline.components={components}", "use 2 to 50 components")
    if shape not in SHAPES or kinds not in KINDS:
        raise UserError(f"pipeline.shape={shape}, pipeline.kinds={kinds}",
                        f"shape is one of {', '.join(SHAPES)}; kinds one of {', '.join(KINDS)}")
    if not 2 <= int(options) <= MAX_OPTIONS or not 1 <= int(input_types) <= len(TYPES):
        raise UserError(f"pipeline.options={options}, pipeline.input_types={input_types}",
                        f"options 2 to {MAX_OPTIONS}, input_types 1 to {len(TYPES)}")
    if interaction not in INTERACTIONS:
        raise UserError(f"pipeline.interaction={interaction}", f"use one of {', '.join(INTERACTIONS)}")
    if metric not in METRICS:
        raise UserError(f"pipeline.metric={metric}", f"use one of {', '.join(METRICS)}")
    if not (0 <= noise <= 1 and 0 <= coupling <= 1 and 1 <= marks <= 64):
        raise UserError(f"pipeline.noise={noise}, coupling={coupling}, marks={marks}",
                        "noise and coupling lie in [0, 1]; marks 1 to 64")
    rng = np.random.default_rng([int(instance), 27])
    types = TYPES[: int(input_types)]
    specs = []
    for k in range(int(components)):
        kind = kind_of(kinds, k)
        named = STRATEGIES if kind == "prompt" else OPTIONS  # the pool of every instance with at most 8 values
        pool = named if int(options) <= len(named) else (STRATEGY_POOL if kind == "prompt" else OPTION_POOL)
        values = tuple(str(v) for v in rng.choice(pool, size=int(options), replace=False))
        if kind == "route":
            quality = per_type_quality(rng, values, len(types))
            leaderboard = {v: float(np.mean(quality[v])) for v in values}
            default = max(values, key=leaderboard.get)
        else:
            best = int(rng.integers(len(values)))
            quality = {v: BEST_QUALITY if i == best else float(rng.uniform(*OTHER_QUALITY)) for i, v in enumerate(values)}
            default = values[int(rng.choice([i for i in range(len(values)) if i != best]))]
            leaderboard = {}
        specs.append(ComponentSpec(k, f"step_{k:02d}", kind, parents_of(shape, k), values, quality, default,
                                   leaderboard))
    if interaction == "on":
        specs = with_interaction(specs, len(types), np.random.default_rng([int(instance), 27, 44]))
    return Instance(tuple(specs), types, float(coupling), float(noise), int(marks), interaction, metric)


def per_type_quality(rng: np.random.Generator, values: tuple[str, ...], n_types: int) -> dict:
    """value -> quality per input type: uniform in OTHER_QUALITY, each type's own best value at BEST_QUALITY."""
    quality = {v: tuple(float(x) for x in rng.uniform(*OTHER_QUALITY, size=n_types)) for v in values}
    for t, b in enumerate(rng.integers(len(values), size=n_types)):
        row = list(quality[values[b]])
        row[t] = BEST_QUALITY
        quality[values[b]] = tuple(row)
    return quality


def with_interaction(specs: list[ComponentSpec], n_types: int, rng: np.random.Generator) -> list[ComponentSpec]:
    """interaction=on: prompts and global choices get per-type quality tables (routers keep theirs), and
    every component a compatibility table per parent (module docstring)."""
    out = []
    for spec in specs:
        quality = spec.quality if spec.kind == "route" else per_type_quality(rng, spec.values, n_types)
        compatibility = tuple(
            {u: {v: float(m) for v, m in zip(spec.values, rng.uniform(*COMPATIBILITY, size=len(spec.values)), strict=True)}
             for u in specs[p].values}
            for p in spec.parents)
        out.append(replace(spec, quality=quality, compatibility=compatibility))
    return out
