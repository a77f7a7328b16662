"""Alignment metrics (paper Table 4): pairwise ranking accuracy on test pairs, per component and mean.

A pair counts as correct only when the chosen output scores strictly higher; a tie is a miss
(a reward that cannot tell two outputs apart does not rank them). A scorer may also give half
credit (the LLM judge's unparsable answer: a tie, what a coin flip would score). The mean is the
macro average over components, so a component with many pairs does not drown out one with few.

The headline accuracy is on every held-out pair. A pair whose two sides render to one text for
the reward model (indistinguishable) is a tie for it: half credit, never left out of the
denominator (that would inflate the figure). The figure on the distinguishable pairs alone is
reported beside it (`distinguishable`).
"""
from __future__ import annotations

import statistics
from collections.abc import Collection, Mapping, Sequence

from optimas_cli.lrf.pairs import PreferencePair, by_component


def summarize_correct(components: Sequence[str], correct: Sequence[float]) -> dict:
    """{"per_component": {name: {"accuracy", "n"}}, "mean": macro mean or None, "n": total}; each
    entry of `correct` is the credit of one pair (True/False, or 0.5 for a tie)."""
    per: dict[str, list[float]] = {}
    for c, ok in zip(components, correct, strict=True):
        per.setdefault(c, []).append(float(ok))
    per_component = {c: {"accuracy": sum(v) / len(v), "n": len(v)} for c, v in per.items()}
    accs = [v["accuracy"] for v in per_component.values()]
    return {"per_component": per_component, "mean": statistics.fmean(accs) if accs else None, "n": len(correct)}


def pairwise_accuracy(model, pairs: Sequence[PreferencePair], indistinguishable: Collection[PreferencePair] = ()) -> dict:
    """How often `model.score` ranks the chosen output above the rejected one; the pairs in
    `indistinguishable` are ties (0.5) without asking the model. Beside the summary, `distinguishable`
    is the same on the other pairs only."""
    ties = {id(p) for p in indistinguishable}
    components, correct, seen = [], [], []
    for name, group in by_component(pairs).items():
        scored = [p for p in group if id(p) not in ties]
        contexts = [p.context for p in scored]
        chosen = iter(model.score(name, contexts, [p.chosen for p in scored]) if scored else [])
        rejected = iter(model.score(name, contexts, [p.rejected for p in scored]) if scored else [])
        for p in group:
            distinct = id(p) not in ties
            components.append(name)
            seen.append(distinct)
            correct.append(float(next(chosen) > next(rejected)) if distinct else 0.5)
    return with_distinguishable(components, correct, seen)


def with_distinguishable(components: Sequence[str], correct: Sequence[float], seen: Sequence[bool]) -> dict:
    """summarize_correct of all pairs, with `distinguishable`: the summary of the pairs marked `seen`."""
    summary = summarize_correct(components, correct)
    keep = [i for i, ok in enumerate(seen) if ok]
    summary["distinguishable"] = summarize_correct([components[i] for i in keep], [correct[i] for i in keep])
    return summary


def alignment_report(lrf: Mapping, judge: Mapping | None = None, counts: Mapping[str, Mapping] | None = None,
                     no_test: Mapping[str, str] | None = None) -> dict:
    """The `lrf` block of results.json. Per component (under "components"): pairwise_accuracy,
    judge_accuracy, judge_parse_rate and n_pairs (the test pairs they were measured on, the
    indistinguishable ones as ties), the two accuracies on the distinguishable test pairs alone
    (`*_distinguishable`, with n_distinguishable), `pairs`
    (its counts: collected, trained, dev, test, indistinguishable, tied) and, for a component without
    a test split, `no_test` (why; its accuracies are None). Then the macro means and the judge's
    overall parse rate."""
    components: dict = {}
    judge_per = (judge or {}).get("per_component", {})
    names = list(dict.fromkeys([*lrf["per_component"], *(counts or {}), *(no_test or {})]))
    for name in names:
        measured = lrf["per_component"].get(name)
        seen = (lrf.get("distinguishable") or {}).get("per_component", {}).get(name)
        judged_seen = ((judge or {}).get("distinguishable") or {}).get("per_component", {}).get(name, {})
        row = {
            "pairwise_accuracy": measured["accuracy"] if measured else None,
            "judge_accuracy": judge_per.get(name, {}).get("accuracy"),
            "judge_parse_rate": judge_per.get(name, {}).get("parse_rate"),
            "n_pairs": measured["n"] if measured else 0,
            "pairwise_accuracy_distinguishable": seen["accuracy"] if seen else None,
            "judge_accuracy_distinguishable": judged_seen.get("accuracy"),
            "n_distinguishable": seen["n"] if seen else 0,
        }
        if "unparsable" in judge_per.get(name, {}):
            row["judge_unparsable"] = judge_per[name]["unparsable"]
        if counts and name in counts:
            row["pairs"] = dict(counts[name])
        if not measured:
            row["no_test"] = _why_untested(name, counts or {}, no_test or {})
        components[name] = row
    return {
        "components": components,
        "mean_pairwise_accuracy": lrf.get("mean"),
        "mean_judge_accuracy": (judge or {}).get("mean"),
        "mean_pairwise_accuracy_distinguishable": (lrf.get("distinguishable") or {}).get("mean"),
        "mean_judge_accuracy_distinguishable": ((judge or {}).get("distinguishable") or {}).get("mean"),
        "judge_parse_rate": (judge or {}).get("parse_rate"),
    }


def _why_untested(name: str, counts: Mapping[str, Mapping], no_test: Mapping[str, str]) -> str:
    if name in no_test:
        return no_test[name]
    if not (counts.get(name) or {}).get("collected"):
        return "no pairs collected (its candidates tied or matched one another)"
    return "every pair is indistinguishable to the reward model"
