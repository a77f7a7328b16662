"""Running a solution against unit tests in the sandbox, as the official BigCodeBench harness does.

Each suite gets one of two judges (judges.py says which): out of process (judge.py, inside the
sandbox: the tests run in a process where no code of the solution runs, calling it across a
by-value channel), or in process (harness.py: the solution and the tests concatenated and executed
as one module named `__test__`, watched by an audit hook), both in a fresh, empty working directory. The tests to run are read here
from the test source (suite_plan.py), never from the sandboxed process, and the verdict comes
back on the sandbox's report channel (not stdout, which the code may flood) as records keyed with
a per-run secret. A run passes only when every planned test reported a pass, no record was forged
and no tampering was seen: code that exits early, runs no test, or patches unittest fails.
"""
from __future__ import annotations

import functools
import glob
import hashlib
import hmac
import json
import os
import secrets
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from optimas_cli.sandbox import ERROR, FAILED, MEMORY, PASSED, TIMEOUT, SandboxJob, SandboxLimits, run_many
from optimas_cli.sandbox.results import SandboxResult
from optimas_pipelines.bigcodebench.judges import OUT_OF_PROCESS, judge_for
from optimas_pipelines.bigcodebench.suite_plan import SuitePlan, plan_suite

HARNESS = Path(__file__).with_name("harness.py")  # the in-process judge: runs inside the sandbox as main.py
JUDGE = Path(__file__).with_name("judge.py")  # the out-of-process judge, main.py in its turn
CROSSING = Path(__file__).with_name("crossing.py")  # its by-value channel, beside it


@dataclass
class SuiteOutcome:
    """How a solution fared against one test suite."""

    status: str  # passed | failed | error | timeout | memory | killed
    tests_run: int = 0
    failed: int = 0
    failures: list[dict] = field(default_factory=list)  # {"test", "kind", "trace"}, at most 10
    error: str = ""  # why the code could not be loaded, or the sandbox's account of its end
    duration: float = 0.0
    judge: str = ""  # which judge gave the verdict: out-of-process | in-process (judges.py)

    @property
    def passed(self) -> bool:
        return self.status == PASSED


@functools.cache
def matplotlib_cache() -> dict[str, bytes]:
    """Matplotlib's font list, copied into each run so it is not rebuilt every time (~1 s a run)."""
    try:
        import matplotlib
        import matplotlib.font_manager  # noqa: F401 - builds the cache in our own config folder once
    except ImportError:
        return {}
    files = {}
    for path in glob.glob(os.path.join(matplotlib.get_cachedir(), "fontlist-*.json")):
        with open(path, "rb") as fh:
            files[f".config/matplotlib/{os.path.basename(path)}"] = fh.read()
    return files


@dataclass(frozen=True)
class SuiteCheck:
    """What the runner keeps to judge a run: the secret its records are keyed with, and the planned tests."""

    key: bytes
    plan: SuitePlan
    judge: str


def suite_job(code: str, tests: str, limits: SandboxLimits, judge: str = "") -> tuple[SandboxJob, SuiteCheck]:
    """The sandbox job that runs `tests` against `code` under `judge` (default: judges.judge_for), and
    what its verdict is checked against."""
    judge = judge or judge_for(tests)
    check = SuiteCheck(secrets.token_bytes(32), plan_suite(tests), judge)
    files: dict[str, str | bytes] = {"solution.py": code, "tests.py": tests, "key": check.key,
                                     "plan.json": json.dumps(check.plan.to_json()), **matplotlib_cache()}
    if judge == OUT_OF_PROCESS:
        files["crossing.py"] = CROSSING.read_text(encoding="utf-8")
    source = (JUDGE if judge == OUT_OF_PROCESS else HARNESS).read_text(encoding="utf-8")
    return SandboxJob(source=source, files=files, limits=limits), check


def read_records(channel: bytes, key: bytes) -> tuple[list[list[str]], str]:
    """The harness's records, in order, and what was wrong with the channel ('' when nothing)."""
    records: list[list[str]] = []
    for line in channel.split(b"\n"):
        if not line:
            continue
        mac, _, body = line.partition(b"\t")
        expected = hashlib.blake2b(body, key=key, digest_size=16).hexdigest().encode()
        if not hmac.compare_digest(mac, expected):
            return records, "the report channel carried a record the harness did not write"
        try:
            fields = [f.encode("ascii").decode("unicode_escape") for f in body.decode("ascii").split("\t")]
        except UnicodeError:
            return records, "an unreadable record"
        if fields[0] != str(len(records)):
            return records, "records out of order"
        records.append(fields[1:])
    return records, ""


def read_outcome(result: SandboxResult, check: SuiteCheck) -> SuiteOutcome:
    """The verdict from the harness's authenticated records, checked against the planned tests."""
    outcome = _verdict(result, check)
    outcome.judge = check.judge
    return outcome


