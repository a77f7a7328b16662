"""`optimas show RUN [RUN_B]`: what a run did, example by example and component by component.

One run: a per-component summary (how often it ran, its outputs, its mean r_k, how many failed
examples it is blamed for) and the examples. Two runs: the examples both scored, lined up, with
which examples changed and which components' outputs changed with them.

Blame (runs with a trained local reward model, whose traces carry r_k): a failed example names
the component whose r_k on that example is lowest relative to the component's typical score on
the split (z-score over the split's examples); r_k scales differ between heads, so raw values
would not compare.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console
from rich.table import Table

from optimas_cli.errors import UserError
from optimas_cli.provenance import code_label
from optimas_cli.report.run_archive import located
from optimas_cli.report.runs import is_run_folder
from optimas_cli.stats import paired_ci
from optimas_cli.system.results_file import read_results
from optimas_cli.system.run_folder import failed_before_start, lock_holder
from optimas_cli.system.traces import PREDICTIONS, predictions_path, read_predictions

USAGE = "optimas show RUN_FOLDER [OTHER_RUN_FOLDER] [--split test|validation] [--failed] [--component NAME] [--limit N]"
SPLITS = {"test": "test", "validation": "final_validation"}
FAILED = 1.0  # an example "failed" when its score is below a perfect 1 (F1, accuracy, MRR, pass rate)
WIDTH = 100   # characters of a field shown per cell; the trace file keeps them whole


@dataclass
class Example:
    key: str
    score: float                               # mean over repeats
    first: dict                                # the first repeat's trace line
    blame: tuple[str, float, float] | None = None  # component, r_k, z


@dataclass
class RunTrace:
    folder: Path
    results: dict
    examples: dict[str, Example] = field(default_factory=dict)
    records: list[dict] = field(default_factory=list)
    components: list[str] = field(default_factory=list)


def parse(args: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="optimas show", usage=USAGE, description=__doc__.split("\n\n")[0])
    parser.add_argument("folders", nargs="+", help="one run folder, or two to line up")
    parser.add_argument("--split", choices=sorted(SPLITS), default="test")
    parser.add_argument("--failed", action="store_true", help=f"only examples scoring below {FAILED:g}")
    parser.add_argument("--component", help="show this component's inputs and outputs per example")
    parser.add_argument("--limit", type=int, default=10, help="examples to list (default 10; 0: all)")
    opts = parser.parse_args(args)
    if len(opts.folders) > 2:
        parser.error("pass one run folder, or two to compare")
    return opts


def load(folder: str, split: str) -> RunTrace:
    path = located(Path(folder))  # a run inside a packed folder (<folder>.runs.tar.xz): its unpacked copy
    if not path.is_dir():
        raise UserError(f"no such folder: {folder}", "pass a run folder written by `optimas run`")
    if not is_run_folder(path):
        raise UserError(f"{folder} is not a run folder (no results.json, config.yaml or optimas.log)",
                        "pass a folder written by `optimas run`")
    results = read_results(path)
    source = predictions_path(path)
    if source is None:
        raise _no_traces(folder, path, results)
    records = [{"components": {}, **r} for r in read_predictions(source) if r["split"] == SPLITS[split]]
    if not records:
        if results is None or (split == "test" and results.get("test_skipped")):
            raise _no_traces(folder, path, results)
        raise UserError(f"{folder} has no {split} examples in {source.name}", "try --split validation or --split test")
    run = RunTrace(Path(folder), results or {}, records=records)
    by_key: dict[str, list[dict]] = defaultdict(list)
    for r in records:
        by_key[r["key"]].append(r)
        run.components += [c for c in r["components"] if c not in run.components]
    for key, lines in by_key.items():
        lines.sort(key=lambda r: r["repeat"])
        run.examples[key] = Example(key, statistics.fmean(r["score"] for r in lines), lines[0])
    _assign_blame(run)
    return run


def _no_traces(folder: str, path: Path, results: dict | None) -> UserError:
    """Why a run folder holds no examples to show: still running, killed, stopped by a cap, or old."""
    pid = lock_holder(path)
    if pid is not None:
        return UserError(f"{folder} is a run still in progress (pid {pid}): no results yet", "show it once it ends")
    if results is None and (failed := failed_before_start(path)):
        return UserError(f"{folder}: {failed}", "fix that and run its command again")
    if results is None:
        return UserError(f"{folder} holds a run that did not finish (killed, or it failed: see its optimas.log)",
                         f"continue it with: optimas run <its overrides> resume={folder}")
    if results.get("test_skipped"):
        return UserError(f"{folder} was stopped by budget.{results.get('stopped')} before the test evaluation",
                         f"resume it with a raised cap: optimas run <its overrides> resume={folder} "
                         f"budget.{results.get('stopped')}=<more>")
    return UserError(f"{folder} has no {PREDICTIONS}: it was written before runs kept per-example traces",
                     f"re-evaluate it: optimas eval config_file={folder}/best_config.json")


def _assign_blame(run: RunTrace) -> None:
    rewards: dict[str, list[float]] = defaultdict(list)
    for r in run.records:
        for name, step in r["components"].items():
            if "reward" in step:
                rewards[name].append(step["reward"])
    typical = {n: (statistics.fmean(v), statistics.pstdev(v) or 1.0) for n, v in rewards.items()}
    for ex in run.examples.values():
        if ex.score >= FAILED:
            continue
        scored = [(n, s["reward"], (s["reward"] - typical[n][0]) / typical[n][1])
                  for n, s in ex.first["components"].items() if "reward" in s]
        if scored:
            ex.blame = min(scored, key=lambda t: t[2])


def _text(value, width: int = WIDTH) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


def _empty(outputs: dict) -> bool:
    return not outputs or all(v in (None, "", [], {}) for v in outputs.values())


def _select(examples: list[Example], opts, score=lambda e: e.score) -> list[Example]:
    if opts.failed:
        examples = [e for e in examples if score(e) < FAILED]
    return examples[: opts.limit] if opts.limit > 0 else examples


def _check_component(opts, *runs: RunTrace) -> None:
    known = [c for run in runs for c in run.components]
    if opts.component and opts.component not in known:
        raise UserError(f"no component {opts.component!r} in these traces", f"use one of {', '.join(dict.fromkeys(known))}")


def component_summary(run: RunTrace) -> Table:
    table = Table(title="components")
    for header in ("component", "ran", "skipped", "empty outputs", "mean output chars", "mean r_k", "blamed"):
        table.add_column(header, justify="left" if header == "component" else "right")
    blamed = defaultdict(int)
    for ex in run.examples.values():
        if ex.blame:
            blamed[ex.blame[0]] += 1
    for name in run.components:
        steps = [r["components"][name] for r in run.records if name in r["components"]]
        ran = [s for s in steps if not s.get("skipped")]
        rewards = [s["reward"] for s in ran if "reward" in s]
        chars = [len(_text(s["outputs"], 10**9)) for s in ran]
        table.add_row(name, str(len(ran)), str(len(steps) - len(ran)), str(sum(_empty(s["outputs"]) for s in ran)),
                      f"{statistics.fmean(chars):.0f}" if chars else "—",
                      f"{statistics.fmean(rewards):+.3f} ± {statistics.pstdev(rewards):.3f}" if rewards else "n/a",
                      str(blamed[name]) if rewards else "n/a")
    return table


def show_one(run: RunTrace, opts, console: Console) -> None:
    res = run.results
    scores = [e.score for e in run.examples.values()]
    repeats = len({r["repeat"] for r in run.records})
    failed = sum(s < FAILED for s in scores)
    console.print(f"[bold]{run.folder}[/] · {res.get('pipeline', '?')} · {res.get('method', '?')} · {opts.split}: "
                  f"{len(scores)} examples × {repeats} repeat(s) · mean {res.get('metric', 'score')} "
                  f"{statistics.fmean(scores):.4f} · {failed} below {FAILED:g}"
                  + (f" · code {code}" if (code := code_label(res.get("code"))) else ""))
    if res.get("stopped"):
        console.print(f"[yellow]stopped by budget.{res['stopped']}: the best configuration found before the cap[/]")
    console.print(component_summary(run))
    if not any("reward" in s for r in run.records for s in r["components"].values()):
        console.print("[dim]no r_k in these traces (no trained local reward model): no blame column[/]")
    _check_component(opts, run)
    table = Table(title=f"examples{' (failed)' if opts.failed else ''}")
    for header in ("key", "score", *((opts.component + " in", opts.component + " out") if opts.component
                                     else ("output", "gold")), "blame"):
        table.add_column(header)
    chosen = _select(sorted(run.examples.values(), key=lambda e: (e.score, e.key)), opts)
    for ex in chosen:
        if opts.component:
            step = ex.first["components"].get(opts.component, {})
            cells = ("(skipped)", "") if step.get("skipped") else (_text(step.get("inputs")), _text(step.get("outputs")))
        else:
            cells = (_text(ex.first["output"]), _text(ex.first["gold"]))
        blame = f"{ex.blame[0]} (r={ex.blame[1]:+.2f}, z={ex.blame[2]:+.1f})" if ex.blame else ""
        table.add_row(ex.key, f"{ex.score:.3f}", *cells, blame)
    console.print(table)


def show_pair(a: RunTrace, b: RunTrace, opts, console: Console) -> None:
    common = [k for k in a.examples if k in b.examples]
    if not common:
        raise UserError(f"{a.folder} and {b.folder} share no {opts.split} examples", "compare runs of the same pipeline and split")
    _check_component(opts, a, b)
    before = [a.examples[k].score for k in common]
    after = [b.examples[k].score for k in common]
    ci = paired_ci(before, after)
    up = sum(y > x for x, y in zip(before, after, strict=True))
    down = sum(y < x for x, y in zip(before, after, strict=True))
    console.print(f"A [bold]{a.folder}[/] ({a.results.get('method', '?')}) · B [bold]{b.folder}[/] "
                  f"({b.results.get('method', '?')}) · {opts.split}: {len(common)} examples in common")
    console.print(f"mean {statistics.fmean(before):.4f} → {statistics.fmean(after):.4f} · Δ {ci.estimate:+.4f} "
                  f"(95% CI {ci.low:+.4f} … {ci.high:+.4f}{', excludes 0' if ci.excludes_zero else ''}) · "
                  f"{up} better, {down} worse, {len(common) - up - down} unchanged")
    changed = {k: [n for n in dict.fromkeys(a.components + b.components)
                   if _outputs(a.examples[k], n) != _outputs(b.examples[k], n)] for k in common}
    table = Table(title="components (examples whose output changed, and what happened to their score)")
    for header in ("component", "output changed", "better", "worse", "same score"):
        table.add_column(header, justify="left" if header == "component" else "right")
    for name in dict.fromkeys(a.components + b.components):
        keys = [k for k in common if name in changed[k]]
        deltas = [b.examples[k].score - a.examples[k].score for k in keys]
        table.add_row(name, str(len(keys)), str(sum(d > 0 for d in deltas)), str(sum(d < 0 for d in deltas)),
                      str(sum(d == 0 for d in deltas)))
    console.print(table)
    keys = [k for k in common if a.examples[k].score != b.examples[k].score or changed[k]]
    if opts.component:
        keys = [k for k in keys if opts.component in changed[k]]
    keys.sort(key=lambda k: (-abs(b.examples[k].score - a.examples[k].score), k))
    chosen = _select([b.examples[k] for k in keys], opts)
    table = Table(title="changed examples" + (" (failed in B)" if opts.failed else ""))
    for header in ("key", "A", "B", "components changed", *((f"{opts.component} A", f"{opts.component} B")
                                                             if opts.component else ("output A", "output B"))):
        table.add_column(header)
    for ex in chosen:
        old = a.examples[ex.key]
        if opts.component:
            cells = (_text(_outputs(old, opts.component)), _text(_outputs(ex, opts.component)))
        else:
            cells = (_text(old.first["output"]), _text(ex.first["output"]))
        table.add_row(ex.key, f"{old.score:.3f}", f"{ex.score:.3f}", ", ".join(changed[ex.key]) or "—", *cells)
    console.print(table)


def _outputs(ex: Example, name: str):
    step = ex.first["components"].get(name)
    return None if step is None or step.get("skipped") else step.get("outputs")


def show_main(args: list[str]) -> int:
    console = Console(highlight=False, soft_wrap=True)
    try:
        opts = parse(args)
    except SystemExit as exc:  # argparse already printed the usage line
        return 0 if exc.code == 0 else 2
    try:
        runs = [load(folder, opts.split) for folder in opts.folders]
        if len(runs) == 1:
            show_one(runs[0], opts, console)
        else:
            show_pair(runs[0], runs[1], opts, console)
    except UserError as err:
        print(f"optimas: {err}", file=sys.stderr)
        return 2
    return 0
