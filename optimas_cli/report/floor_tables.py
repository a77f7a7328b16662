"""Floors beside the methods, on the same test examples: does each method beat chance, the training
majority and a no-LM rule? And the same per subgroup of the test set (Amazon: English vs multilingual)."""
from __future__ import annotations

import statistics

from optimas_cli.report.evidence import cell_evidence, compare, seed_scores
from optimas_cli.report.floors import PipelineFloors, check, mean_on, pipeline_floors
from optimas_cli.report.formatting import Table, number
from optimas_cli.report.paper_tables import _group, method_key, method_label
from optimas_cli.report.runs import Run
from optimas_cli.stats import mean_ci_over_runs


def _cells(runs: list[Run]) -> dict[tuple, list[Run]]:
    return _group([r for r in runs if r.kind == "run"], lambda r: (r.pipeline, r.method, r.variant))


def floors_by_pipeline(runs: list[Run]) -> dict[str, PipelineFloors]:
    scored = [r for r in runs if r.kind == "run"]
    return {p: pipeline_floors(members) for (p,), members in _group(scored, lambda r: (r.pipeline,)).items()}


def floor_table(runs: list[Run], sources: str) -> Table | None:
    cells = _cells(runs)
    if not cells:
        return None
    floors = floors_by_pipeline(runs)
    table = Table("table2_floors", "Table 2 · methods against floors (same test examples)",
                  ["Pipeline", "Method or floor", "Runs", "n", "Mean", "95% CI (examples, seeds)", "Seed-level CI",
                   "Against each floor: Δ [95% CI], beaten?"], left=2,
                  runs=[r for members in cells.values() for r in members],
                  csv_headers=["pipeline", "method", "variant", "runs", "n", "mean", "ci_low", "ci_high", "seeds_low",
                               "seeds_high", "floor", "floor_mean", "delta", "delta_low", "delta_high",
                               "delta_seeds_low", "delta_seeds_high", "beats_floor", "is_best_floor"])
    for pipeline in sorted(floors):
        found = floors[pipeline]
        best = found.best()
        for floor in found.floors:
            table.rows.append([pipeline, f"floor: {floor.name}", "—", str(len(floor.scores)) if floor.scores else "—",
                               "not defined" if not floor.scores else number(floor.mean), "—", "—", floor.how])
            table.csv_rows.append([pipeline, f"floor:{floor.name}", "", None, len(floor.scores or {}), floor.mean,
                                   *(None,) * 4, floor.name, floor.mean, *(None,) * 5, None, floor is best])
        if found.reason:
            table.rows.append([pipeline, "floors", "—", "—", "n/a", "—", "—", found.reason])
        for key in sorted((k for k in cells if k[0] == pipeline), key=lambda k: method_key(k[1], k[2])):
            members = cells[key]
            ev = cell_evidence(members, None)
            verdict = check(members, found)
            against = "; ".join(
                f"{name}: {c.text()} {'yes' if c.above_zero else 'no'}" for name, c in verdict.against.items())
            table.rows.append([
                pipeline, method_label(key[1], key[2]), str(len(members)), str(ev.examples) if ev.ci else "n/a",
                number(statistics.fmean(float(r.results["test"]["mean"]) for r in members)),
                f"[{number(ev.ci.low)}, {number(ev.ci.high)}]" if ev.ci else "n/a",
                f"[{number(ev.seeds.low)}, {number(ev.seeds.high)}]" if ev.seeds else "n/a (one seed)",
                against or (ev.reason or found.reason or "no floor defined"),
            ])
            for floor in found.defined:
                c = verdict.against.get(floor.name)
                table.csv_rows.append([
                    pipeline, key[1], key[2], len(members), ev.examples if ev.ci else None,
                    statistics.fmean(float(r.results["test"]["mean"]) for r in members),
                    *((ev.ci.low, ev.ci.high) if ev.ci else (None, None)),
                    *((ev.seeds.low, ev.seeds.high) if ev.seeds else (None, None)), floor.name, floor.mean,
                    *((c.estimate, c.low, c.high) if c else (None,) * 3),
                    *((c.seeds.low, c.seeds.high) if c and c.seeds else (None, None)),
                    None if c is None else c.above_zero, floor is best])
    table.footnote = (
        "Floors, scored on the test examples the runs scored (rebuilt from their predictions.jsonl.gz): chance "
        "(the expected score of a uniform guess), the majority answer of the training split the runs saw (the "
        "budget's), and a no-LM rule where the task allows one (optimas_pipelines/<name>/floors.py says how each is built). "
        "95% CI: two-level bootstrap, the test examples resampled once per draw and the seeds on top, so a "
        "repeated seed never narrows it. Seed-level CI: Student-t over the seeds' own means (n/a with one seed). "
        "Against each floor: the method's per-example score minus the floor's on the same examples, with both "
        "intervals (the seed-level one with 2 or more seeds); beaten: every interval lies above 0. A verdict (gain, "
        f"target met) is printed only for a result that beats the best floor. {sources}")
    return table


