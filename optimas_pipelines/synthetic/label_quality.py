"""How often a Stage 1 preference label agrees with the exact order of its two candidates.

A label says candidate a beat candidate b because a's downstream Monte Carlo mean was higher. The truth
is the order of E[reward | k received x, k wrote y], every other component under the collection's
configuration: exact on the simulator, with k's parents' values and solid shares read from x and k's own
value and solid share read from y (its realized marks count: the mean metric scores them, and children
read them). Components that neither feed k nor read from it add the same to both candidates (the
expected reward is additive in them), so their realized outputs do not change the order. Pairs whose
exact rewards are equal have no order and are left out (counted as `exact_ties`).

    python -m optimas_pipelines.synthetic.label_quality --out docs/results/label-quality

collects Stage 1 on every setting of the committed grid (GRID) with the run's own collection settings
(conf/lrf/minilm.yaml `collect`, 1x the runs) and writes `label_quality.csv` (a row per setting, instance
and component) and `README.md` (the table, generated). `--part lrf` adds the learned reward's side on
LRF_GRID: an LRF trained as the phase map trains it (MiniLM heads, on the Stage 1 pairs of budget=synthetic's
10 training inputs) orders the labelled pairs of one fresh shared-noise collection on 100 validation inputs (the
same pairs whatever noise the LRF was trained under), and its order
is scored against the exact one (`lrf_quality.csv`), never against the noisy labels it was trained on.
Nothing is tuned here: the grids, the simulator and the settings are fixed before the rows are computed.
"""
from __future__ import annotations

import argparse
import csv
import itertools
import json
import statistics
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from optimas_cli.lrf.collect import COLLECTION_PHASE, EXACT_TIE, collect_all
from optimas_cli.lrf.pairs import PreferencePair
from optimas_cli.system import RunContext, RunLedger, SystemConfig
from optimas_pipelines.synthetic.exact import exact_given_output
from optimas_pipelines.synthetic.spec import Instance
from optimas_pipelines.synthetic.system import build

# The committed grid (fixed before its rows were computed): K x interaction x metric x noise, on the phase
# map's other settings (chain, mix, 4 options, 3 input types, noise 0.5, coupling 0.5, 8 marks).
GRID = {"components": (10, 30), "interaction": ("none", "on"), "metric": ("mean", "sink"),
        "paired_noise": ("independent", "shared")}
INSTANCES = (0, 1, 2)
# The learned reward's side: the headline of the phase map's next run (K 10, interaction on), both metrics.
LRF_GRID = {"components": (10,), "interaction": ("on",), "metric": ("mean", "sink"),
            "paired_noise": ("independent", "shared")}
LRF_OVERRIDES = ["pipeline=synthetic", "budget=synthetic", "lrf.train_backbone=heads", "lrf.max_length=96"]
STAGE1_INPUTS, EVAL_INPUTS = 10, 100  # budget=synthetic's training split; the fresh pairs the LRF orders
INPUTS = 200  # Stage 1 inputs per setting: ~600 candidate pairs per component, enough for a per-component interval
# conf/lrf/minilm.yaml `collect` (what a run collects with), and budget=synthetic's run temperature 0
COLLECT = {"num_candidates": 3, "mc_repeats": 2, "epsilon": 0.01, "temperature": 0.9, "diverse": True,
           "choices": "sample", "downstream_temperature": None}


def label_agreement(instance: Instance, config: Mapping, pairs: Sequence[PreferencePair]) -> dict:
    """Per component: pairs, exact ties, and the share of the others whose label the exact order confirms."""
    out: dict[str, dict] = {}
    for pair in pairs:
        row = out.setdefault(pair.component, {"pairs": 0, "exact_ties": 0, "agree": 0})
        row["pairs"] += 1
        chosen = exact_given_output(instance, config, pair.component, pair.context, pair.chosen)
        rejected = exact_given_output(instance, config, pair.component, pair.context, pair.rejected)
        if abs(chosen - rejected) < EXACT_TIE:
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


