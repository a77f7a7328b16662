"""Full-system rollouts that branch at every trainable node, keeping what each node generated.

SysDPO-Sampling draws k candidates per input at each trainable node — by diverse beam search (k
groups, Hamming penalty) or by sampling at a temperature — and runs each candidate on through the
rest of the system, so an input yields k ** (number of trainable nodes) trajectories that share
their prefixes (a shared node output is generated once and counted once in the ledger). REINFORCE
uses the same walk with k = 1 and several independent rollouts per input. Components that are not
trainable run as in any system run (batched, with the run's LM settings).

A trainable node must follow the weights contract of optim/weights.py: `build_messages(inputs, value)`
and `parse_output(text)`, with `forward` sending exactly those messages with `adapter=value`.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass, field
from pathlib import Path

from optimas_cli.errors import UserError
from optimas_cli.lm.local.registry import is_local
from optimas_cli.lm.types import LMRequest
from optimas_cli.system import CompoundSystem, RunContext, SystemConfig, Trajectory

SAMPLING = ("dbs", "temperature")
CANDIDATES, DISTINCT_CANDIDATES = "candidates", "distinct_candidates"  # ledger events of every branching


@dataclass(frozen=True)
class Branching:
    """How a trainable node's candidates are drawn: k per partial trajectory, by `sampling`."""

    k: int = 2
    sampling: str = "dbs"
    temperature: float = 1.0  # sampling=temperature
    diversity_penalty: float = 20.0  # sampling=dbs (the seed's value)

    def __post_init__(self) -> None:
        if self.sampling not in SAMPLING:
            raise UserError(f"unknown sampling {self.sampling!r}", f"use one of {', '.join(SAMPLING)}")
        if self.k < 1:
            raise UserError(f"k={self.k} candidates per node", "use k >= 1 (SysDPO needs k >= 2)")


@dataclass
class Rollout:
    """One trajectory, its input's position, the rollout stream it was drawn in, and each trainable
    node's (messages, completion, ended): `ended` is False for a completion cut at max_tokens."""

    trajectory: Trajectory
    source: int
    stream: int
    segments: dict[str, tuple[list[dict], str, bool]] = field(default_factory=dict)


def lm_model_of(component) -> str:
    """The LM layer's name for the model a weights component runs (a local name, or a folder)."""
    name = str(component.base_model_path())
    return name if is_local(name) else f"local/{Path(name).expanduser().resolve()}"


def sample_rollouts(
    system: CompoundSystem,
    examples: list[dict],
    config: SystemConfig,
    ctx: RunContext,
    trainable: list[str],
    branching: Branching,
    rollouts: int = 1,
    sample_index: int = 0,
) -> list[Rollout]:
    """Every rollout of `examples` (each repeated `rollouts` times), branching k ways at each trainable node.

    Rollout r of an input samples with sample index `sample_index + r`, so repeats draw fresh samples.
    """
    start = system.start(examples)
    current = [Rollout(copy.deepcopy(t), i, r) for i, t in enumerate(start) for r in range(rollouts)]
    for name in system.order:
        if name not in trainable:
            system.run_components([r.trajectory for r in current], [name], config, ctx)
            continue
        current = _branch(system.components[name], current, config[name], ctx, branching, sample_index)
    return current


def _branch(component, current: list[Rollout], value, ctx: RunContext, branching: Branching,
            sample_index: int) -> list[Rollout]:
    if component.when is not None:
        raise UserError(f"component {component.name!r} runs conditionally; trajectories cannot branch at it",
                        "train only components that run on every input")
    inputs = [{f: r.trajectory.state.get(f) for f in component.inputs} for r in current]
    messages = [component.build_messages(x, value) for x in inputs]
    dbs = branching.sampling == "dbs"
    requests = [
        LMRequest(messages=m, model=lm_model_of(component), max_tokens=getattr(component, "max_tokens", None),
                  n=branching.k, seed=ctx.seed, sample_index=sample_index + r.stream,
                  adapter=None if value is None else str(value),
                  temperature=None if dbs else branching.temperature,
                  diversity_penalty=branching.diversity_penalty if dbs else None)
        for m, r in zip(messages, current, strict=True)
    ]
    replies = ctx.lm.complete(requests, component=component.name, phase=ctx.phase)
    ctx.ledger.record(component.name, len(current) * branching.k, ctx.phase)
    ctx.count(component.name, CANDIDATES, sum(len(reply.texts) for reply in replies))
    ctx.count(component.name, DISTINCT_CANDIDATES, sum(len(set(reply.texts)) for reply in replies))
    branched = []
    for rollout, x, m, reply in zip(current, inputs, messages, replies, strict=True):
        for text, finish in zip(reply.texts, reply.extra["finish_reasons"], strict=True):
            out = component.parse_output(text)
            trajectory = copy.deepcopy(rollout.trajectory)
            trajectory.steps[component.name] = {"inputs": x, "outputs": out, "skipped": False}
            trajectory.state.update(out)
            branched.append(Rollout(trajectory, rollout.source, rollout.stream,
                                    {**rollout.segments, component.name: (m, text, finish != "length")}))
    return branched


def distinct_candidate_rates(ledger) -> dict[str, float]:
    """Per trainable node, distinct texts / texts drawn over the run's branchings (1.0: no two of an
    input's k candidates alike; 1/k: all k the same) -- how much new signal each extra sample brought."""
    drawn: dict[str, list[int]] = {}
    for counts in ledger.events.values():
        for component, events in counts.items():
            if events.get(CANDIDATES):
                seen = drawn.setdefault(component, [0, 0])
                seen[0] += events.get(DISTINCT_CANDIDATES, 0)
                seen[1] += events[CANDIDATES]
    return {component: round(distinct / total, 4) for component, (distinct, total) in drawn.items()}