def group_table(runs: list[Run], sources: str) -> Table | None:
    """Per pipeline with subgroups (floors.py's `group`): each floor and method's mean on each subgroup."""
    cells = _cells(runs)
    floors = floors_by_pipeline(runs)
    grouped = {p: f for p, f in floors.items() if len(set(f.groups.values()) - {""}) > 1}
    if not grouped:
        return None
    table = Table("table2_groups", "Table 2 · per subgroup of the test set (e.g. Amazon's source file)",
                  ["Pipeline", "Group", "n", "Method or floor", "Runs", "Mean", "95% CI (examples, seeds)",
                   "Beats the group's best floor"], left=4,
                  runs=[r for (p, _, _), members in cells.items() if p in grouped for r in members],
                  csv_headers=["pipeline", "group", "n", "method", "variant", "runs", "mean", "ci_low", "ci_high",
                               "beats_best_floor"])
    for pipeline, found in sorted(grouped.items()):
        for group in sorted(set(found.groups.values())):
            keys = [k for k, g in found.groups.items() if g == group]
            best = found.best(keys)
            for floor in found.defined:
                value = mean_on(floor, keys)
                table.rows.append([pipeline, group, str(len(keys)), f"floor: {floor.name}", "—", number(value), "—",
                                   "(best floor)" if floor is best else ""])
                table.csv_rows.append([pipeline, group, len(keys), f"floor:{floor.name}", "", None, value, None, None,
                                       None])
            for key in sorted((k for k in cells if k[0] == pipeline), key=lambda k: method_key(k[1], k[2])):
                rows = seed_scores(cells[key])
                if rows is None:
                    continue
                shared = [k for k in keys if all(k in r for r in rows)]
                if not shared:
                    continue
                ci = mean_ci_over_runs([[r[k] for k in shared] for r in rows])
                versus = compare([{k: r[k] for k in shared} for r in rows], [best.scores] * len(rows)) if best else None
                beats = None if versus is None else versus.above_zero
                table.rows.append([pipeline, group, str(len(shared)), method_label(key[1], key[2]), str(len(rows)),
                                   number(ci.estimate), f"[{number(ci.low)}, {number(ci.high)}]",
                                   "—" if beats is None else ("yes" if beats else f"no ({best.name})")])
                table.csv_rows.append([pipeline, group, len(shared), key[1], key[2], len(rows), ci.estimate, ci.low,
                                       ci.high, beats])
    table.footnote = ("Each subgroup of the test examples on its own (optimas_pipelines/<name>/floors.py's group: Amazon's "
                      "source file, en or multilingual), floors recomputed on its examples, methods' means with "
                      "the two-level bootstrap CI of the floors table; beats: above the subgroup's best floor by "
                      f"both intervals. {sources}")
    return table
