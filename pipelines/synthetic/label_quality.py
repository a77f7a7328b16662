"""How often a Stage 1 preference label agrees with the exact order of its two candidates.

A label says candidate a beat candidate b because a's downstream Monte Carlo mean was higher. The truth
is the order of E[reward | k received x, k wrote y], every other component under the collection's
configuration: exact on the simulator, with k's parents' values and solid shares read from x and k's own
value and solid share read from y (its realized marks count: the mean metric scores them, and children
read them). Components that neither feed k nor read from it add the same to both candidates (the
expected reward is additive in them), so their realized outputs do not change the order. Pairs whose
exact rewards are equal have no order and are left out (counted as `exact_ties`).

    python -m pipelines.synthetic.label_quality --out docs/results/label-quality

collects Stage 1 on every setting of the committed grid (GRID) with the run's own collection settings
(conf/lrf/minilm.yaml `collect`, 1x the runs) and writes `label_quality.csv` (a row per setting, instance
and component) and `README.md` (the table, generated). Nothing is tuned here: the grid, the simulator and
the collection settings are fixed before the rows are computed.
"""
from __future__ import annotations

import argparse
import csv
import itertools
import statistics
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from optimas_cli.lrf.collect import COLLECTION_PHASE, collect_all
from optimas_cli.lrf.pairs import PreferencePair
from optimas_cli.system import RunContext, RunLedger, SystemConfig
from pipelines.synthetic.components import named_value, solid_share
from pipelines.synthetic.exact import expected_reward, names_for, type_index
from pipelines.synthetic.spec import Instance
from pipelines.synthetic.system import build

# The committed grid (fixed before its rows were computed): K x interaction x metric x noise, on the phase
# map's other settings (chain, mix, 4 options, 3 input types, noise 0.5, coupling 0.5, 8 marks).
GRID = {"components": (10, 30), "interaction": ("none", "on"), "metric": ("mean", "sink"),
        "paired_noise": ("independent", "shared")}
INSTANCES = (0, 1, 2)
INPUTS = 200  # Stage 1 inputs per setting: ~600 candidate pairs per component, enough for a per-component interval
# conf/lrf/minilm.yaml `collect` (what a run collects with), and budget=synthetic's run temperature 0
COLLECT = {"num_candidates": 3, "mc_repeats": 2, "epsilon": 0.01, "temperature": 0.9, "diverse": True,
           "choices": "sample", "downstream_temperature": None}


def exact_given_output(instance: Instance, config: Mapping, component: str, x: dict, y: dict) -> float:
    """E[reward | component received x and wrote y] (module docstring)."""
    spec = next(s for s in instance.components if s.name == component)
    t = type_index(instance, x)
    parents = [instance.components[p] for p in spec.parents]
    fixed = {p.name: named_value(x[p.field] or "") for p in parents}
    fixed[component] = named_value(y[spec.field] or "")
    observed = {p.index: solid_share(x[p.field]) for p in parents}
    observed[spec.index] = solid_share(y[spec.field])
    return expected_reward(instance, names_for(instance, config, t, fixed), t, observed)


def label_agreement(instance: Instance, config: Mapping, pairs: Sequence[PreferencePair]) -> dict:
    """Per component: pairs, exact ties, and the share of the others whose label the exact order confirms."""
    out: dict[str, dict] = {}
    for pair in pairs:
        row = out.setdefault(pair.component, {"pairs": 0, "exact_ties": 0, "agree": 0})
        row["pairs"] += 1
        chosen = exact_given_output(instance, config, pair.component, pair.context, pair.chosen)
        rejected = exact_given_output(instance, config, pair.component, pair.context, pair.rejected)
        if abs(chosen - rejected) < 1e-12:
            row["exact_ties"] += 1
        elif chosen > rejected:
            row["agree"] += 1
    for row in out.values():
        ordered = row["pairs"] - row["exact_ties"]
        row["agreement"] = row["agree"] / ordered if ordered else None
    return out