def lrf_agreement(settings: Mapping, instance: int, lrf_cfg: Mapping) -> dict:
    """Per component: how often an LRF trained on one Stage 1 collection orders a fresh collection's pairs
    as the exact reward does (a tie in r_k counts half)."""
    from optimas_cli.lrf.collect import collection_sample_index
    from optimas_cli.lrf.model import LocalRewardModel
    from optimas_cli.lrf.stage import train_config
    from optimas_cli.lrf.text import component_infos
    from optimas_cli.lrf.train import train_stage1

    pipeline = build(components=settings["components"], interaction=settings["interaction"],
                     metric=settings["metric"], instance=instance, train_size=STAGE1_INPUTS, val_size=EVAL_INPUTS)
    system, inst = pipeline.system, pipeline.instance
    config = SystemConfig(system.default_config())
    ctx = RunContext(ledger=RunLedger(len(system)), seed=instance, phase=COLLECTION_PHASE,
                     paired_noise=settings["paired_noise"] == "shared")
    trained = [p for ps in collect_all(system, config, pipeline.splits.train, ctx, pipeline.metric, **COLLECT).values()
               for p in ps]
    model = LocalRewardModel.from_config(lrf_cfg, component_infos(system))
    train_stage1(model, trained, train_config(lrf_cfg, len(trained)))
    # The pairs to order come from one shared-noise collection whatever the row's noise, so the LRFs trained
    # under either are scored on the same pairs (a collection's own noise decides which pairs form at all)
    fresh = collect_all(system, config, pipeline.splits.val,
                        ctx.replace(sample_index=collection_sample_index(1), paired_noise=True), pipeline.metric, **COLLECT)
    out = {}
    for component, pairs in fresh.items():
        row = out.setdefault(component, {"trained_pairs": sum(p.component == component for p in trained),
                                         "pairs": 0, "exact_ties": 0, "agree": 0.0})
        if not pairs:
            continue
        chosen = model.score(component, [p.context for p in pairs], [p.chosen for p in pairs])
        rejected = model.score(component, [p.context for p in pairs], [p.rejected for p in pairs])
        for pair, r_c, r_r in zip(pairs, chosen, rejected, strict=True):
            row["pairs"] += 1
            gap = (exact_given_output(inst, config, component, pair.context, pair.chosen)
                   - exact_given_output(inst, config, component, pair.context, pair.rejected))
            if abs(gap) < EXACT_TIE:
                row["exact_ties"] += 1
            else:
                row["agree"] += 0.5 if r_c == r_r else float((r_c > r_r) == (gap > 0))
    for row in out.values():
        ordered = row["pairs"] - row["exact_ties"]
        row["agreement"] = row["agree"] / ordered if ordered else None
    return out


