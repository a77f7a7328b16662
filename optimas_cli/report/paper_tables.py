"""The paper's Tables 2, 3 and 4 from loaded runs (numbers straight from results.json)."""
from __future__ import annotations

import statistics
from collections import defaultdict
from functools import lru_cache

from optimas_cli.report.caps import ended_by_cap
from optimas_cli.report.evidence import BASELINE, CellEvidence, cell_evidence
from optimas_cli.report.floors import check, pipeline_floors
from optimas_cli.report.formatting import Summary, Table, compact, number, percent, with_count
from optimas_cli.report.proposers import proposer_label
from optimas_cli.report.runs import Run
from optimas_cli.report.variants import natural_key
from optimas_cli.system import route_of
from optimas_cli.system.budget import optimization_runs

METHOD_ORDER = ["unoptimized", "single_llm", "llmselector", "dspy", "textgrad", "gepa", "hbc", "reinforce", "sysdpo",
                "coordinate_ascent", "tpe", "random_reward", "global_reward", "optimas_no_adapt", "optimas"]
METHOD_LABELS = {"unoptimized": "Unoptimized", "single_llm": "Single LLM", "llmselector": "LLMSelector",
                 "dspy": "DSPy", "textgrad": "TextGrad", "gepa": "GEPA", "hbc": "HBC", "global_reward": "Global reward",
                 "random_reward": "Random reward", "reinforce": "REINFORCE", "sysdpo": "SysDPO",
                 "coordinate_ascent": "Coordinate ascent", "tpe": "TPE", "optimas_no_adapt": "Optimas w/o adapt", "optimas": "Optimas"}
# Table 2 compares Optimas with these; the ablations (random_reward, global_reward, optimas_no_adapt) are shown, not compared.
BASELINES = {"unoptimized", "single_llm", "llmselector", "dspy", "textgrad", "gepa", "tpe", "hbc", "reinforce", "sysdpo"}


def method_key(method: str, variant: str = "") -> tuple:
    rank = METHOD_ORDER.index(method) if method in METHOD_ORDER else len(METHOD_ORDER)
    return (rank, method, natural_key(variant))


def method_label(method: str, variant: str = "") -> str:
    label = METHOD_LABELS.get(method, method)
    return f"{label} [{short_variant(variant)}]" if variant else label


LONGEST_VALUE = 24  # characters of a setting's value a header shows (the CSVs keep the whole variant)


def short_variant(variant: str) -> str:
    """A variant label readable as a column header: each key cut to the shortest dotted suffix no other
    key of the label shares ('method.optimizer.prompt.candidates=4' -> 'candidates=4'), long values cut.
    Every run of a group shows the same keys (variants.labels), so headers stay distinct where values differ."""
    parts = [part.partition("=") for part in variant.split(", ")]
    keys = [key.split(".") for key, _, _ in parts]

    def shortest(i: int) -> str:
        for n in range(1, len(keys[i]) + 1):
            suffix = keys[i][-n:]
            if all(other[-n:] != suffix for j, other in enumerate(keys) if j != i):
                return ".".join(suffix)
        return ".".join(keys[i])

    out = []
    for i, (_, eq, value) in enumerate(parts):
        shown = value if len(value) <= LONGEST_VALUE else value[: LONGEST_VALUE - 1] + "…"
        out.append(f"{shortest(i)}{eq}{shown}")
    return ", ".join(out)


def _group(runs: list[Run], key) -> dict[tuple, list[Run]]:
    groups: dict[tuple, list[Run]] = defaultdict(list)
    for run in runs:
        groups[key(run)].append(run)
    return groups


def test_summary(members: list[Run]) -> Summary:
    means = [float(r.results["test"]["mean"]) for r in members]
    return Summary.of(means, float(members[0].results["test"]["std"]))


def selects_outputs_at_test(run: Run) -> bool:
    """The run's final configuration has a router that runs every value and keeps the output r_k scores best."""
    return any(route_of(value) == "lrf" for value in (run.results.get("best_config") or {}).values())


