"""Does Optimas beat the baselines, and its ablations at matched cost? Three verdicts from the runs, each
with the evidence a reader needs when the answer is no: pairs collected per component, the LRFs' test
accuracy, every accepted update with the validation delta its gate saw, and what each side spent.

Only the default Optimas runs count (every method setting at the value `method=optimas` composes to),
as in Table 2's Δ, so a verdict is never the best of several variants; the verdict per baseline also
takes Optimas runs on another candidate space (`proposer=lm`), each compared only with baselines that
searched the same candidates (report/proposers.py).
"""
from __future__ import annotations

import statistics
from collections import defaultdict

from optimas_cli.report.evidence import BASELINE, cell_evidence, compare, seed_scores
from optimas_cli.report.floors import check
from optimas_cli.report.formatting import Table, number, percent
from optimas_cli.report.paper_tables import (
    BASELINES,
    _group,
    _is_default,
    method_key,
    method_label,
    test_summary,
)
from optimas_cli.report.proposers import NONE, proposer_of, without_proposer
from optimas_cli.report.runs import Run
from optimas_cli.system.budget import optimization_runs

OPTIMAS = "optimas"
# The ablations of Optimas (the paper's two, and a random reward that isolates the LRF's contribution): run at
# Optimas' cost (budget.max_runs_from=optimas), compared seed by seed.
ABLATIONS = ("global_reward", "optimas_no_adapt", "random_reward")


def _cells(runs: list[Run]) -> dict[tuple, list[Run]]:
    kept = [r for r in runs if r.kind == "run" and (r.method != OPTIMAS or _is_default(r.variant))]
    return _group(kept, lambda r: (r.pipeline, r.method, r.variant))


def _members(cells: dict[tuple, list[Run]], pipeline: str, method: str) -> list[Run]:
    """The pipeline's runs of one method, whatever their variant label."""
    return [r for (p, m, _), members in cells.items() if p == pipeline and m == method for r in members]


def gain_table(runs: list[Run], sources: str) -> Table | None:
    """Per pipeline: Optimas' paired gain over Unoptimized, and why it is what it is."""
    cells = _cells(runs)
    pipelines = sorted({p for p, m, _ in cells if m == OPTIMAS})
    if not pipelines:
        return None
    table = Table("optimas_gain", "Does Optimas beat Unoptimized? (paired, on the same test examples)",
                  ["Pipeline", "Optimas runs", "Δ vs Unoptimized [95% CI]; seeds [CI]", "Gain shown", "Pairs per component",
                   "LRF test accuracy", "Accepted updates (validation Δ [CI])"], left=2,
                  csv_headers=["pipeline", "runs", "delta", "delta_low", "delta_high", "gain_shown", "floor_block", "pairs",
                               "lrf_accuracy", "proposals", "accepted", "accepted_detail"])
    shown = 0
    for pipeline in pipelines:
        ours, base = _members(cells, pipeline, OPTIMAS), _members(cells, pipeline, BASELINE)
        table.runs += ours + base
        evidence = cell_evidence(ours, base or None)
        paired = evidence.paired
        below = check(ours).blocks
        gain = paired is not None and paired.above_zero and not below
        shown += gain
        pairs = pairs_per_component(ours)
        accuracy = [float(a) for r in ours if (a := (r.results.get("lrf") or {}).get("mean_pairwise_accuracy"))
                    is not None]
        proposals, accepted = updates(ours)
        table.rows.append([
            pipeline, str(len(ours)),
            f"n/a ({evidence.reason or 'no traces'})" if paired is None
            else f"{paired.text()} (vs {evidence.paired_against})",
            "yes" if gain else "no" + (f" ({below})" if below else ""),
            ", ".join(f"{c} {n}" for c, n in pairs.items()) or "none collected",
            percent(statistics.fmean(accuracy)) if accuracy else "n/a (no component had a test split)",
            f"{len(accepted)} of {proposals}" + (": " + "; ".join(accepted) if accepted else ""),
        ])
        table.csv_rows.append([pipeline, len(ours), *((paired.estimate, paired.low, paired.high) if paired
                                                      else (None,) * 3), gain, below or None,
                               " ".join(f"{c}={n}" for c, n in pairs.items()),
                               statistics.fmean(accuracy) if accuracy else None, proposals, len(accepted),
                               " | ".join(accepted)])
    table.summary = (f"**Optimas above Unoptimized with a paired 95% CI above 0, and above the best floor, on {shown} "
                     f"of {len(pipelines)} pipeline(s).**")
    table.footnote = (
        "Δ: each Optimas run's per-example test score minus that of the Unoptimized run of its seed, else of its own "
        "initial configuration on the same test examples (vs says which), two-level paired bootstrap (examples "
        "resampled once per draw, seeds on top); seeds: Student-t interval over the seeds' own Δ. Gain shown: both "
        "intervals lie above 0 AND Optimas beats the pipeline's best floor (table2_floors); a result below a floor "
        "gets no verdict and says which floor. Pairs per component: preference pairs collected, "
        "summed over the runs (a component whose candidates all tie under the global reward gets none, and its "
        "LRF learns nothing). LRF test accuracy: mean over runs of the components' pairwise accuracy on held-out "
        "pairs (Table 4). Accepted updates: of the proposals the local optimizers made, those the validation gate "
        f"accepted, each with its paired validation Δ per example and CI. {sources}"
    )
    return table