def collect_labels(settings: Mapping, instance: int, inputs: int = INPUTS) -> tuple[dict, RunLedger]:
    """One Stage 1 collection on one setting; its per-component agreement and its ledger."""
    pipeline = build(components=settings["components"], interaction=settings["interaction"],
                     metric=settings["metric"], instance=instance, train_size=inputs)
    ledger = RunLedger(len(pipeline.system))
    ctx = RunContext(ledger=ledger, seed=instance, phase=COLLECTION_PHASE,
                     paired_noise=settings["paired_noise"] == "shared")
    config = SystemConfig(pipeline.system.default_config())
    pairs = collect_all(pipeline.system, config, pipeline.splits.train, ctx, pipeline.metric, **COLLECT)
    return label_agreement(pipeline.instance, config, [p for ps in pairs.values() for p in ps]), ledger


def wilson(agree: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """The Wilson 95% interval of a share agree / n."""
    if n == 0:
        return (float("nan"), float("nan"))
    p = agree / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * np.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return (float(centre - half), float(centre + half))


def settings_grid() -> list[dict]:
    keys = list(GRID)
    return [dict(zip(keys, values, strict=True)) for values in itertools.product(*GRID.values())]


def measure(instances: Sequence[int] = INSTANCES, inputs: int = INPUTS) -> list[dict]:
    rows = []
    for settings in settings_grid():
        for instance in instances:
            agreement, ledger = collect_labels(settings, instance, inputs)
            runs = round(ledger.equivalent_runs(COLLECTION_PHASE), 1)
            for component, row in agreement.items():
                rows.append({**settings, "instance": instance, "component": component, "runs": runs, **row})
    return rows


def summary(rows: Sequence[dict]) -> list[dict]:
    """Per setting: pooled agreement over every ordered pair (Wilson interval), the spread over components."""
    out = []
    for settings in settings_grid():
        mine = [r for r in rows if all(r[k] == v for k, v in settings.items())]
        agree = sum(r["agree"] for r in mine)
        ordered = sum(r["pairs"] - r["exact_ties"] for r in mine)
        per_component = [r["agreement"] for r in mine if r["agreement"] is not None]
        low, high = wilson(agree, ordered)
        out.append({**settings, "pairs": sum(r["pairs"] for r in mine), "exact_ties": sum(r["exact_ties"] for r in mine),
                    "ordered": ordered, "runs": sum({r["instance"]: r["runs"] for r in mine}.values()),
                    "agreement": agree / ordered if ordered else float("nan"), "low": low, "high": high,
                    "worst_component": min(per_component, default=float("nan")),
                    "median_component": statistics.median(per_component) if per_component else float("nan")})
    return out


def write(rows: Sequence[dict], folder: Path, command: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / "label_quality.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    lines = ["# Label quality: Stage 1 labels against the exact order", "",
             "Generated by `" + command + "` (pipelines/synthetic/label_quality.py, which says what is measured).",
             "Each row pools every component of instances " + ", ".join(map(str, INSTANCES)) + f" ({INPUTS} inputs each); "
             "agreement: the share of labelled pairs with an exact order whose label matches it, with its Wilson 95% "
             "interval; worst / median: over the components. Labelled pairs: those the collection formed (a candidate "
             "pair whose Monte Carlo means differ by more than epsilon); exact ties: labelled pairs whose exact rewards "
             "are equal (no order to agree with); runs: the collections' equivalent system runs, all instances; effective "
             "pairs: ordered pairs x (2 x agreement - 1)^2, how many always-right labels carry as much signal about the "
             "order (a coin-flip label carries none).", "",
             "| K | interaction | metric | paired noise | runs | labelled pairs | exact ties | agreement [95% CI] | "
             "effective pairs | worst component | median component |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for s in summary(rows):
        lines.append(f"| {s['components']} | {s['interaction']} | {s['metric']} | {s['paired_noise']} | {s['runs']:,.0f} | "
                     f"{s['pairs']:,} | {s['exact_ties']:,} | "
                     f"{s['agreement']:.3f} [{s['low']:.3f}, {s['high']:.3f}] | "
                     f"{s['ordered'] * (2 * s['agreement'] - 1) ** 2:,.0f} | {s['worst_component']:.3f} | "
                     f"{s['median_component']:.3f} |")
    (folder / "README.md").write_text("\n".join(lines) + "\n")


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("docs/results/label-quality"))
    args = parser.parse_args(argv)
    write(measure(), args.out, f"python -m pipelines.synthetic.label_quality --out {args.out}")


if __name__ == "__main__":
    main()