def table2(runs: list[Run], sources: str) -> Table:
    scored = [r for r in runs if r.kind == "run"]
    cells = _group(scored, lambda r: (r.pipeline, r.method, r.variant))
    columns = sorted({(m, v) for _, m, v in cells}, key=lambda c: method_key(*c))
    pipelines = sorted({p for p, _, _ in cells})
    table = Table("table2", "Table 2 · test score per pipeline and method",
                  ["Pipeline", "Metric", *[method_label(m, v) for m, v in columns], "Optimas Δ", "Best floor"], left=2,
                  runs=scored,
                  csv_headers=["pipeline", "metric", "method", "variant", "runs", "mean", "std",
                               "optimas_vs_best_baseline_pct", "best_baseline", "ci_low", "ci_high",
                               "delta_vs_unoptimized", "delta_low", "delta_high", "ci_note", "proposer",
                               "best_floor", "best_floor_mean", "beats_best_floor"])
    for i, pipeline in enumerate(pipelines):
        summaries = {c: test_summary(cells[(pipeline, *c)]) for c in columns if (pipeline, *c) in cells}
        evidence = pipeline_evidence(cells, pipeline, columns)
        floors = pipeline_floors([r for r in scored if r.pipeline == pipeline])
        checks = {c: check(cells[(pipeline, *c)], floors) for c in summaries}
        best = floors.best()
        metric = next(r.results["metric"] for r in scored if r.pipeline == pipeline)
        row = [pipeline, str(metric)]
        for c in columns:
            s = summaries.get(c)
            capped = s is not None and any(ended_by_cap(r) for r in cells[(pipeline, *c)])
            selects = s is not None and any(selects_outputs_at_test(r) for r in cells[(pipeline, *c)])
            row.append("—" if s is None else with_count(cell_text(s, evidence[c], cells[(pipeline, *c)])
                                                        + ("▽" if checks[c].blocks else "") + ("‡" if capped else "")
                                                        + ("§" if selects else ""), s.count))
        gain, best_base, best_optimas = _improvement(summaries)
        row.append("—" if gain is None else f"{gain:+.1f}% vs {method_label(*best_base)}"
                   + (f" ({method_label(*best_optimas)})" if sum(m == "optimas" for m, _ in summaries) > 1 else ""))
        row.append(f"{best.name} {number(best.mean)}" if best else (floors.reason or "none defined"))
        table.rows.append(row)
        if summaries:
            top = max(s.mean for s in summaries.values())
            table.bold |= {(i, 2 + j) for j, c in enumerate(columns) if c in summaries and summaries[c].mean == top}
        for c, s in summaries.items():
            ev = evidence[c]
            table.csv_rows.append([pipeline, metric, c[0], c[1], s.count, s.mean, s.std,
                                   gain if c == best_optimas else None,
                                   method_label(*best_base) if c == best_optimas and best_base else None,
                                   *((ev.ci.low, ev.ci.high) if ev.ci else (None, None)),
                                   *((ev.paired.estimate, ev.paired.low, ev.paired.high) if ev.paired else (None,) * 3),
                                   ev.reason, proposer_label(cells[(pipeline, *c)]),
                                   best.name if best else None, best.mean if best else None,
                                   None if best is None else not checks[c].blocks])
    table.footnote = (
        "Test-split score, higher is better. A cell is the mean and its 95% bootstrap CI [low, high] over the "
        "test examples (and over the runs, when (×n) runs of one pipeline x method are averaged); †: the paired "
        "difference with Unoptimized on the same examples has a 95% CI that excludes 0 (see the paired table); ▽: "
        "not above the pipeline's best floor (Best floor: chance, training majority or a no-LM rule on the same "
        "test examples; table2_floors has them all); ‡: a budget cap ended a run of the cell (stopped it, or it spent "
        "all of its cap: the caps table says how much it spent of it); §: a run of the cell routes by r_k after running "
        "every value ({\"route\": \"lrf\"}): at test each routed input ran through every value and kept the output "
        "r_k scored best, a selection among outputs that is part of its score (where outputs are sampled, as the "
        "synthetic routers' drafts, a best-of-n that the synthetic benchmark's exact regret does not credit). "
        "Runs without per-example traces show mean ± std over their test repeats (or over the runs' means) "
        "instead, and identical repeats (greedy decoding) are said to be identical. Bold: best in the row. "
        "Optimas Δ: the default Optimas run (every method setting at conf/method/optimas.yaml's value; blank when "
        "the row has no single such run) relative to the best baseline of the row "
        f"({', '.join(METHOD_LABELS[m] for m in METHOD_ORDER if m in BASELINES)}). {sources}"
    )
    return table