def wilson(agree: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """The Wilson 95% interval of a share agree / n."""
    if n == 0:
        return (float("nan"), float("nan"))
    p = agree / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * np.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return (float(centre - half), float(centre + half))


def settings_grid(grid: Mapping = GRID) -> list[dict]:
    keys = list(grid)
    return [dict(zip(keys, values, strict=True)) for values in itertools.product(*grid.values())]


def measure(instances: Sequence[int] = INSTANCES, inputs: int = INPUTS) -> list[dict]:
    rows = []
    for settings in settings_grid():
        for instance in instances:
            agreement, ledger = collect_labels(settings, instance, inputs)
            runs = round(ledger.equivalent_runs(COLLECTION_PHASE), 1)
            for component, row in agreement.items():
                rows.append({**settings, "instance": instance, "component": component, "runs": runs, **row})
    return rows


def measure_lrf(instances: Sequence[int] = INSTANCES) -> list[dict]:
    from hydra import compose, initialize_config_dir

    from optimas_cli.conf import CONF_DIR

    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        lrf_cfg = compose("config", overrides=LRF_OVERRIDES).lrf
    rows = []
    for settings in settings_grid(LRF_GRID):
        for instance in instances:
            for component, row in lrf_agreement(settings, instance, lrf_cfg).items():
                rows.append({**settings, "instance": instance, "component": component, **row})
    return rows


def summary(rows: Sequence[dict], grid: Mapping = GRID) -> list[dict]:
    """Per setting: pooled agreement over every ordered pair (Wilson interval), the spread over components."""
    out = []
    for settings in settings_grid(grid):
        mine = [r for r in rows if all(r[k] == v for k, v in settings.items())]
        agree = sum(r["agree"] for r in mine)
        if mine and "trained_pairs" in mine[0]:  # the LRF's rows: how many pairs it learned from
            settings = {**settings, "trained_pairs": sum(r["trained_pairs"] for r in mine)}
        ordered = sum(r["pairs"] - r["exact_ties"] for r in mine)
        per_component = [r["agreement"] for r in mine if r["agreement"] is not None]
        low, high = wilson(agree, ordered)
        out.append({**settings, "pairs": sum(r["pairs"] for r in mine), "exact_ties": sum(r["exact_ties"] for r in mine),
                    "ordered": ordered, "runs": sum({r["instance"]: r.get("runs", 0) for r in mine}.values()),
                    "agreement": agree / ordered if ordered else float("nan"), "low": low, "high": high,
                    "worst_component": min(per_component, default=float("nan")),
                    "median_component": statistics.median(per_component) if per_component else float("nan")})
    return out


LABELS_CSV, LRF_CSV, LM_JSON = "label_quality.csv", "lrf_quality.csv", "embedded-lm.json"


def write_csv(rows: Sequence[dict], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


def read_csv(path: Path) -> list[dict]:
    """A CSV's rows with their numbers as numbers (the README is rendered from the committed files)."""
    def value(text: str):
        for kind in (int, float):
            try:
                return kind(text)
            except ValueError:
                pass
        return None if text == "" else text

    with open(path, newline="") as f:
        return [{k: value(v) for k, v in row.items()} for row in csv.DictReader(f)]


def render(folder: Path, command: str) -> str:
    lines = ["# Label quality: Stage 1 labels and the learned reward against the exact order", "",
             "Generated by `" + command + "` from the CSVs beside it (optimas_pipelines/synthetic/label_quality.py says what is "
             "measured).", "",
             "## Labels", "",
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
    for s in summary(read_csv(folder / LABELS_CSV)):
        lines.append(f"| {s['components']} | {s['interaction']} | {s['metric']} | {s['paired_noise']} | {s['runs']:,.0f} | "
                     f"{s['pairs']:,} | {s['exact_ties']:,} | {s['agreement']:.3f} [{s['low']:.3f}, {s['high']:.3f}] | "
                     f"{s['ordered'] * (2 * s['agreement'] - 1) ** 2:,.0f} | {s['worst_component']:.3f} | "
                     f"{s['median_component']:.3f} |")
    if (folder / LRF_CSV).exists():
        lines += ["", "## The learned reward", "",
                  f"An LRF trained as the phase map trains it (`{' '.join(LRF_OVERRIDES)}`: MiniLM heads on the Stage 1 "
                  f"pairs of {STAGE1_INPUTS} training inputs, paired noise as in the row) orders the labelled pairs of a fresh "
                  f"collection on {EVAL_INPUTS} validation inputs (one collection, with shared noise, for both rows of a metric: "
                  "the same pairs); agreement: the share whose r_k order matches the exact "
                  "order (an r_k tie counts half), pooled over instances " + ", ".join(map(str, INSTANCES)) + ".", "",
                  "| K | interaction | metric | paired noise | trained pairs | pairs ordered | agreement [95% CI] | "
                  "worst component | median component |", "|---|---|---|---|---|---|---|---|---|"]
        for s in summary(read_csv(folder / LRF_CSV), LRF_GRID):
            lines.append(f"| {s['components']} | {s['interaction']} | {s['metric']} | {s['paired_noise']} | "
                         f"{s['trained_pairs']:,} | {s['ordered']:,} | {s['agreement']:.3f} [{s['low']:.3f}, {s['high']:.3f}] | "
                         f"{s['worst_component']:.3f} | {s['median_component']:.3f} |")
    if (folder / LM_JSON).exists():
        lines += embedded_lm_lines(json.loads((folder / LM_JSON).read_text()))
    return "\n".join(lines) + "\n"


def embedded_lm_lines(lm: Mapping) -> list[str]:
    """The same comparison on a real pipeline with the embedded LM (scripts/paired_noise_lm.py wrote `lm`)."""
    s = lm["settings"]
    lines = ["", "## The embedded LM on a real pipeline", "",
             f"`{lm['command']}` ({lm['seconds'] / 60:.0f} min on 2 shared CPU cores): {s['pipeline']} with {s['lm']}, "
             f"the {s['component']}'s Stage 1 candidates on {s['inputs']} training questions ({s['candidates']} samples at "
             f"{s['candidate_temperature']}), the solver downstream sampled at {s['downstream_temperature']}; labels from "
             f"{s['label_repeats']} repeats (1x the runs), checked against the order of {s['reference_repeats']} "
             "independent repeats of their own (pairs it ties left out). Identical: the share of (candidate pair, repeat) "
             "whose two downstream answers, or rewards, are the same.", "",
             "| paired noise | identical answers | identical rewards | labelled pairs | agreement with the reference [95% CI] |",
             "|---|---|---|---|---|"]
    for noise in ("independent", "shared"):
        r = lm[noise]
        low, high = r["agreement_95ci"]
        lines.append(f"| {noise} | {r['identical_solver_answer']:.3f} | {r['identical_reward']:.3f} | {r['labelled_pairs']} | "
                     f"{r['agreement_with_reference']:.3f} [{low:.3f}, {high:.3f}] ({r['pairs_the_reference_orders']} pairs) |")
    return lines


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("docs/results/label-quality"))
    parser.add_argument("--part", choices=("labels", "lrf", "readme"), default="labels",
                        help="what to measure (the README is rendered after either, from the CSVs)")
    args = parser.parse_args(argv)
    if args.part == "labels":
        write_csv(measure(), args.out / LABELS_CSV)
    elif args.part == "lrf":
        write_csv(measure_lrf(), args.out / LRF_CSV)
    command = f"python -m optimas_pipelines.synthetic.label_quality --out {args.out} --part labels|lrf"
    (args.out / "README.md").write_text(render(args.out, command))


if __name__ == "__main__":
    main()
