"""A synthetic run's exact regret and its anytime curve, and reading that curve at a number of executed runs.

Regret = the optimum's expected test score minus the reached configuration's, both exact
(optimas_pipelines/synthetic/exact.py); a router on an LRF route is scored by its picks in the run's own test
traces. The anytime curve is (executed runs, regret) after each history entry. A run measured once keeps its
measurement beside its results as regret.json, so a folder pruned to its results still reports (a run read from
an archive, report/run_archive.py, is measured again each time instead: nothing is written into the archive).
"""
from __future__ import annotations

import gzip
import json
import statistics
from collections.abc import Mapping, Sequence
from pathlib import Path

from optimas_cli.errors import UserError
from optimas_cli.report.run_archive import located
from optimas_cli.system import routes_by_lrf

MEASURED = "regret.json"
TRACES = "predictions.jsonl.gz"


def measured(folder: Path, results: Mapping) -> dict:
    """The run's regret.json, measured from its test traces (and kept, in a folder on disk) when it has none."""
    where = located(folder)
    kept = where / MEASURED
    if kept.exists():
        return json.loads(kept.read_text())
    if not (where / TRACES).exists():
        raise UserError(f"{folder} has neither {MEASURED} nor the test traces ({TRACES}) to measure its regret",
                        "report the run folder as the run wrote it")
    got = measure(where, results)
    if where != folder:  # the archive's unpacked copy: a file kept there would go with it
        return got
    try:
        kept.write_text(json.dumps(got) + "\n")
    except OSError:  # a read-only copy of the runs: measured again next time, nothing lost
        pass
    return got


def measure(folder: Path, results: Mapping) -> dict:
    """The run's exact regret (reached from its test traces) and its anytime curve."""
    from optimas_pipelines.synthetic import exact
    from optimas_pipelines.synthetic.system import build

    pipe = build(**results["pipeline_info"]["settings"], test_size=results["splits"]["test"])
    inst, rows = pipe.instance, {r["id"]: r for r in pipe.splits.test}
    ids, steps = test_steps(folder)
    examples = [rows[i] for i in ids]
    picks = [{s.name: exact.named_value(st[s.name]["outputs"][s.field]) for s in inst.components} for st in steps]
    optimum = exact.optimum_score(inst, examples)
    reached = exact.expected_of_run(inst, examples, steps)
    default = pipe.system.default_config()
    initial = exact.expected_score(inst, default, examples)
    points = curve(inst, default, results.get("history") or [], examples, picks, optimum)
    return {"regret": optimum - reached, "reached": reached, "optimum": optimum, "initial": initial,
            "curve": [[x, round(y, 6)] for x, y in points]}


def test_steps(folder: Path) -> tuple[list[str], list[dict]]:
    """(example ids, each example's component steps) of the run's first test repeat."""
    ids, steps = [], []
    with gzip.open(folder / TRACES, "rt") as handle:
        for line in handle:
            record = json.loads(line)
            if record.get("split") == "test" and record.get("repeat", 0) == 0:
                ids.append(record["key"])
                steps.append(record["components"])
    return ids, steps


def apply(config: dict, entry: Mapping) -> None:
    """An accepted history entry's change: one component's value, or (tpe) {component: value} for several."""
    if isinstance(entry["component"], list):
        config.update(entry["proposal"])
    else:
        config[entry["component"]] = entry["proposal"]


def changes(entry: Mapping) -> bool:
    """Whether a history entry changed the configuration: accepted, with a proposal."""
    return bool(entry["accepted"]) and entry.get("proposal") is not None


def moved_by(history: Sequence[Mapping], runs: float) -> bool:
    """Whether the run left its initial configuration by `runs` executed runs (an accepted change by then)."""
    return any(changes(e) and float(e["runs_so_far"]) <= runs for e in history)


def curve(instance, default: Mapping, history: Sequence[Mapping], examples: Sequence[dict],
          picks: Sequence[Mapping[str, str]], optimum: float) -> list[tuple[float, float]]:
    """(executed runs, regret) after each history entry, the configuration rebuilt from the accepted ones.
    Exact for every component but a router on an LRF route, whose picks are the final run's (its reward model
    at the end, after every Stage 2: an approximation for the earlier points of the Optimas family)."""
    from optimas_pipelines.synthetic import exact

    types = [exact.type_index(instance, ex) for ex in examples]

    def regret(config: Mapping) -> float:
        lrf = [s.name for s in instance.components if routes_by_lrf(config[s.name])]
        by_key: dict[tuple, float] = {}
        scores = []
        for t, chosen in zip(types, picks, strict=True):
            fixed = {n: chosen[n] for n in lrf}
            key = (t, *fixed.values())
            if key not in by_key:
                by_key[key] = exact.expected_reward(instance, exact.names_for(instance, config, t, fixed), t)
            scores.append(by_key[key])
        return optimum - statistics.fmean(scores)

    config, points = dict(default), []
    current = regret(config)
    for entry in history:
        if changes(entry):
            apply(config, entry)
            current = regret(config)
        points.append((float(entry["runs_so_far"]), current))
    return points


def regret_at(points: Sequence[Sequence[float]], runs: float, initial: float) -> float:
    """The regret of the last configuration reached by `runs` executed runs (`initial`, the unoptimized
    system's regret, before any): the anytime curve read at a point, e.g. a share of the cap."""
    got = [r for x, r in points if x <= runs]
    return got[-1] if got else initial