def pipeline_evidence(cells: dict[tuple, list[Run]], pipeline: str, columns: list[tuple]) -> dict[tuple, CellEvidence]:
    """CI and paired comparison with Unoptimized for each of the pipeline's cells."""
    baselines = [c for c in columns if c[0] == BASELINE and (pipeline, *c) in cells]
    baseline = cells[(pipeline, *baselines[0])] if len(baselines) == 1 else None
    return {c: cell_evidence(cells[(pipeline, *c)], baseline) for c in columns if (pipeline, *c) in cells}


def cell_text(s: Summary, ev: CellEvidence, members: list[Run]) -> str:
    if ev.ci is not None:
        mark = "†" if ev.paired is not None and ev.paired.excludes_zero else ""
        return f"{number(s.mean)} [{number(ev.ci.low)}, {number(ev.ci.high)}]{mark}"
    repeats = members[0].results["test"]["scores"]
    if s.count == 1 and len(repeats) > 1 and len(set(repeats)) == 1:
        return f"{number(s.mean)} ({len(repeats)} identical repeats)"
    return f"{number(s.mean)} ± {number(s.std)}"


def eval_table(runs: list[Run], sources: str) -> Table | None:
    """`optimas eval` runs, one row each: a saved configuration scored on a data file (or a test split)
    of its own, so never pooled with, or placed beside, runs scored on the pipeline's test split."""
    from optimas_cli.stats import mean_ci

    evals = sorted((r for r in runs if r.kind == "eval"), key=lambda r: (r.pipeline, str(r.folder)))
    if not evals:
        return None
    table = Table("evaluations", "Evaluations · saved configurations scored by `optimas eval`",
                  ["Pipeline", "Configuration", "Examples from", "Metric", "n", "Mean", "95% CI"], left=4, runs=evals,
                  csv_headers=["pipeline", "folder", "config_file", "eval_file", "metric", "n", "mean",
                               "ci_low", "ci_high", "repeats"])
    for run in evals:
        config = run.results.get("config") or {}
        test = run.results["test"]
        ci = mean_ci(test["per_example"]) if test.get("per_example") else None
        table.rows.append([run.pipeline, str(config.get("config_file") or "initial configuration"),
                           str(config.get("eval_file") or "test split"), str(run.results["metric"]), str(test["n"]),
                           number(test["mean"]), f"[{number(ci.low)}, {number(ci.high)}]" if ci else "n/a"])
        table.csv_rows.append([run.pipeline, str(run.folder), config.get("config_file"), config.get("eval_file"),
                               run.results["metric"], test["n"], test["mean"], *((ci.low, ci.high) if ci else (None, None)),
                               len(test["scores"])])
    table.footnote = ("One row per `optimas eval` run: the configuration it loaded, the examples it scored "
                      "(eval_file, or the pipeline's test split), the mean and its 95% bootstrap CI over those "
                      "examples. Not pooled with Table 2: the examples may differ. " + sources)
    return table


