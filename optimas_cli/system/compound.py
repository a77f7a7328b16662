"""CompoundSystem: components wired by field names into a DAG, executed batched by stage."""
from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field

from optimas_cli.system.component import Component
from optimas_cli.system.configuration import SystemConfig
from optimas_cli.system.context import RunContext


class WiringError(ValueError):
    """The components cannot form a valid DAG (missing producer, cycle, duplicate output)."""


@dataclass
class Trajectory:
    """One example's path through the system: every component's inputs and outputs.

    `state` holds every field produced so far (the system inputs included); `steps[name]` is
    {"inputs", "outputs", "skipped"} for each component already executed or skipped.
    """

    example: dict
    state: dict
    steps: dict[str, dict] = field(default_factory=dict)

    def final(self, output_fields: Sequence[str]) -> dict:
        return {f: self.state.get(f) for f in output_fields}


def example_key(example: dict) -> str:
    """A stable name for an example: what its shared noise is keyed by (RunContext.paired_noise)."""
    text = json.dumps(example, sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


class CompoundSystem:
    def __init__(self, components: Sequence[Component], inputs: Sequence[str], outputs: Sequence[str]):
        self.components = {}
        for c in components:
            if c.name in self.components:
                raise WiringError(f"two components are named {c.name!r}; names must be unique")
            self.components[c.name] = c
        self.inputs, self.outputs = tuple(inputs), tuple(outputs)
        self.producer = self._producers()
        self.order = self._topological_order()
        missing = [f for f in self.outputs if f not in self.producer and f not in self.inputs]
        if missing:
            raise WiringError(f"system output(s) {missing} are produced by no component")

    # -- wiring ---------------------------------------------------------------------------------
    def _producers(self) -> dict[str, str]:
        producer: dict[str, str] = {}
        for c in self.components.values():
            for f in c.outputs:
                if f in self.inputs:
                    raise WiringError(f"component {c.name!r} outputs {f!r}, which is already a system input")
                if f in producer:
                    raise WiringError(f"field {f!r} is produced by both {producer[f]!r} and {c.name!r}")
                producer[f] = c.name
        for c in self.components.values():
            for f in c.inputs:
                if f not in producer and f not in self.inputs:
                    raise WiringError(
                        f"component {c.name!r} needs field {f!r}, which no component produces and is not a "
                        f"system input (inputs: {list(self.inputs)})"
                    )
        return producer

    def parents(self, name: str) -> list[str]:
        return sorted({self.producer[f] for f in self.components[name].inputs if f in self.producer})

    def _topological_order(self) -> list[str]:
        """Kahn's algorithm; ties keep declaration order so runs are reproducible."""
        remaining = {n: set(self.parents(n)) for n in self.components}
        order: list[str] = []
        while remaining:
            ready = [n for n in self.components if n in remaining and not remaining[n]]
            if not ready:
                raise WiringError(f"the components form a cycle among {sorted(remaining)}")
            for n in ready:
                order.append(n)
                del remaining[n]
                for deps in remaining.values():
                    deps.discard(n)
        return order

    def downstream(self, name: str) -> list[str]:
        """Every component that (transitively) consumes `name`'s outputs, in topological order."""
        reached = {name}
        for n in self.order:
            if any(p in reached for p in self.parents(n)):
                reached.add(n)
        return [n for n in self.order if n in reached and n != name]

    def rerun_cost(self, name: str | Sequence[str] | None, n: int, config: SystemConfig) -> float:
        """Equivalent runs of run_from(name) on n inputs (several names: run_changed(names); None: the
        whole system), what a budget cap is checked against before them; a router runs each of its values
        on each input."""
        changed = [name] if isinstance(name, str) else self.order if name is None else list(name)
        names = {c for first in changed for c in (first, *self.downstream(first))}
        return n * sum(self.components[c].values_per_input(config[c]) for c in names) / len(self)

    def default_config(self) -> SystemConfig:
        return SystemConfig({n: copy.deepcopy(c.default) for n, c in self.components.items()})

    def __len__(self) -> int:
        return len(self.components)

    # -- execution ------------------------------------------------------------------------------
    def start(self, examples: Sequence[dict]) -> list[Trajectory]:
        missing = [f for f in self.inputs if any(f not in ex for ex in examples)]
        if missing:
            raise KeyError(f"examples lack system input field(s) {missing}")
        return [Trajectory(example=ex, state={f: ex[f] for f in self.inputs}) for ex in examples]

    def run(self, examples: Sequence[dict], config: SystemConfig, ctx: RunContext) -> list[Trajectory]:
        """Run every component on every example."""
        return self.run_components(self.start(examples), self.order, config, ctx)

    def run_until(self, name: str, examples: Sequence[dict], config: SystemConfig, ctx: RunContext) -> list[Trajectory]:
        """Run every component that does not depend on `name` (its ancestors and parallel branches).

        `name`'s inputs are then ready, and every output it cannot influence is fixed, as preference
        collection requires ("outputs from the non-downstream components fixed").
        """
        skip = {name, *self.downstream(name)}
        return self.run_components(self.start(examples), [n for n in self.order if n not in skip], config, ctx)

    def run_from(
        self, name: str, trajectories: Sequence[Trajectory], config: SystemConfig, ctx: RunContext
    ) -> list[Trajectory]:
        """Re-run `name` and everything downstream of it; every other output is reused from the cache.

        Components not yet executed in the given trajectories (after a `run_until`) run too.
        The given trajectories are not modified.
        """
        return self.run_changed([name], trajectories, config, ctx)

    def run_changed(
        self, names: Sequence[str], trajectories: Sequence[Trajectory], config: SystemConfig, ctx: RunContext
    ) -> list[Trajectory]:
        """Re-run the components in `names` and everything downstream of any of them, each once.

        How a candidate configuration is validated cheaply: whatever did not change, and is not fed
        by something that did, keeps its cached outputs. The given trajectories are not modified.
        """
        unknown = [n for n in names if n not in self.components]
        if unknown:
            raise KeyError(f"no component named {unknown[0]!r}")
        rerun = {n for name in names for n in (name, *self.downstream(name))}
        trajs = [copy.deepcopy(t) for t in trajectories]
        for t in trajs:  # forget stale outputs of what is re-run
            for n in rerun:
                if n in t.steps:
                    for f in self.components[n].outputs:
                        t.state.pop(f, None)
                    del t.steps[n]
        todo = [n for n in self.order if n in rerun or any(n not in t.steps for t in trajs)]
        return self.run_components(trajs, todo, config, ctx)

    def run_after(
        self,
        name: str,
        trajectories: Sequence[Trajectory],
        outputs: Sequence[dict],
        config: SystemConfig,
        ctx: RunContext,
    ) -> list[Trajectory]:
        """Substitute `outputs` as `name`'s outputs (one per trajectory) and run what is downstream.

        This is the Monte Carlo step of preference collection: score a candidate y_k by the
        global reward it leads to, with every non-downstream output held fixed.
        """
        comp = self.components[name]
        trajs = [copy.deepcopy(t) for t in trajectories]
        for t, out in zip(trajs, outputs, strict=True):
            t.steps[name] = {"inputs": {f: t.state.get(f) for f in comp.inputs}, "outputs": dict(out), "skipped": False}
            t.state.update(out)
        down = set(self.downstream(name))
        for t in trajs:
            for n in down:
                if n in t.steps:
                    for f in self.components[n].outputs:
                        t.state.pop(f, None)
                    del t.steps[n]
        todo = [n for n in self.order if n != name and (n in down or any(n not in t.steps for t in trajs))]
        return self.run_components(trajs, todo, config, ctx)

    def run_components(
        self, trajs: list[Trajectory], names: Sequence[str], config: SystemConfig, ctx: RunContext
    ) -> list[Trajectory]:
        """Run the named components, in the given order, on the trajectories (modified in place and
        returned); each is one batched stage over the examples that reach it."""
        for name in names:
            comp = self.components[name]
            pending = [t for t in trajs if name not in t.steps]
            active = []
            for t in pending:
                inputs = {f: t.state.get(f) for f in comp.inputs}
                if comp.when is not None and not comp.when(inputs):
                    t.steps[name] = {"inputs": inputs, "outputs": {}, "skipped": True}
                    for f in comp.outputs:
                        t.state.setdefault(f, None)
                else:
                    active.append((t, inputs))
            if not active:
                continue
            rows = tuple(example_key(t.example) for t, _ in active) if ctx.shares_noise() else None
            outputs = comp.execute([x for _, x in active], config[name],
                                   ctx.replace(noise_rows=rows) if rows or ctx.noise_rows else ctx)
            ctx.ledger.record(name, len(active), ctx.phase, values_run=comp.values_per_input(config[name]),
                              charged=ctx.charged)
            for (t, inputs), out in zip(active, outputs, strict=True):
                t.steps[name] = {"inputs": inputs, "outputs": out, "skipped": False}
                t.state.update(out)
        return trajs
