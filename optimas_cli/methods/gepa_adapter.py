"""What GEPA (the `gepa` package) needs of the compound system: a GEPAAdapter and a reflection LM.

- `SystemAdapter.evaluate` runs OUR system (its components, the run's LM layer and ledger) with a GEPA
  candidate's texts as the prompt components' instructions, and scores each example with the
  pipeline's global metric. Training examples run in ledger phase "local_optimization", validation
  examples in "validation". Trajectories are kept per (example, candidate); a candidate re-runs only
  the components that differ from the cheapest cached trajectory of the same example and what follows
  them (`CompoundSystem.run_changed`, as every other method validates), so GEPA's child candidate on
  its parent's minibatch, and on validation, pays for the changed component onwards.
- Before any system run the run's caps are checked with that evaluation's cost ahead; one it would
  cross raises `CapReached` (GEPA ends the iteration there; the method's stopper then ends GEPA), so a
  run cap is never crossed.
- `make_reflective_dataset` gives each prompt component, per example, its inputs, its outputs and the
  feedback GEPA's reflection reads: the metric value the pipeline's final output got and the expected
  result (the example's gold fields).
- `RunReflectionLM` is GEPA's `reflection_lm` callable, served by the run's LM client (cached, counted
  in the usage ledger under "gepa.reflection"); its home is optim/prompt_reflection.py, which Algorithm 1's
  `gepa` prompt proposer shares, and it is re-exported here for methods/gepa.py.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from gepa import EvaluationBatch

from optimas_cli.lrf.text import format_value
from optimas_cli.methods.scorers import input_key
from optimas_cli.optim.prompt_reflection import REFLECTION_TAG as REFLECTION_TAG  # re-exported
from optimas_cli.optim.prompt_reflection import RunReflectionLM as RunReflectionLM  # re-exported
from optimas_cli.system import Pipeline, RunContext, Splits, SystemConfig, Trajectory
from optimas_cli.system.caps import cap_reached
from optimas_cli.system.evaluate import rewards

FIELD_CHARS = 600  # each field in the reflective dataset is cut to this many characters
PHASES = {"train": "local_optimization", "val": "validation"}


class CapReached(Exception):
    """An evaluation GEPA asked for would cross a budget cap (`ctx.caps.stopped` names it)."""


@dataclass(frozen=True)
class Example:
    """GEPA's DataInst: one row of the training or validation split."""

    split: str
    index: int


def _cut(value) -> str:
    text = format_value(value)
    return text if len(text) <= FIELD_CHARS else text[: FIELD_CHARS - 1] + "…"


class SystemAdapter:
    """The GEPAAdapter over a pipeline's prompt components (see the module docstring)."""

    propose_new_texts = None  # GEPA's own reflective proposal, through `reflection_lm`

    def __init__(self, pipeline: Pipeline, splits: Splits, prompt_names: Sequence[str], ctx: RunContext):
        self.pipeline, self.system, self.ctx = pipeline, pipeline.system, ctx
        self.prompt_names = list(prompt_names)
        self.rows = {"train": list(splits.train), "val": list(splits.val)}
        self.default = self.system.default_config()
        self.cache: dict[Example, dict[str, tuple[SystemConfig, Trajectory]]] = {}

    def data(self, split: str) -> list[Example]:
        return [Example(split, i) for i in range(len(self.rows[split]))]

    def config_for(self, candidate: dict[str, str]) -> SystemConfig:
        config = self.default
        for name in self.prompt_names:
            config = config.replace(name, candidate[name])
        return config

    # -- GEPAAdapter ------------------------------------------------------------------------------
    def evaluate(self, batch: list[Example], candidate: dict[str, str], capture_traces: bool = False) -> EvaluationBatch:
        trajs = self.run(batch, self.config_for(candidate))
        return EvaluationBatch(outputs=[t.final(self.system.outputs) for t in trajs], scores=rewards(self.pipeline, trajs),
                               trajectories=trajs if capture_traces else None)

    def make_reflective_dataset(self, candidate: dict[str, str], eval_batch: EvaluationBatch,
                                components_to_update: list[str]) -> dict[str, list[dict]]:
        metric, inputs = self.pipeline.metric.name, set(self.system.inputs)
        dataset: dict[str, list[dict]] = {name: [] for name in components_to_update}
        for traj, score in zip(eval_batch.trajectories or [], eval_batch.scores, strict=True):
            gold = {k: _cut(v) for k, v in traj.example.items() if k not in inputs}
            final = {k: _cut(v) for k, v in traj.final(self.system.outputs).items()}
            feedback = (f"The pipeline's final output {final} scored {metric} = {score:.3f} (1.0 is best). "
                        f"The expected result: {gold or '(not given)'}.")
            for name in components_to_update:
                step = traj.steps.get(name)
                if step and not step["skipped"]:
                    dataset[name].append({"Inputs": {k: _cut(v) for k, v in step["inputs"].items()},
                                          "Generated Outputs": {k: _cut(v) for k, v in step["outputs"].items()},
                                          "Feedback": feedback})
        return {name: records for name, records in dataset.items() if records}

    # -- running the system, cached and capped --------------------------------------------------------
    def _key(self, config: SystemConfig) -> str:
        return input_key({n: config[n] for n in self.prompt_names})

    def _nearest(self, example: Example, config: SystemConfig) -> tuple[tuple[str, ...], Trajectory] | None:
        """The cheapest cached trajectory of `example` to reach `config` from, with the components to re-run
        (() when this very configuration is cached); None when nothing is cached: the whole system runs."""
        best, best_cost = None, float("inf")
        for cached, traj in self.cache.get(example, {}).values():
            changed = tuple(n for n in self.prompt_names if cached[n] != config[n])
            cost = self.system.rerun_cost(changed, 1, config) if changed else 0.0
            if cost < best_cost:
                best, best_cost = (changed, traj), cost
        return best

    def run(self, batch: Sequence[Example], config: SystemConfig) -> list[Trajectory]:
        key = self._key(config)
        groups: dict[tuple[str, tuple[str, ...] | None], list[tuple[Example, Trajectory | None]]] = {}
        for example in dict.fromkeys(batch):  # GEPA pads a minibatch with repeated examples: each runs once
            nearest = self._nearest(example, config)
            if nearest is None:
                groups.setdefault((example.split, None), []).append((example, None))
            elif nearest[0]:
                groups.setdefault((example.split, nearest[0]), []).append((example, nearest[1]))
        ahead = sum(self.system.rerun_cost(None if changed is None else list(changed), len(members), config)
                    for (_, changed), members in groups.items())
        if ahead and cap_reached(self.ctx, {"max_runs": ahead}):
            raise CapReached(str(self.ctx.caps.stopped))
        for (split, changed), members in groups.items():
            ctx = self.ctx.replace(phase=PHASES[split])
            with self.ctx.ledger.timed(PHASES[split]):
                if changed is None:
                    trajs = self.system.run([self.rows[split][e.index] for e, _ in members], config, ctx)
                else:
                    trajs = self.system.run_changed(list(changed), [base for _, base in members], config, ctx)
            for (example, _), traj in zip(members, trajs, strict=True):
                self.cache.setdefault(example, {})[key] = (config, traj)
        return [self.cache[example][key][1] for example in batch]
