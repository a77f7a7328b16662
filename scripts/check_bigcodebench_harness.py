"""Check the BigCodeBench harness with the reference solutions: they should (nearly) all pass.

Runs every runnable task's canonical solution (code_prompt + canonical_solution) against its
unit tests in the sandbox, in parallel, and prints the pass rate, the tasks skipped for missing
libraries, and the failures grouped by reason (exception type or sandbox status).

    python scripts/check_bigcodebench_harness.py                       # all 1,140 tasks
    python scripts/check_bigcodebench_harness.py --limit 50 --json-out outputs/bcb_check.json
    python scripts/check_bigcodebench_harness.py --agreement 60 --seed 0  # verdicts vs plain unittest
    python scripts/check_bigcodebench_harness.py --classify --write-table  # which tasks are judged out of process

--agreement N takes N seeded runnable tasks, each as canonical / `return None` / altered return
value, and compares the harness's verdicts with BigCodeBench's own rule run without a sandbox
(load TestCases, run them, pass iff none failed or erred) in a fresh interpreter as this user; each
verdict comes from the judge the task gets by default (judges.py), counted per judge.

--classify runs every runnable task's reference solution under both judges and says which tasks
the out-of-process judge can judge: none of its tests' static reasons, and the reference passes
there as it passes in process (no value failing to cross). --write-table stores those tasks'
test hashes in optimas_pipelines/bigcodebench/out_of_process.json, which judges.py reads.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import re
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from optimas_cli.sandbox import SandboxLimits, probe_isolation  # noqa: E402
from optimas_pipelines.bigcodebench.data import load_tasks, task_missing_libs  # noqa: E402
from optimas_pipelines.bigcodebench.execution import SuiteOutcome, run_suites  # noqa: E402
from optimas_pipelines.bigcodebench.judges import (  # noqa: E402
    IN_PROCESS,
    OUT_OF_PROCESS,
    VERIFIED,
    static_reason,
    suite_hash,
)

_EXCEPTION = re.compile(r"^(?:[\w.]+\.)?(\w+(?:Error|Exception|Exit|Interrupt|Warning))\b", re.MULTILINE)


# Causes outside the harness, recognised from the failure text (first match wins).
_KNOWN_CAUSES = (
    (("nltk_data", "MissingCorpusError", "textblob.download_corpora"), "needs NLTK/TextBlob data (not downloadable offline)"),
    (("name resolution", "NameResolutionError", "Network is unreachable", "urlopen error"), "needs the network (the sandbox has none)"),
)


def reason(outcome: SuiteOutcome) -> str:
    """A short grouping key: a known outside cause, else the status and the exception type that ended the first failure."""
    if outcome.status in ("timeout", "memory", "killed"):
        return outcome.status
    text = "\n".join([f["trace"] for f in outcome.failures] + [outcome.error])
    for needles, cause in _KNOWN_CAUSES:
        if any(n in text for n in needles):
            return cause
    first = outcome.failures[0]["trace"] if outcome.failures else outcome.error
    found = _EXCEPTION.findall(first or "")
    return f"{outcome.status}: {found[-1] if found else 'no exception named'}"


# Wraps task_func so that it returns a different value of the same kind (None for other kinds).
ALTERED = """
_unaltered_task_func = task_func
def task_func(*args, **kwargs):
    value = _unaltered_task_func(*args, **kwargs)
    if isinstance(value, bool):
        return not value
    if isinstance(value, (int, float)):
        return value + 1
    if isinstance(value, str):
        return value + "!"
    if isinstance(value, list):
        return value + [None]
    if isinstance(value, tuple):
        return value + (None,)
    if isinstance(value, dict):
        return {**value, "__altered__": 1}
    return None