def table2_paired(runs: list[Run], sources: str) -> Table:
    """Table 2's evidence: CI per cell, effective repeats, and the paired difference with Unoptimized."""
    scored = [r for r in runs if r.kind == "run"]
    cells = _group(scored, lambda r: (r.pipeline, r.method, r.variant))
    table = Table("table2_paired", "Table 2 · confidence and paired comparison with Unoptimized",
                  ["Pipeline", "Method", "Proposer", "Runs", "Examples", "Repeats", "Mean", "95% CI",
                   "Δ vs Unoptimized", "Δ 95% CI", "Note"], left=3, runs=scored,
                  csv_headers=["pipeline", "method", "variant", "runs", "examples", "repeats", "effective_repeats",
                               "mean", "ci_low", "ci_high", "delta", "delta_low", "delta_high", "delta_excludes_zero",
                               "paired_examples", "note", "proposer"])
    for pipeline in sorted({p for p, _, _ in cells}):
        columns = sorted({(m, v) for p, m, v in cells if p == pipeline}, key=lambda c: method_key(*c))
        evidence = pipeline_evidence(cells, pipeline, columns)
        for c in columns:
            members, ev = cells[(pipeline, *c)], evidence[c]
            mean = test_summary(members).mean
            ci = ev.ci
            paired = ev.paired
            table.rows.append([
                pipeline, method_label(*c), proposer_label(members), str(len(members)),
                str(ev.examples) if ci else "n/a",
                _repeats(ev) if ci else "n/a", number(mean),
                f"[{number(ci.low)}, {number(ci.high)}]" if ci else "n/a",
                "—" if c[0] == BASELINE else (f"{paired.estimate:+.4f}" if paired else "n/a"),
                "—" if c[0] == BASELINE else (f"[{paired.low:+.4f}, {paired.high:+.4f}]"
                                              + (" †" if paired.excludes_zero else "")
                                              + (f"; seeds [{paired.seeds.low:+.4f}, {paired.seeds.high:+.4f}]"
                                                 if paired.seeds else "") if paired else "n/a"),
                ev.reason or (f"vs {ev.paired_against}" if paired and ev.paired_against != "Unoptimized" else ""),
            ])
            table.csv_rows.append([pipeline, c[0], c[1], len(members), ev.examples if ci else None,
                                   ev.repeats if ci else None, ev.effective, mean,
                                   *((ci.low, ci.high) if ci else (None, None)),
                                   *((paired.estimate, paired.low, paired.high, paired.excludes_zero) if paired
                                     else (None,) * 4), ev.paired_n or None, ev.reason, proposer_label(members)])
    table.footnote = (
        "95% CI: percentile bootstrap over the test examples (each example's score averaged over its repeats), "
        "and over the runs when several seeds are averaged. Δ: the method's per-example score minus "
        "Unoptimized's on the examples both scored, with its paired-bootstrap 95% CI; †: the CI excludes 0, "
        "a difference the test set can tell from noise; with several seeds the CI resamples the examples once per "
        "draw and the seeds on top (each seed paired with the Unoptimized run of its seed, else with its own initial "
        "configuration on the same examples: Note says 'vs initial config'), and seeds [..] is the Student-t "
        "interval over the seeds' own Δ. Repeats: test repeats summed over runs, and how many "
        "of them were distinct (greedy decoding repeats the same outputs: 1 effective repeat per run). "
        "Proposer: where the method's instruction candidates came from (lm: written by an LM; pool: the "
        "pipeline's own instructions and edits; mixed: both; —: it searches no instructions); the verdict "
        "table compares Optimas only with baselines of its proposer. "
        f"n/a: the run has no per-example traces (predictions.jsonl.gz), the reason is in Note. {sources}"
    )
    return table


def _repeats(ev: CellEvidence) -> str:
    if ev.effective == ev.repeats:
        return str(ev.repeats)
    return f"{ev.repeats} ({ev.effective} effective)"


def _improvement(summaries: dict[tuple, Summary]):
    base = {c: s for c, s in summaries.items() if c[0] in BASELINES}
    ours = {c: s for c, s in summaries.items() if c[0] == "optimas"}
    if not base or not ours:
        return None, None, None
    best_base = max(base, key=lambda c: base[c].mean)
    defaults = [c for c in ours if _is_default(c[1])]
    if len(defaults) != 1:  # no (or no single) default Optimas run: no Δ rather than the best variant's
        return None, None, None
    default = defaults[0]
    reference = base[best_base].mean
    if reference == 0:
        return None, None, None
    return 100 * (ours[default].mean - reference) / abs(reference), best_base, default