def pairs_per_component(members: list[Run]) -> dict[str, int]:
    """Preference pairs collected per component, summed over the runs (LRF collection and adaptation)."""
    total: dict[str, int] = defaultdict(int)
    for run in members:
        for name, info in ((run.results.get("lrf") or {}).get("components") or {}).items():
            counts = info.get("pairs") or {}
            total[name] += int(counts.get("collected", info.get("n_pairs", 0)))
    return dict(total)


def updates(members: list[Run]) -> tuple[int, list[str]]:
    """How many updates were proposed, and a line per accepted one: component, kind, validation Δ [CI]."""
    proposals, accepted = 0, []
    for run in members:
        for entry in run.results.get("history") or []:
            proposals += 1
            if not entry.get("accepted"):
                continue
            gate = entry.get("gate") or {}
            delta = (f"{gate['delta']:+.3f} [{gate['ci_low']:+.3f}, {gate['ci_high']:+.3f}]"
                     if {"delta", "ci_low", "ci_high"} <= gate.keys() else "no gate record")
            seed = (run.results.get("config") or {}).get("seed")
            accepted.append(f"{entry.get('component')} {entry.get('kind', '')}".strip()
                            + f" (seed {seed}, it. {entry.get('iteration')}) {delta}")
    return proposals, accepted