"""
UNITTEST_JUDGE = """
import sys, types, unittest
module = types.ModuleType("__test__")
sys.modules["__test__"] = module
exec(compile(open(sys.argv[1]).read(), "__test__.py", "exec"), module.__dict__)
result = unittest.TestResult()
unittest.TestLoader().loadTestsFromTestCase(module.TestCases).run(result)
sys.exit(0 if result.testsRun and not (result.failures or result.errors) else 1)
"""


def variants(task: dict) -> list[tuple[str, str]]:
    code = task["code_prompt"] + task["canonical_solution"]
    return [("canonical", code), ("none", code + "\ndef task_func(*args, **kwargs):\n    return None\n"),
            ("altered", code + "\n" + ALTERED)]


def unittest_verdict(code: str, tests: str, timeout: float) -> bool | None:
    """BigCodeBench's own rule, unsandboxed, in a fresh interpreter and an empty folder (None: timed out)."""
    with tempfile.TemporaryDirectory() as folder:
        program, work = os.path.join(folder, "program.py"), os.path.join(folder, "task")
        Path(program).write_text(code + "\n\n" + tests, encoding="utf-8")
        os.mkdir(work)
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": work, "TZ": "UTC", "LANG": "C.UTF-8",
               "MPLBACKEND": "Agg", "OMP_NUM_THREADS": "1"}
        try:
            return subprocess.run([sys.executable, "-c", UNITTEST_JUDGE, program], cwd=work, env=env,
                                  capture_output=True, timeout=timeout).returncode == 0
        except subprocess.TimeoutExpired:
            return None


def agreement(tasks: list[dict], count: int, seed: int, limits: SandboxLimits, workers: int | None) -> int:
    chosen = random.Random(seed).sample(tasks, min(count, len(tasks)))
    programs = [(task, name, code) for task in chosen for name, code in variants(task)]
    start = time.monotonic()
    ours = run_suites([(code, task["test"]) for task, _, code in programs], limits, workers)
    theirs = [unittest_verdict(code, task["test"], limits.wall_seconds) for task, _, code in programs]
    judged = [(p, o, t) for p, o, t in zip(programs, ours, theirs, strict=True) if t is not None]
    differ = [(p, o, t) for p, o, t in judged if o.passed != t]
    print(f"\nagreement with plain unittest: {len(judged) - len(differ)} of {len(judged)} verdicts "
          f"({len(programs) - len(judged)} timed out there; {time.monotonic() - start:.0f} s)")
    for judge in (OUT_OF_PROCESS, IN_PROCESS):
        mine = [(p, o, t) for p, o, t in judged if o.judge == judge]
        print(f"  {judge}: {sum(o.passed == t for _, o, t in mine)} of {len(mine)} verdicts agree")
    for (task, name, _), outcome, theirs_passed in differ:
        print(f"  {task['task_id']} {name}: harness {outcome.status}, unittest {'passed' if theirs_passed else 'failed'}"
              f" ({reason(outcome)})")
    return 0


