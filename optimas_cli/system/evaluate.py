"""Scoring a configuration: the global reward of every example, and repeated evaluation (mean, std)."""
from __future__ import annotations

import statistics
from collections.abc import Sequence

from optimas_cli.progress import track
from optimas_cli.system.compound import Trajectory
from optimas_cli.system.configuration import SystemConfig
from optimas_cli.system.context import RunContext
from optimas_cli.system.pipeline import Pipeline


def rewards(pipeline: Pipeline, trajectories: Sequence[Trajectory]) -> list[float]:
    """R(x, f(x; v)) for each trajectory."""
    outs = pipeline.system.outputs
    return pipeline.metric.many([t.example for t in trajectories], [t.final(outs) for t in trajectories])


def summarize(per_repeat: Sequence[Sequence[float]], n: int) -> dict:
    """The shape results.json uses for a split: mean and std over repeats, per-repeat scores, n, and
    each example's reward averaged over the repeats (what confidence intervals resample)."""
    scores = [statistics.fmean(r) if r else 0.0 for r in per_repeat]
    return {
        "mean": statistics.fmean(scores) if scores else 0.0,
        "std": statistics.pstdev(scores) if len(scores) > 1 else 0.0,
        "scores": scores,
        "n": n,
        "per_example": [statistics.fmean(column) for column in zip(*per_repeat, strict=True)],
    }


def evaluate(
    pipeline: Pipeline, config: SystemConfig, examples: Sequence[dict], ctx: RunContext, repeats: int = 1
) -> dict:
    """Run the system `repeats` times (distinct LM samples each time) and summarize the mean reward.

    With `ctx.traces` (a TraceSink), every example of every repeat is written there, labelled with
    `ctx.phase` as its split.
    """
    per_repeat = []
    for r in track(range(repeats), f"{ctx.phase} · {len(examples)} examples x {repeats} repeat(s)", lm=ctx.lm):
        trajs = pipeline.system.run(examples, config, ctx.replace(sample_index=ctx.sample_index + r))
        scores = rewards(pipeline, trajs)
        if ctx.traces is not None:
            ctx.traces.write_trajectories(pipeline.system, trajs, scores, ctx.phase, r)
        per_repeat.append(scores)
    return summarize(per_repeat, len(examples))