def _is_default(variant: str) -> bool:
    """Whether an Optimas variant label ('method.gate=strict, budget=small', '' for a lone run) names the
    default run: every method.* setting it shows has the value `method=optimas` composes to (the paper's
    method), so Table 2's Δ never reports the best of several variants."""
    if not variant:
        return True
    from omegaconf import OmegaConf

    defaults = _optimas_defaults()
    for part in variant.split(", "):
        key, _, value = part.partition("=")
        if key.startswith("method.") and str(OmegaConf.select(defaults, key[len("method."):])) != value:
            return False
    return True


@lru_cache(maxsize=1)
def _optimas_defaults():
    """The method node of `optimas run method=optimas`, composed as the runner does (its defaults list
    pulls in conf/optimizer/default.yaml)."""
    from hydra import compose, initialize_config_dir

    from optimas_cli.conf import CONF_DIR

    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return compose("config", overrides=["method=optimas"]).method


def table3(runs: list[Run], sources: str) -> Table:
    groups = _group(runs, lambda r: (r.pipeline, r.method, r.variant))
    table = Table("table3", "Table 3 · cost per pipeline and method",
                  ["Pipeline", "Method", "n", "Score", "Paper runs", "Executed runs", "Run cap", "LM calls",
                   "LM tokens", "Dollars", "Compute s"], left=2, runs=runs,
                  csv_headers=["pipeline", "method", "variant", "runs", "paper_runs", "executed_runs", "system_runs",
                               "lm_calls", "lm_tokens", "usd", "unpriced_calls", "compute_seconds", "test_mean",
                               "max_runs", "lm_cache_hits"])
    for pipeline, method, variant in sorted(groups, key=lambda k: (k[0], method_key(k[1], k[2]))):
        members = groups[(pipeline, method, variant)]
        ledgers = [r.results["ledger"] for r in members]
        paper, executed, system, calls, tokens = (
            _mean([optimization_runs(ledger, "paper_runs") for ledger in ledgers]),
            _mean([optimization_runs(ledger) for ledger in ledgers]),
            _mean([ledger["runs"] for ledger in ledgers]),
            _mean([ledger.get("calls", 0) for ledger in ledgers]),
            _mean([ledger.get("tokens", 0) for ledger in ledgers]),
        )
        hits = [((ledger.get("lm") or {}).get("total") or {}).get("cache_hits") for ledger in ledgers]
        cached = None if None in hits else _mean(hits)  # older results.json did not count them
        usd = _mean([ledger.get("usd", ledger.get("cost", 0.0)) for ledger in ledgers])
        unpriced = _mean([ledger.get("unpriced_calls", 0) for ledger in ledgers])
        computed = [ledger["compute_seconds"] for ledger in ledgers if "compute_seconds" in ledger]
        compute = _mean(computed) if len(computed) == len(ledgers) else None  # older results.json lack it
        score = test_summary(members).mean if all("test" in r.results for r in members) else None
        caps = [(ledger.get("caps") or {}).get("max_runs") for ledger in ledgers]
        cap = None if None in caps else _mean(caps)
        table.rows.append([pipeline, method_label(method, variant), str(len(members)),
                           "n/a" if score is None else number(score),
                           *["—" if v is None else compact(v) for v in (paper, executed)],
                           "—" if cap is None else compact(cap),
                           "—" if calls is None else compact(calls) + (
                               "" if not cached else f" ({compact(cached)} from the LM cache)"),
                           "—" if tokens is None else compact(tokens),
                           dollars(usd, unpriced), "n/a" if compute is None else f"{compute:,.1f}"])
        table.csv_rows.append([pipeline, method, variant, len(members), paper, executed, system, calls, tokens,
                               round(usd, 6), unpriced, "" if compute is None else compute, score, cap, cached])
    table.footnote = (
        "n: runs averaged. Both run counts are equivalent full-system runs spent optimizing (the final "
        "validation and the test evaluation left out). Paper runs: the paper's accounting (Appendix G.4), one "
        "run per candidate: every candidate a collection drew (Stage 1 and every adaptation) and the downstream "
        "run that scored it count once at m/K for m of K components, paired or not, Monte Carlo repeats not "
        "counted; the system's own runs at m/K (validation re-runs only the changed component and what follows "
        "it), a validation pass counted only when its proposal was accepted; local scoring not counted. "
        "Executed runs: every component execution / K, search samples, local scoring, RL generations, Monte "
        "Carlo repeats, rejected proposals' validation and every value a per-input router tried included. — : a run recorded "
        "before the paper count existed. LM calls and tokens count everything the run generated, test "
        "included; (n from the LM cache): how many of those calls were answered by the LM cache, not generated "
        "(they cost no tokens and no time, so a run after a cached one looks cheaper than it was). Dollars: API calls priced by litellm's cost map or lm.price, "
        "plus compute when compute.price_per_hour was set; calls to a model without a price are shown as "
        "unpriced, not as $0. Compute s: seconds of local generation and LRF/GRPO training (n/a: recorded "
        "before it was measured). Score: the mean test score (Table 2), beside what it cost. Run cap: "
        "budget.max_runs, on executed runs; in a matched-cost sweep (experiment=table3_matched) it is what "
        "Optimas spent, and each method stops at its first safe point past it (— : uncapped). "
        f"With n > 1, each number is the mean over the runs. {sources}"
    )
    return table