def mean_table(runs: list[Run], sources: str) -> Table | None:
    """Optimas' mean against each baseline's, averaged over the pipelines both ran, on the same candidate
    space: a baseline that searched instructions is compared with the Optimas runs whose proposer is its
    own (report/proposers.py), one that searched none with the Optimas runs of every proposer."""
    scored = [r for r in runs if r.kind == "run"]
    ours_runs = [r for r in scored if r.method == OPTIMAS and _is_default(without_proposer(r.variant))]
    ours_cells = _group(ours_runs, lambda r: (r.pipeline, proposer_of(r.results)))
    ours = {key: test_summary(members).mean for key, members in ours_cells.items()}
    baselines = [r for r in scored if r.method in BASELINES]
    theirs = {key: test_summary(members).mean for key, members in _group(
        baselines, lambda r: (r.pipeline, r.method, without_proposer(r.variant), proposer_of(r.results))).items()}
    columns = sorted({key[1:] for key in theirs}, key=lambda c: (method_key(c[0], c[1]), str(c[2])))
    proposers = sorted({q for _, q in ours}, key=str)
    if not ours or not columns:
        return None
    table = Table("optimas_vs_baselines", "Optimas against each baseline on the same candidate space, averaged over "
                  "the pipelines both ran",
                  ["Baseline", "Proposer", "Optimas proposer", "Pipelines", "Baseline mean", "Optimas mean",
                   "Optimas at least as good"], left=3, runs=ours_runs + baselines,
                  csv_headers=["method", "variant", "proposer", "optimas_proposer", "pipelines", "baseline_mean",
                               "optimas_mean", "optimas_at_least"])
    behind, unmatched = [], []
    for method, variant, proposer in columns:
        label = method_label(method, variant)
        for q in proposers if proposer is None else [proposer]:
            shared = sorted(p for p, mine in ours if mine == q and (p, method, variant, proposer) in theirs)
            if not shared:
                continue
            their_mean = statistics.fmean(theirs[(p, method, variant, proposer)] for p in shared)
            our_mean = statistics.fmean(ours[(p, q)] for p in shared)
            ok = our_mean >= their_mean - 1e-9  # means of equal scores may differ in the last bit
            below = [f"{p}: {block}" for p in shared if (block := check(ours_cells[(p, q)]).blocks)]
            ok = ok and not below
            if not ok:
                behind.append(f"{label} (vs Optimas {q or NONE})")
            table.rows.append([label, proposer or NONE, q or NONE, ", ".join(shared), number(their_mean),
                               number(our_mean), "; ".join(below) if below else "yes" if ok else "no"])
            table.csv_rows.append([method, variant, proposer, q, " ".join(shared), their_mean, our_mean, ok])
        if proposer is not None and not any(mine == proposer for _, mine in ours):
            unmatched.append((label, proposer))
            pipelines = sorted(p for p, m, v, q in theirs if (m, v, q) == (method, variant, proposer))
            their_mean = statistics.fmean(theirs[(p, method, variant, proposer)] for p in pipelines)
            table.rows.append([label, proposer, NONE, ", ".join(pipelines), number(their_mean), "n/a",
                               "not compared: no Optimas run searched these candidates"])
            table.csv_rows.append([method, variant, proposer, None, " ".join(pipelines), their_mean, None, None])
    compared = ("**Optimas' mean is at least that of every baseline it was compared with, above every floor.**"
                if not behind else f"**Optimas' mean is not shown at least that of {len(behind)} baseline(s) above "
                                   f"the floors: {', '.join(behind)}.**")
    table.summary = compared + (" Not compared, for want of an Optimas run with their proposer: "
                                + ", ".join(f"{label} ({q})" for label, q in unmatched)
                                + f" (e.g. `optimas run -m experiment=table2 proposer={unmatched[0][1]}`)."
                                if unmatched else "")
    table.footnote = ("Proposer: where a method's instruction candidates came from (lm: written by an LM; pool: the "
                      "pipeline's own instructions and edits; mixed: both; —: it searches no instructions). A baseline "
                      "that searches instructions is compared only with Optimas runs of its own proposer, one that "
                      "searches none with the Optimas runs of each proposer. No verdict where Optimas does not beat a "
                      "pipeline's best floor (table2_floors): the cell names the floor instead. Each mean: the test scores of the "
                      "pipelines listed (seeds averaged first), averaged with equal weight per pipeline, so a baseline "
                      "run on fewer pipelines is compared on those only. Metrics differ between pipelines (F1, "
                      f"accuracy); compare within a row. {sources}")
    return table



def seed_of(run: Run):
    return (run.results.get("config") or {}).get("seed")


def held_from(run: Run) -> float:
    """Executed runs an optimization had spent when it reached the configuration it was tested with: the
    runs_so_far of its last accepted update (written after that update's Stage 2), 0 when it kept the
    initial configuration. What it spent after that bought nothing the test measures."""
    accepted = [float(e.get("runs_so_far") or 0.0) for e in run.results.get("history") or [] if e.get("accepted")]
    return accepted[-1] if accepted else 0.0