def classify(tasks: list[dict], limits: SandboxLimits, workers: int | None, write: bool) -> int:
    """Which runnable tasks the out-of-process judge takes (see the module docstring), and why not the others."""
    start = time.monotonic()
    why = {t["task_id"]: static_reason(t["test"]) for t in tasks}
    candidates = [t for t in tasks if not why[t["task_id"]]]
    pairs = [(t["code_prompt"] + t["canonical_solution"], t["test"]) for t in candidates]
    outside = run_suites(pairs, limits, workers, judges=[OUT_OF_PROCESS] * len(pairs))
    inside = run_suites(pairs, limits, workers, judges=[IN_PROCESS] * len(pairs))
    table = {}
    for task, out, into in zip(candidates, outside, inside, strict=True):
        if out.passed and into.passed:
            table[task["task_id"]] = suite_hash(task["test"])
        elif into.passed:
            kinds = sorted({f["kind"] for f in out.failures}) or [out.status]
            why[task["task_id"]] = f"its reference fails out of process ({', '.join(kinds)}), passes in process"
        else:
            why[task["task_id"]] = f"its reference fails in process too ({reason(into)})"
    print(f"\nout of process: {len(table)} of {len(tasks)} runnable tasks ({len(table) / max(1, len(tasks)):.1%}); "
          f"{time.monotonic() - start:.0f} s")
    reasons = Counter(re.sub(r" \(.*", "", w) if "in process too" in w else w for w in why.values() if w)
    for text, count in reasons.most_common():
        print(f"  {count:4d}  in process: {text}")
    lost = [t for t, out, into in zip(candidates, outside, inside, strict=True) if into.passed and not out.passed]
    print(f"references that pass in process: {sum(o.passed for o in inside)} of {len(candidates)} candidates; "
          f"{len(lost)} of them fail out of process and stay in process: "
          f"{', '.join(t['task_id'].split('/')[-1] for t in lost[:40])}")
    if write:
        VERIFIED.write_text(json.dumps({"about": "tasks judged out of process (judges.py): task id -> tests' sha256, "
                                                 "written by scripts/check_bigcodebench_harness.py --classify",
                                        "tests_sha256": table}, indent=0, sort_keys=True) + "\n", encoding="utf-8")
        print(f"wrote {VERIFIED}")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data-dir", default=None, help="folder holding bigcodebench/ (default: $OPTIMAS_DATA_DIR)")
    ap.add_argument("--workers", type=int, default=None, help="parallel sandboxes (default: one per core)")
    ap.add_argument("--timeout", type=float, default=120.0, help="wall seconds per task")
    ap.add_argument("--memory-mb", type=int, default=4096)
    ap.add_argument("--limit", type=int, default=None, help="only the first N tasks")
    ap.add_argument("--only", default=None, help="only these task numbers, e.g. 35,36,1127")
    ap.add_argument("--json-out", default=None, help="write per-task outcomes here")
    ap.add_argument("--agreement", type=int, default=None, metavar="N",
                    help="compare verdicts with plain unittest on N seeded tasks x 3 variants instead")
    ap.add_argument("--seed", type=int, default=0, help="which tasks --agreement takes")
    ap.add_argument("--classify", action="store_true", help="say which tasks the out-of-process judge takes")
    ap.add_argument("--write-table", action="store_true", help="with --classify: store them for judges.py")
    args = ap.parse_args(argv)

    tasks = load_tasks(args.data_dir)[: args.limit]
    if args.only:
        wanted = {f"BigCodeBench/{n.strip()}" for n in args.only.split(",")}
        tasks = [t for t in tasks if t["task_id"] in wanted]
    skipped = {t["task_id"]: task_missing_libs(t) for t in tasks}
    skipped = {k: v for k, v in skipped.items() if v}
    runnable = [t for t in tasks if t["task_id"] not in skipped]
    limits = SandboxLimits(wall_seconds=args.timeout, memory_mb=args.memory_mb, output_bytes=65536)
    print(f"{len(tasks)} tasks: {len(runnable)} runnable, {len(skipped)} skipped for missing libraries", flush=True)
    print(f"sandbox isolation: {probe_isolation()}", flush=True)
    if args.classify:
        return classify(runnable, limits, args.workers, args.write_table)
    if args.agreement:
        return agreement(runnable, args.agreement, args.seed, limits, args.workers)

    start = time.monotonic()
    outcomes: list[SuiteOutcome] = []
    chunk = 50  # report progress as chunks finish; each chunk still runs in parallel
    for i in range(0, len(runnable), chunk):
        part = runnable[i: i + chunk]
        outcomes += run_suites([(t["code_prompt"] + t["canonical_solution"], t["test"]) for t in part],
                               limits, args.workers)
        done = sum(o.passed for o in outcomes)
        print(f"  {len(outcomes)}/{len(runnable)} run, {done} passed, {time.monotonic() - start:.0f} s", flush=True)

    passed = sum(o.passed for o in outcomes)
    by_reason: dict[str, list[str]] = defaultdict(list)
    for task, outcome in zip(runnable, outcomes, strict=True):
        if not outcome.passed:
            by_reason[reason(outcome)].append(task["task_id"])
    rate = passed / len(runnable) if runnable else 0.0
    print(f"\nreference pass rate: {passed}/{len(runnable)} = {rate:.1%} of runnable tasks "
          f"({time.monotonic() - start:.0f} s, {args.timeout:.0f} s limit per task)")
    print(f"verdicts per judge: {dict(Counter(o.judge for o in outcomes))}")
    libs = Counter(lib for absent in skipped.values() for lib in absent)
    print(f"skipped for missing libraries: {len(skipped)} {dict(libs.most_common())}")
    print("failures by reason:")
    for key, ids in sorted(by_reason.items(), key=lambda kv: -len(kv[1])):
        print(f"  {len(ids):4d}  {key}: {', '.join(i.split('/')[-1] for i in ids[:25])}{' ...' if len(ids) > 25 else ''}")
    if args.json_out:
        Path(args.json_out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json_out).write_text(json.dumps({
            "pass_rate": rate, "passed": passed, "runnable": len(runnable), "skipped": skipped,
            "outcomes": {t["task_id"]: {"status": o.status, "judge": o.judge, "reason": reason(o), "tests_run": o.tests_run,
                                        "failures": o.failures, "error": o.error, "duration": o.duration}
                         for t, o in zip(runnable, outcomes, strict=True)},
        }, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