def dollars(usd: float, unpriced: float) -> str:
    text = f"${usd:,.4f}"
    return f"{text} + {compact(unpriced)} unpriced calls" if unpriced else text


def _mean(values: list) -> float | None:
    if any(v is None for v in values):
        return None
    return values[0] if len(values) == 1 else sum(values) / len(values)


def table4(runs: list[Run], sources: str) -> Table:
    aligned = [r for r in runs if "lrf" in r.results]
    groups = _group(aligned, lambda r: (r.pipeline, r.lrf_variant))
    table = Table("table4", "Table 4 · alignment of the local reward functions (pairwise accuracy on test pairs)",
                  ["Pipeline", "From", "LRF", "LLM judge", "Judge parsed", "Pairs", "Distinguishable only: LRF / judge"],
                  left=2, runs=aligned,
                  csv_headers=["pipeline", "variant", "runs", "lrf_accuracy", "lrf_std", "judge_accuracy",
                               "judge_std", "judge_runs", "judge_parse_rate", "pairs", "measured_on",
                               "indistinguishable", "components_without_test", "methods",
                               "lrf_accuracy_distinguishable", "judge_accuracy_distinguishable"])
    for i, (pipeline, variant) in enumerate(sorted(groups, key=lambda k: (k[0], natural_key(k[1])))):
        members = groups[(pipeline, variant)]
        # A run whose components all lacked a test split has no accuracy: n/a, never a training accuracy.
        measured_runs = [float(a) for r in members if (a := r.results["lrf"]["mean_pairwise_accuracy"]) is not None]
        lrf = Summary.of(measured_runs) if measured_runs else None
        # A run without a judge (disabled, or no LM) leaves it out; the count shows how many had one.
        judged = [float(j) for r in members if (j := r.results["lrf"].get("mean_judge_accuracy")) is not None]
        judge = Summary.of(judged) if judged else None
        parsed = [float(p) for r in members if (p := r.results["lrf"].get("judge_parse_rate")) is not None]
        parse_rate = sum(parsed) / len(parsed) if parsed else None
        # Older runs left the indistinguishable test pairs out of the headline: it is their distinguishable figure.
        lrf_seen, judge_seen = (_distinguishable_mean(members, scorer) for scorer in ("pairwise", "judge"))
        rows = [c for r in members for c in r.results["lrf"]["components"].values()]
        pairs = sum(int(c["n_pairs"]) for c in rows)
        hidden = sum(int((c.get("pairs") or {}).get("indistinguishable", 0)) for c in rows)
        without_test = sum(1 for c in rows if c.get("pairwise_accuracy") is None)
        measured = sorted({str(r.results["lrf"].get("measured_on", "heldout")) for r in members})
        methods = sorted({r.method for r in members})
        label = f"{pipeline} [{variant}]" if variant else pipeline
        where = "/".join({"test": "test", "heldout": "held-out"}.get(m, f"{m} pairs*") for m in measured)
        table.rows.append([
            label,
            ", ".join(methods),
            "n/a" if lrf is None else percent(lrf.mean) + _spread(lrf),
            "n/a" if judge is None else percent(judge.mean) + _spread(judge),
            "n/a" if parse_rate is None else percent(parse_rate),
            f"{pairs:,} {where}" + (f" · {without_test} n/a†" if without_test else ""),
            " / ".join("n/a" if v is None else percent(v) for v in (lrf_seen, judge_seen)),
        ])
        if lrf is not None and (judge is None or lrf.mean > judge.mean):
            table.bold.add((i, 2))
        if judge is not None and (lrf is None or judge.mean >= lrf.mean):
            table.bold.add((i, 3))
        table.csv_rows.append([pipeline, variant, len(members), None if lrf is None else lrf.mean,
                               None if lrf is None else lrf.std,
                               None if judge is None else judge.mean, None if judge is None else judge.std,
                               0 if judge is None else judge.count, parse_rate,
                               pairs, "/".join(measured), hidden, without_test, " ".join(methods),
                               lrf_seen, judge_seen])
    table.footnote = (
        "Share of test preference pairs (inputs used neither for training nor for early stopping) that "
        "each scorer ranks like the global reward, averaged over the pipeline's components (50% = chance). "
        "LRF: the trained local reward model; LLM judge: the LM asked which output is better, an "
        "unparsable answer counting as a tie (0.5); Judge parsed: the share of its answers that named "
        "one side. A test pair whose two sides render to one text for the reward model "
        "(indistinguishable) is a tie for the LRF (0.5) and stays in both scorers' denominators; "
        "Distinguishable only: both accuracies without those pairs (runs recorded before the ties "
        "were counted report only this figure, also in the LRF and judge columns). "
        "Pairs: test pairs scored, summed over components and runs (*: older runs measured on "
        "training pairs); †: components with too few pairs for a test split (their reason is in "
        "table4_components.csv), left out of the means. Bold: the better scorer. "
        f"n/a: nothing to measure, or no judge ran. {sources}"
    )
    return table


