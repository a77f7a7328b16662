"""What sets runs of the same pipeline x method apart (an ablation value, another budget): a short label.

Runs that differ only in their seed (or the simulator instance the seed draws) are repeats and share a label,
so they are averaged together;
runs that differ in anything else (budget.fresh_size=10 vs 20) get their own column or row.
"""
from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Callable, Iterable

from optimas_cli.report.runs import Run

# Keys that never make two runs different experiments: where the data or cache lives, the seed, and the
# synthetic pipeline's instance (conf/pipeline/synthetic.yaml: the run seed by default, a draw like it).
IGNORED_TOP = {"task", "data_dir", "resume", "config_file", "lrf_dir"}
IGNORED_LEAF = {"seed", "cache_dir", "instance"}
# Copies of other groups interpolated into the method (${lrf}; ${budget} in runs made before the typed
# Budget): shown once, under their own name.
DUPLICATED = ("method.lrf", "method.budget")


def flatten(data, prefix: str = "") -> dict[str, object]:
    if isinstance(data, dict):
        out: dict[str, object] = {}
        for key, value in data.items():
            out.update(flatten(value, f"{prefix}.{key}" if prefix else str(key)))
        return out
    return {prefix: repr(data) if isinstance(data, (list, tuple)) else data}


def _ignored(key: str, exclude: tuple[str, ...]) -> bool:
    parts = key.split(".")
    return (parts[0] in IGNORED_TOP or parts[-1] in IGNORED_LEAF
            or any(key == p or key.startswith(p + ".") for p in DUPLICATED + exclude))


def labels(runs: list[Run], exclude: tuple[str, ...] = ()) -> list[str]:
    """One label per run: the config values that vary among these runs (seeds and paths aside)."""
    flat = [flatten(r.results.get("config") or {}) for r in runs]
    keys = sorted({k for f in flat for k in f if not _ignored(k, exclude)})
    varying = [k for k in keys if len({repr(f.get(k)) for f in flat}) > 1]
    named = {k[: -len(".name")] for k in varying if k.endswith(".name")}
    # A whole group swapped (lrf=minilm vs lrf=llama3_8b_lora): its name says it; drop its other keys.
    shown = [k for k in varying if not any(k.startswith(g + ".") and k != g + ".name" for g in named)]
    out = []
    for f in flat:
        parts = [f"{k[: -len('.name')] if k.endswith('.name') else k}={f.get(k, 'unset')}" for k in shown]
        out.append(", ".join(parts))
    return out


def assign(runs: Iterable[Run], key: Callable[[Run], tuple], attr: str, exclude: tuple[str, ...] = ()) -> None:
    """Label runs within each group of key(run) and store the label in run.<attr>."""
    groups: dict[tuple, list[Run]] = defaultdict(list)
    for run in runs:
        groups[key(run)].append(run)
    for members in groups.values():
        for run, label in zip(members, labels(members, exclude), strict=True):
            setattr(run, attr, label)


def natural_key(text: str) -> list:
    """'n=3' before 'n=10': numbers inside labels sort by value."""
    return [(0, float(t), "") if re.fullmatch(r"\d+(\.\d+)?", t) else (1, 0.0, t) for t in re.split(r"(\d+(?:\.\d+)?)", text)]
