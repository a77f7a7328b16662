"""The paper's Tables 2, 3 and 4 from loaded runs (numbers straight from results.json)."""
from __future__ import annotations

from collections import defaultdict

from optimas_cli.report.formatting import Summary, Table, compact, number, percent, with_count
from optimas_cli.report.runs import Run
from optimas_cli.report.variants import natural_key

METHOD_ORDER = ["unoptimized", "single_llm", "llmselector", "dspy", "textgrad", "hbc",
                "global_reward", "optimas_no_adapt", "optimas"]
METHOD_LABELS = {"unoptimized": "Unoptimized", "single_llm": "Single LLM", "llmselector": "LLMSelector",
                 "dspy": "DSPy", "textgrad": "TextGrad", "hbc": "HBC", "global_reward": "Global reward",
                 "optimas_no_adapt": "Optimas w/o adapt", "optimas": "Optimas"}
# Table 2 compares Optimas with these; the ablations (global_reward, optimas_no_adapt) are shown, not compared.
BASELINES = {"unoptimized", "single_llm", "llmselector", "dspy", "textgrad", "hbc"}


def method_key(method: str, variant: str = "") -> tuple:
    rank = METHOD_ORDER.index(method) if method in METHOD_ORDER else len(METHOD_ORDER)
    return (rank, method, natural_key(variant))


def method_label(method: str, variant: str = "") -> str:
    label = METHOD_LABELS.get(method, method)
    return f"{label} [{variant}]" if variant else label


def _group(runs: list[Run], key) -> dict[tuple, list[Run]]:
    groups: dict[tuple, list[Run]] = defaultdict(list)
    for run in runs:
        groups[key(run)].append(run)
    return groups


def test_summary(members: list[Run]) -> Summary:
    means = [float(r.results["test"]["mean"]) for r in members]
    return Summary.of(means, float(members[0].results["test"]["std"]))


def table2(runs: list[Run], sources: str) -> Table:
    scored = [r for r in runs if r.kind == "run"]
    cells = _group(scored, lambda r: (r.pipeline, r.method, r.variant))
    columns = sorted({(m, v) for _, m, v in cells}, key=lambda c: method_key(*c))
    pipelines = sorted({p for p, _, _ in cells})
    table = Table("table2", "Table 2 · test score per pipeline and method",
                  ["Pipeline", "Metric", *[method_label(m, v) for m, v in columns], "Optimas Δ"], left=2,
                  csv_headers=["pipeline", "metric", "method", "variant", "runs", "mean", "std",
                               "optimas_vs_best_baseline_pct", "best_baseline"])
    for i, pipeline in enumerate(pipelines):
        summaries = {c: test_summary(cells[(pipeline, *c)]) for c in columns if (pipeline, *c) in cells}
        metric = next(r.results["metric"] for r in scored if r.pipeline == pipeline)
        row = [pipeline, str(metric)]
        for c in columns:
            s = summaries.get(c)
            row.append("—" if s is None else with_count(f"{number(s.mean)} ± {number(s.std)}", s.count))
        gain, best_base, best_optimas = _improvement(summaries)
        row.append("—" if gain is None else f"{gain:+.1f}% vs {method_label(*best_base)}"
                   + (f" ({method_label(*best_optimas)})" if sum(m == "optimas" for m, _ in summaries) > 1 else ""))
        table.rows.append(row)
        if summaries:
            top = max(s.mean for s in summaries.values())
            table.bold |= {(i, 2 + j) for j, c in enumerate(columns) if c in summaries and summaries[c].mean == top}
        for c, s in summaries.items():
            table.csv_rows.append([pipeline, metric, c[0], c[1], s.count, s.mean, s.std,
                                   gain if c == best_optimas else None,
                                   method_label(*best_base) if c == best_optimas and best_base else None])
    table.footnote = (
        "Test-split score, higher is better. A cell is mean ± std over the test repeats (fresh LM samples) of "
        "one run; (×n) marks n runs averaged, and ± is then the std of their means. Bold: best in the row. "
        "Optimas Δ: Optimas relative to the best baseline of the row (Unoptimized, Single LLM, LLMSelector, "
        f"DSPy, TextGrad, HBC). {sources}"
    )
    return table