def _distinguishable_mean(members: list[Run], scorer: str) -> float | None:
    """Mean over runs of a scorer's accuracy on the distinguishable test pairs; older runs left the
    indistinguishable pairs out of the headline, so their headline is that figure."""
    found = []
    for r in members:
        lrf = r.results["lrf"]
        value = lrf.get(f"mean_{scorer}_accuracy_distinguishable", lrf.get(f"mean_{scorer}_accuracy"))
        if value is not None:
            found.append(float(value))
    return statistics.fmean(found) if found else None


def _spread(s: Summary) -> str:
    """Several runs: the std of their accuracies, in points, and how many."""
    return "" if s.count == 1 else f" ± {100 * s.std:.2f} (×{s.count})"


def component_rows(runs: list[Run]) -> tuple[list[str], list[list]]:
    """Table 4 per component and run, for the CSV: accuracies on test pairs, the judge's parse rate,
    where the pairs went (trained / indistinguishable / tied) and why a component has no test split."""
    headers = ["pipeline", "variant", "folder", "component", "pairwise_accuracy", "judge_accuracy",
               "judge_parse_rate", "n_pairs", "trained", "indistinguishable", "tied", "no_test"]
    rows = []
    for r in runs:
        for name, c in (r.results["lrf"]["components"].items() if "lrf" in r.results else ()):
            counts = c.get("pairs") or {}
            rows.append([r.pipeline, r.lrf_variant, str(r.folder), name, c["pairwise_accuracy"], c["judge_accuracy"],
                         c.get("judge_parse_rate"), c["n_pairs"], counts.get("trained"), counts.get("indistinguishable"),
                         counts.get("tied"), c.get("no_test", "")])
    return headers, rows