def _verdict(result: SandboxResult, check: SuiteCheck) -> SuiteOutcome:
    duration = result.duration
    records, forged = read_records(result.channel, check.key)
    if forged:
        return SuiteOutcome(FAILED, error=f"the code tampered with the test harness: {forged}", duration=duration)
    tampered = [r[1] for r in records if r[0] == "tamper"]
    if tampered:
        return SuiteOutcome(FAILED, error=f"the code tampered with the test harness: {tampered[0]}", duration=duration)
    if not records or records[0][0] != "load":
        if result.status == PASSED:  # exited 0 without a word: the code ended the run itself
            return SuiteOutcome(FAILED, error="the code exited before its tests reported", duration=duration)
        error = result.detail + (f"\n{result.stderr[-1500:]}" if result.stderr.strip() else "")
        return SuiteOutcome(result.status, error=error, duration=duration)
    if records[0][1] != "ok":  # memory; failed: the code raised SystemExit or KeyboardInterrupt; else error
        status = {"memory": MEMORY, "failed": FAILED}.get(records[0][1], ERROR)
        return SuiteOutcome(status, error=records[0][2], duration=duration)
    planned = len(check.plan.tests)
    if planned == 0:
        return SuiteOutcome(FAILED, error="the tests define no test case, so nothing was checked", duration=duration)
    tests = [r for r in records[1:] if r[0] == "test"]
    problems = [{"test": r[3], "kind": r[4], "trace": r[5]} for r in tests if r[4] != "pass"]
    done = records[-1][0] == "done" and records[-1][1] == str(planned) == str(len(tests))
    outcome = SuiteOutcome(result.status, tests_run=len(tests), failed=len(problems), failures=problems[:10],
                           duration=duration)
    aborted = [r[1] for r in records if r[0] == "abort"]  # KeyboardInterrupt or SystemExit between tests
    if not done:
        outcome.error = f"only {len(tests)} of the {planned} tests reported before the run ended " \
                        f"({aborted[0] if aborted else result.detail})"
    if any(p["kind"] == "memory" for p in problems):
        outcome.status = MEMORY
    elif problems or aborted:
        outcome.status = FAILED
    elif not done:
        outcome.status = FAILED if result.status == PASSED else result.status
    return outcome


class OutcomeCache:
    """Outcomes by (code, tests): a candidate seen again (validation re-runs, repeats) is not re-run.

    Timeouts and kills are not cached: on a loaded machine they may not happen again.
    """

    CACHEABLE = (PASSED, FAILED, ERROR, MEMORY)

    def __init__(self, max_entries: int = 4096):
        self.max_entries = max_entries
        self._items: OrderedDict[str, SuiteOutcome] = OrderedDict()
        self._lock = threading.Lock()

    @staticmethod
    def key(code: str, tests: str, limits: SandboxLimits, judge: str) -> str:
        return hashlib.sha256(f"{limits!r}\0{judge}\0{code}\0{tests}".encode()).hexdigest()

    def get(self, key: str) -> SuiteOutcome | None:
        with self._lock:
            if key in self._items:
                self._items.move_to_end(key)
                return self._items[key]
        return None

    def put(self, key: str, outcome: SuiteOutcome) -> None:
        if outcome.status not in self.CACHEABLE:
            return
        with self._lock:
            self._items[key] = outcome
            while len(self._items) > self.max_entries:
                self._items.popitem(last=False)


def run_suites(
    pairs: Sequence[tuple[str, str]],
    limits: SandboxLimits,
    workers: int | None = None,
    cache: OutcomeCache | None = None,
    judges: Sequence[str] | None = None,
) -> list[SuiteOutcome]:
    """Run each (code, tests) pair in its own sandbox, in parallel (default: one per core), each under
    its judge (default: the one judges.judge_for gives its tests)."""
    judges = list(judges) if judges is not None else [judge_for(tests) for _, tests in pairs]
    outcomes: list[SuiteOutcome | None] = [None] * len(pairs)
    todo, keys = [], {}
    for i, (code, tests) in enumerate(pairs):
        key = OutcomeCache.key(code, tests, limits, judges[i])
        hit = cache.get(key) if cache is not None else None
        if hit is not None:
            outcomes[i] = hit
        else:
            keys[i] = key
            todo.append(i)
    jobs = [suite_job(pairs[i][0], pairs[i][1], limits, judges[i]) for i in todo]
    results = run_many([job for job, _ in jobs], workers=workers) if jobs else []
    for i, (_, check), result in zip(todo, jobs, results, strict=True):
        outcomes[i] = read_outcome(result, check)
        if cache is not None:
            cache.put(keys[i], outcomes[i])
    return outcomes  # type: ignore[return-value]


def describe(outcome: SuiteOutcome, max_chars: int = 1500) -> str:
    """The executor's report to the final code generator: what ran, what failed and why, briefly."""
    if outcome.status == TIMEOUT:
        text = "Execution timed out (an infinite loop, or a far too slow solution)."
    elif outcome.status == MEMORY:
        text = "Execution ran out of memory."
    elif outcome.status == ERROR:
        text = f"The code could not be run:\n{outcome.error.strip()}"
    elif outcome.status == PASSED:
        text = f"All {outcome.tests_run} generated tests passed."
    elif outcome.failures:
        lines = [f"The generated tests found {outcome.failed} problem(s) in {outcome.tests_run} test(s):"]
        for f in outcome.failures:
            trace = [ln.strip() for ln in f["trace"].strip().split("\n") if ln.strip()]
            last = [ln for ln in trace if not ln.startswith(("Traceback", "~", "^"))][-3:]
            lines.append(f"- {f['test']} ({f['kind']}): " + " | ".join(last))
        text = "\n".join(lines)
    else:
        text = f"Execution failed: {outcome.error.strip()}"
    return text if len(text) <= max_chars else text[: max_chars - 15] + "\n[... cut ...]"