def _improvement(summaries: dict[tuple, Summary]):
    base = {c: s for c, s in summaries.items() if c[0] in BASELINES}
    ours = {c: s for c, s in summaries.items() if c[0] == "optimas"}
    if not base or not ours:
        return None, None, None
    best_base = max(base, key=lambda c: base[c].mean)
    best_ours = max(ours, key=lambda c: ours[c].mean)
    reference = base[best_base].mean
    if reference == 0:
        return None, None, None
    return 100 * (ours[best_ours].mean - reference) / abs(reference), best_base, best_ours


def optimization_runs(ledger: dict) -> float:
    """Equivalent system runs spent before the final validation and test evaluation."""
    phases = ledger.get("by_phase") or {}
    spent = sum(float((phases.get(p) or {}).get("runs", 0.0)) for p in ("test", "final_validation"))
    return round(float(ledger["runs"]) - spent, 4)


def table3(runs: list[Run], sources: str) -> Table:
    groups = _group(runs, lambda r: (r.pipeline, r.method, r.variant))
    table = Table("table3", "Table 3 · cost per pipeline and method",
                  ["Pipeline", "Method", "n", "Opt. runs", "All runs", "LM calls", "LM tokens"], left=2,
                  csv_headers=["pipeline", "method", "variant", "runs", "optimization_runs", "system_runs",
                               "lm_calls", "lm_tokens"])
    for pipeline, method, variant in sorted(groups, key=lambda k: (k[0], method_key(k[1], k[2]))):
        members = groups[(pipeline, method, variant)]
        ledgers = [r.results["ledger"] for r in members]
        values = [
            _mean([optimization_runs(ledger) for ledger in ledgers]),
            _mean([ledger["runs"] for ledger in ledgers]),
            _mean([ledger.get("calls", 0) for ledger in ledgers]),
            _mean([ledger.get("tokens", 0) for ledger in ledgers]),
        ]
        table.rows.append([pipeline, method_label(method, variant), str(len(members)), *[compact(v) for v in values]])
        table.csv_rows.append([pipeline, method, variant, len(members), *values])
    table.footnote = (
        "n: runs averaged. Runs are equivalent full-system runs (a run of m of K components counts m/K); "
        "Opt. runs leave out the "
        "final validation and the test evaluation; LM calls and tokens count everything the run generated, "
        f"test included (cache hits cost no tokens). With n > 1, each number is the mean over the runs. {sources}"
    )
    return table


def _mean(values: list) -> float:
    return values[0] if len(values) == 1 else sum(values) / len(values)


def table4(runs: list[Run], sources: str) -> Table:
    aligned = [r for r in runs if "lrf" in r.results]
    groups = _group(aligned, lambda r: (r.pipeline, r.lrf_variant))
    table = Table("table4", "Table 4 · alignment of the local reward functions (pairwise accuracy on test pairs)",
                  ["Pipeline", "From", "LRF", "LLM judge", "Judge parsed", "Pairs"], left=2,
                  csv_headers=["pipeline", "variant", "runs", "lrf_accuracy", "lrf_std", "judge_accuracy",
                               "judge_std", "judge_runs", "judge_parse_rate", "pairs", "measured_on",
                               "indistinguishable", "components_without_test", "methods"])
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
        ])
        if lrf is not None and (judge is None or lrf.mean > judge.mean):
            table.bold.add((i, 2))
        if judge is not None and (lrf is None or judge.mean >= lrf.mean):
            table.bold.add((i, 3))
        table.csv_rows.append([pipeline, variant, len(members), None if lrf is None else lrf.mean,
                               None if lrf is None else lrf.std,
                               None if judge is None else judge.mean, None if judge is None else judge.std,
                               0 if judge is None else judge.count, parse_rate,
                               pairs, "/".join(measured), hidden, without_test, " ".join(methods)])
    table.footnote = (
        "Share of test preference pairs (inputs used neither for training nor for early stopping) that "
        "each scorer ranks like the global reward, averaged over the pipeline's components (50% = chance). "
        "LRF: the trained local reward model; LLM judge: the LM asked which output is better, an "
        "unparsable answer counting as a tie (0.5); Judge parsed: the share of its answers that named "
        "one side. Pairs: test pairs scored, summed over components and runs (*: older runs measured on "
        "training pairs); †: components with too few pairs for a test split (their reason is in "
        "table4_components.csv), left out of the means. Bold: the better scorer. "
        f"n/a: nothing to measure, or no judge ran. {sources}"
    )
    return table


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