def matched_table(runs: list[Run], sources: str) -> Table | None:
    """Per pipeline and ablation: Optimas against the ablation run of the same seed, paired on the same test
    examples, with what each spent. The verdict is the paper's claim: Optimas' mean at least the ablation's,
    having reached its tested configuration in no more executed runs than the ablation spent, in every seed."""
    cells = _cells(runs)
    ours = {(p, seed_of(r)): r for (p, m, _), members in cells.items() if m == OPTIMAS for r in members}
    table = Table("optimas_vs_ablations", "Optimas against its ablations at matched cost (same seeds, same test "
                  "examples)", ["Pipeline", "Ablation", "Seeds", "Optimas mean", "Ablation mean",
                                "Δ Optimas − ablation [95% CI]", "Optimas runs (tested config from)",
                                "Ablation runs (cap)", "Optimas at least as good at no more runs"], left=3,
                  csv_headers=["pipeline", "method", "variant", "seeds", "optimas_mean", "ablation_mean", "delta",
                               "delta_low", "delta_high", "optimas_runs", "optimas_held_from", "ablation_runs",
                               "ablation_cap", "optimas_at_least"])
    met = 0
    for (pipeline, method, variant) in sorted((k for k in cells if k[1] in ABLATIONS),
                                              key=lambda k: (k[0], method_key(k[1], k[2]))):
        pairs = [(ours[(pipeline, seed_of(r))], r) for r in cells[(pipeline, method, variant)]
                 if (pipeline, seed_of(r)) in ours]
        if not pairs:
            continue
        pairs.sort(key=lambda pair: str(seed_of(pair[1])))
        mine, theirs = [o for o, _ in pairs], [a for _, a in pairs]
        table.runs += mine + theirs
        our_mean, their_mean = test_summary(mine).mean, test_summary(theirs).mean
        spent = {side: [optimization_runs(r.results["ledger"]) for r in side_runs]
                 for side, side_runs in (("ours", mine), ("theirs", theirs))}
        held = [held_from(r) for r in mine]
        caps = [(r.results["ledger"].get("caps") or {}).get("max_runs") for r in theirs]
        known = None not in spent["ours"] + spent["theirs"]
        cheaper = known and all(h <= s + 1e-9 for h, s in zip(held, spent["theirs"], strict=True))
        below = check(mine).blocks
        ok = bool(cheaper and our_mean >= their_mean - 1e-9) and not below  # equal means may differ in the last bit
        met += ok
        paired = _paired(mine, theirs)
        table.rows.append([
            pipeline, method_label(method, variant), ", ".join(str(seed_of(a)) for a in theirs),
            number(our_mean), number(their_mean),
            "n/a (a run has no per-example traces)" if paired is None else paired.text(),
            "n/a" if not known else " / ".join(f"{s:.1f} ({h:.1f})" for s, h in zip(spent["ours"], held, strict=True)),
            "n/a" if not known else " / ".join(f"{s:.1f} ({'uncapped' if c is None else f'{c:g}'})"
                                               for s, c in zip(spent["theirs"], caps, strict=True)),
            below or ("yes" if ok else "no" + ("" if known else " (a run predates the executed-run count)")),
        ])
        table.csv_rows.append([pipeline, method, variant, " ".join(str(seed_of(a)) for a in theirs), our_mean,
                               their_mean, *((paired.estimate, paired.low, paired.high) if paired else (None,) * 3),
                               " ".join(map(str, spent["ours"])), " ".join(map(str, held)),
                               " ".join(map(str, spent["theirs"])), " ".join(map(str, caps)), ok])
    if not table.rows:
        return None
    table.summary = (f"**Optimas at least as good as the ablation, at no more executed runs, in {met} of "
                     f"{len(table.rows)} comparison(s).**")
    table.footnote = (
        "Each ablation run is compared with the default Optimas run of the same pipeline and seed; the seeds both "
        "ran are listed. Means: test scores averaged over those seeds. Δ: Optimas minus the ablation of the same "
        "seed on the same examples, two-level paired bootstrap (examples, then seeds); seeds: the t-interval over "
        "the seeds' own Δ. Runs: executed system runs spent "
        "optimizing (Table 3), one per seed; in brackets for Optimas the runs it had spent when it reached the "
        "configuration it was tested with (its last accepted update, Stage 2 included; 0: it kept the initial "
        "one), for the ablation its cap (budget.max_runs, e.g. from budget.max_runs_from=optimas). A matched run "
        "stops at its first safe point past the cap, or before it when its next step would not fit. At least as "
        "good at no more runs: Optimas' mean is at least the ablation's, and in every seed Optimas reached its "
        "tested configuration within what the ablation spent; never claimed where Optimas does not beat the "
        f"pipeline's best floor (the cell names the floor). {sources}"
    )
    return table


def _paired(mine: list[Run], theirs: list[Run]):
    """Optimas minus the ablation, seed by seed on the same examples (lists in seed order); None without traces."""
    ours, base = seed_scores(mine), seed_scores(theirs)
    return None if ours is None or base is None else compare(ours, base)
