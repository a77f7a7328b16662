"""Alignment metrics (paper Table 4): pairwise ranking accuracy on held-out pairs, per component and mean.

A pair counts as correct only when the chosen output scores strictly higher; a tie is a miss
(a reward that cannot tell two outputs apart does not rank them). The mean is the macro average
over components, so a component with many pairs does not drown out one with few.
"""
from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence

from optimas_cli.lrf.pairs import PreferencePair, by_component


def summarize_correct(components: Sequence[str], correct: Sequence[bool]) -> dict:
    """{"per_component": {name: {"accuracy", "n"}}, "mean": macro mean or None, "n": total}."""
    per: dict[str, list[bool]] = {}
    for c, ok in zip(components, correct, strict=True):
        per.setdefault(c, []).append(bool(ok))
    per_component = {c: {"accuracy": sum(v) / len(v), "n": len(v)} for c, v in per.items()}
    accs = [v["accuracy"] for v in per_component.values()]
    return {"per_component": per_component, "mean": statistics.fmean(accs) if accs else None, "n": len(correct)}


def pairwise_accuracy(model, pairs: Sequence[PreferencePair]) -> dict:
    """How often `model.score` ranks the chosen output above the rejected one."""
    components, correct = [], []
    for name, group in by_component(pairs).items():
        contexts = [p.context for p in group]
        chosen = model.score(name, contexts, [p.chosen for p in group])
        rejected = model.score(name, contexts, [p.rejected for p in group])
        components += [name] * len(group)
        correct += [c > r for c, r in zip(chosen, rejected, strict=True)]
    return summarize_correct(components, correct)


def alignment_report(lrf: Mapping, judge: Mapping | None = None) -> dict:
    """The `lrf` block of results.json: per component pairwise_accuracy, judge_accuracy, n_pairs (under
    "components"), and their means mean_pairwise_accuracy, mean_judge_accuracy."""
    components: dict = {}
    judge_per = (judge or {}).get("per_component", {})
    for name, v in lrf["per_component"].items():
        components[name] = {
            "pairwise_accuracy": v["accuracy"],
            "judge_accuracy": judge_per.get(name, {}).get("accuracy"),
            "n_pairs": v["n"],
        }
        if name in judge_per and "unparsable" in judge_per[name]:
            components[name]["judge_unparsable"] = judge_per[name]["unparsable"]
    return {
        "components": components,
        "mean_pairwise_accuracy": lrf.get("mean"),
        "mean_judge_accuracy": (judge or {}).get("mean"),
    }
