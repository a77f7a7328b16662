"""Running a solution against unit tests in the sandbox, as the official BigCodeBench harness does.

The solution and the tests are concatenated and executed as one module named `__test__` in a
fresh, empty working directory; the module's unittest.TestCase classes are run and a JSON
summary is printed after a per-run random marker. A run passes only when that summary arrives
and lists no failure, so code that exits early (`os._exit(0)`) before its tests ran fails.
"""
from __future__ import annotations

import functools
import glob
import hashlib
import json
import os
import secrets
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field

from optimas_cli.sandbox import ERROR, FAILED, MEMORY, PASSED, TIMEOUT, SandboxJob, SandboxLimits, run_many
from optimas_cli.sandbox.results import SandboxResult

_HARNESS = r'''
import json, linecache, os, sys, traceback, types, unittest

MARK = "__MARK__"


def tail(text, n):
    return text if len(text) <= n else "..." + text[-n:]


def report(payload, code):
    try:
        sys.stdout.flush()
    except Exception:
        pass
    os.write(1, ("\n" + MARK + json.dumps(payload) + "\n").encode())
    os._exit(code)  # no atexit handlers or leftover threads of the solution may hold the exit


class Result(unittest.TestResult):
    memory = False

    def addError(self, test, err):
        self.memory = self.memory or issubclass(err[0], MemoryError)
        super().addError(test, err)


def main():
    with open("solution.py", encoding="utf-8") as fh:
        solution = fh.read()
    with open("tests.py", encoding="utf-8") as fh:
        tests = fh.read()
    for name in ("solution.py", "tests.py", "main.py"):
        os.remove(name)
    os.mkdir("task")
    os.chdir("task")  # the code sees an empty working directory, as in the official harness
    module = types.ModuleType("__test__")
    module.__file__ = "__test__.py"
    sys.modules["__test__"] = module
    source = solution + "\n\n" + tests
    # Tracebacks then quote the failing lines, which is what the final code generator needs to see.
    linecache.cache["__test__.py"] = (len(source), None, source.splitlines(True), "__test__.py")
    try:
        exec(compile(source, "__test__.py", "exec"), module.__dict__)
    except MemoryError:
        report({"loaded": False, "error": "MemoryError while loading the code"}, 3)
    except BaseException:
        report({"loaded": False, "error": tail(traceback.format_exc(), 1500)}, 2)
    cases = [v for v in list(vars(module).values())
             if isinstance(v, type) and issubclass(v, unittest.TestCase) and v.__module__ == "__test__"]
    suite = unittest.TestSuite(unittest.defaultTestLoader.loadTestsFromTestCase(c) for c in cases)
    result = Result()
    suite.run(result)
    problems = [(t, "failure", tb) for t, tb in result.failures] + [(t, "error", tb) for t, tb in result.errors]
    problems += [(t, "unexpected success", "") for t in result.unexpectedSuccesses]
    payload = {
        "loaded": True,
        "tests_run": result.testsRun,
        "failures": [{"test": t.id().split(".")[-1], "kind": kind, "trace": tail(tb, 700)}
                     for t, kind, tb in problems[:10]],
        "failed": len(problems),
    }
    report(payload, 0 if not problems else (3 if result.memory else 1))


main()
'''


@dataclass
class SuiteOutcome:
    """How a solution fared against one test suite."""

    status: str  # passed | failed | error | timeout | memory | killed
    tests_run: int = 0
    failed: int = 0
    failures: list[dict] = field(default_factory=list)  # {"test", "kind", "trace"}, at most 10
    error: str = ""  # why the code could not be loaded, or the sandbox's account of its end
    duration: float = 0.0

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


def suite_job(code: str, tests: str, limits: SandboxLimits) -> tuple[SandboxJob, str]:
    """The sandbox job that runs `tests` against `code`, and the marker its summary follows."""
    marker = f"@@optimas-tests-{secrets.token_hex(8)}@@"
    files: dict[str, str | bytes] = {"solution.py": code, "tests.py": tests, **matplotlib_cache()}
    return SandboxJob(source=_HARNESS.replace("__MARK__", marker), files=files, limits=limits), marker


def read_outcome(result: SandboxResult, marker: str) -> SuiteOutcome:
    """Combine the sandbox's status with the harness's summary (absent if the run never got there)."""
    payload = None
    for line in reversed(result.stdout.splitlines()):
        if line.startswith(marker):
            try:
                payload = json.loads(line[len(marker):])
            except json.JSONDecodeError:
                payload = None
            break
    if payload is None:
        if result.status == PASSED:  # exited 0 without the summary: the code ended the run itself
            return SuiteOutcome(FAILED, error="the code exited before its tests reported", duration=result.duration)
        error = result.detail + (f"\n{result.stderr[-1500:]}" if result.stderr.strip() else "")
        return SuiteOutcome(result.status, error=error, duration=result.duration)
    if not payload.get("loaded"):
        return SuiteOutcome(MEMORY if result.status == MEMORY else ERROR, error=payload.get("error", ""),
                           duration=result.duration)
    return SuiteOutcome(
        status=result.status,
        tests_run=int(payload.get("tests_run", 0)),
        failed=int(payload.get("failed", 0)),
        failures=list(payload.get("failures", [])),
        duration=result.duration,
    )


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
    def key(code: str, tests: str, limits: SandboxLimits) -> str:
        return hashlib.sha256(f"{limits!r}\0{code}\0{tests}".encode()).hexdigest()

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
) -> list[SuiteOutcome]:
    """Run each (code, tests) pair in its own sandbox, in parallel (default: one per core)."""
    outcomes: list[SuiteOutcome | None] = [None] * len(pairs)
    todo, keys = [], {}
    for i, (code, tests) in enumerate(pairs):
        key = OutcomeCache.key(code, tests, limits)
        hit = cache.get(key) if cache is not None else None
        if hit is not None:
            outcomes[i] = hit
        else:
            keys[i] = key
            todo.append(i)
    jobs = [suite_job(pairs[i][0], pairs[i][1], limits) for i in todo]
    results = run_many([job for job, _ in jobs], workers=workers) if jobs else []
    for i, (_, marker), result in zip(todo, jobs, results, strict=True):
        outcomes[i] = read_outcome(result, marker)
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
        text = (f"All {outcome.tests_run} generated tests passed." if outcome.tests_run
                else "The code runs, but the generated tests contain no test case.")
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
