"""`pipeline=synthetic`: the simulator as a Pipeline, with its optimum in `pipeline.info`, its perfect
local reward in `pipeline.local_reward_oracle` (what `lrf=oracle` scores with) and the exact expected
reward of one output in `pipeline.exact_output_reward` (what `lrf.collect.labels=exact` orders pairs by)."""
from __future__ import annotations

from collections.abc import Mapping
from functools import partial

import numpy as np

from optimas_cli.errors import UserError
from optimas_cli.system import CompoundSystem, Metric, Pipeline, Splits, routes_by_lrf
from optimas_pipelines.synthetic import exact
from optimas_pipelines.synthetic.components import SimulatedComponent, request_text, solid_share
from optimas_pipelines.synthetic.spec import draw_instance


def examples(instance, n: int, split: str, seed: int) -> list[dict]:
    """n requests of uniformly drawn input types (seeded per split, so the splits are disjoint draws)."""
    part = {"train": 1, "val": 2, "test": 3}[split]
    rng = np.random.default_rng([seed, part])
    rows = []
    for i, t in enumerate(rng.integers(len(instance.types), size=n)):
        rows.append({"id": f"{split}-{i:04d}", "request": request_text(part * 1000 + i, instance.types[int(t)])})
    return rows


MAX_SPLIT = 999  # request numbers are unique across splits (1000 per split)


def exact_output_reward(instance, component: str, config: Mapping, x: dict, y: dict) -> float:
    """E[reward | component received x and wrote y], the rest under `config` (exact.exact_given_output);
    a router on an LRF route (`lrf`, `lrf_pre`) picks optimally given the rest, as lrf=oracle's does (its picks depend on a
    learned model the exact order knows nothing of)."""
    free = {name: {"route": "best"} if routes_by_lrf(value) else value
            for name, value in config.items()}
    return exact.exact_given_output(instance, free, component, x, y)


def build(data_dir=None, components: int = 10, shape: str = "chain", kinds: str = "mix", options: int = 4,
          input_types: int = 3, noise: float = 0.5, coupling: float = 0.5, marks: int = 8, instance: int = 0,
          interaction: str = "none", metric: str = "mean", train_size: int = 200, val_size: int = 100,
          test_size: int = 200, **_) -> Pipeline:
    if max(train_size, val_size, test_size) > MAX_SPLIT:
        raise UserError(f"pipeline split sizes {train_size}/{val_size}/{test_size}", f"use at most {MAX_SPLIT} per split")
    inst = draw_instance(components, shape, kinds, options, input_types, noise, coupling, marks, instance, interaction,
                         metric)
    comps = [SimulatedComponent(spec, inst, instance) for spec in inst.components]
    fields = tuple(s.field for s in inst.components)
    system = CompoundSystem(comps, inputs=("request",), outputs=fields)
    # The reward of an example: the mean share of solid marks over every component's draft, or (sink) the
    # last draft's alone, as a real pipeline scores only its final output (spec.py).
    if metric == "sink":
        reward = Metric("solid_share", lambda ex, out: solid_share(out[fields[-1]]))
    else:
        reward = Metric("solid_share", lambda ex, out: sum(solid_share(out[f]) for f in fields) / len(fields))
    splits = Splits(examples(inst, train_size, "train", instance), examples(inst, val_size, "val", instance),
                    examples(inst, test_size, "test", instance))
    info = {
        "settings": {"components": components, "shape": shape, "kinds": kinds, "options": options,
                     "input_types": input_types, "noise": noise, "coupling": coupling, "marks": marks,
                     "instance": instance, "interaction": interaction, "metric": metric},
        "kinds": {s.name: s.kind for s in inst.components},
        "optimal_config": exact.optimal_config(inst),
        "per_type_best": exact.per_type_best(inst),
        # Over each split's full rows; a budget that caps a split changes its mean: use exact.optimum_score.
        "optimum_score": {k: exact.optimum_score(inst, rows) for k, rows in vars(splits).items()},
        "initial_score": {k: exact.expected_score(inst, system.default_config(), rows) for k, rows in vars(splits).items()},
    }
    pipeline = Pipeline(name="synthetic", system=system, splits=splits, metric=reward, info=info)
    pipeline.instance = inst  # for exact.expected_* (scripts/synthetic_benchmark.py, tests)
    pipeline.local_reward_oracle = exact.LocalRewardOracle(inst)  # optimas_cli/lrf/oracle.py
    pipeline.exact_output_reward = partial(exact_output_reward, inst)  # optimas_cli/lrf/stage.py collect_options
    return pipeline
