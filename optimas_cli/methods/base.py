"""The interface every method (optimas and the baselines) implements, so comparisons are side by side.

The runner builds a method once with its typed budget and the console to report on; `optimize` may
use the train and validation splits only and hands back a MethodOutcome; the runner evaluates it.

A method declares what it changes (`optimizes`: configuration kinds, system/component.ConfigKind) and what
it will spend (`estimate`, counted with methods/cost.py), so `optimas plan` plans every method from its own
declarations and `optimas plan` and `optimas run` refuse a pipeline it can change nothing of (`fit`) before
any run folder exists.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from rich.console import Console

from optimas_cli.errors import UserError
from optimas_cli.methods.cost import Conditions, Estimate, PhaseCount, full_runs
from optimas_cli.optim.history import HistoryEntry
from optimas_cli.system import Pipeline, RunContext, Splits, SystemConfig
from optimas_cli.system.budget import Budget
from optimas_cli.system.component import ConfigKind
from optimas_cli.system.evaluate import evaluate
from optimas_cli.system.local_reward import LocalReward

EVERY_KIND = frozenset({ConfigKind.PROMPT, ConfigKind.CHOICE, ConfigKind.WEIGHTS})


@dataclass
class MethodOutcome:
    """What a method hands back: the configuration to evaluate, plus what it learned on the way."""

    config: SystemConfig
    lrf: LocalReward | None = None  # when per-instance choices route by it at inference
    history: list[HistoryEntry] = field(default_factory=list)  # one entry per proposal judged
    extras: dict = field(default_factory=dict)  # method-specific results for results.json


class Method:
    """`budget` sizes the method's work; `console` is where it reports progress (quiet in tests).

    `optimizes`: the configuration kinds the method changes (empty: it changes nothing, e.g. unoptimized);
    `targets_are`: those components in words, where `targets` narrows them further than their kind."""

    optimizes: ClassVar[frozenset[ConfigKind]] = frozenset()
    targets_are: ClassVar[str | None] = None

    def __init__(self, name: str, budget: Budget, console: Console | None = None):
        self.name, self.budget = name, budget
        self.console = console if console is not None else Console(quiet=True)

    def optimize(self, pipeline: Pipeline, splits: Splits, ctx: RunContext, folder) -> MethodOutcome:
        raise NotImplementedError

    def targets(self, pipeline: Pipeline) -> list[str]:
        """The components this method would change on `pipeline`, in execution order."""
        system = pipeline.system
        return [n for n in system.order if system.components[n].kind in self.optimizes]

    def fit(self, pipeline: Pipeline) -> list[str]:
        """`targets`, refused in one line where there are none: the run would spend its budget changing nothing.
        `optimas plan` and `optimas run` call it before any run folder exists; `optimize` gets its targets here."""
        names = self.targets(pipeline)
        if names or not self.optimizes:
            return names
        kinds = self.targets_are or " and ".join(k.value for k in ConfigKind if k in self.optimizes)
        has = ", ".join(f"{n}: {c.kind.value}" for n, c in pipeline.system.components.items())
        raise UserError(f"method {self.name} optimizes {kinds} components, and pipeline {pipeline.name!r} has none "
                        f"({has})", f"use a method that optimizes its kinds, e.g. method=optimas (every kind); "
                        f"`optimas plan pipeline={pipeline.name} method=<name>` checks a pair before it runs")

    def estimate(self, pipeline: Pipeline, splits: Splits, conditions: Conditions) -> Estimate:
        """What `optimize` will execute, per phase (methods/cost.py); the default: nothing."""
        return Estimate(validated_final=False)

    def evaluation(self, pipeline: Pipeline, n: int, into: PhaseCount) -> None:
        """What `evaluate` executes on n examples (one repeat): the configured system on each."""
        full_runs(pipeline.system, n, into)

    def prompt_proposer(self, pipeline: Pipeline, ctx: RunContext) -> str | None:
        """Where the method's instruction candidates come from, recorded in results.json so Table 2
        compares methods that searched the same candidates: lm (written by an LM), pool (the pipeline's
        own instructions and edits, optim/prompt_pool.py), mixed (both); None: it searches no instructions."""
        return None

    def evaluate(
        self, pipeline: Pipeline, outcome: MethodOutcome, examples: list[dict], ctx: RunContext, repeats: int
    ) -> dict:
        return evaluate(pipeline, outcome.config, examples, ctx.replace(lrf=outcome.lrf), repeats)

    def print_iteration(self, entry: HistoryEntry) -> None:
        """One line per judged proposal, the same for every method that runs a gate."""
        verdict = "[green]accepted[/]" if entry.accepted else "[dim]rejected[/]"
        candidate = entry.val_before if entry.val_candidate is None else entry.val_candidate
        changed = entry.component if isinstance(entry.component, str) else ", ".join(entry.component or ["-"])
        gate = entry.gate  # the per-example evidence behind the decision, where a gate recorded it
        evidence = f" · Δ/example {gate['delta']:+.3f} [{gate['ci_low']:+.3f}, {gate['ci_high']:+.3f}]" if gate else ""
        outcome = (f"· nothing validated: {entry.note}" if entry.val_candidate is None and entry.note and not entry.accepted
                   else f"→ {candidate:.3f} {verdict}{evidence}")
        self.console.print(f"  iter {entry.iteration:>3} · {changed:<22} · val {entry.val_before:.3f}"
                           f" {outcome} · runs {entry.runs_so_far:.1f}")
