"""Which judge gives a suite's verdict: out of process (judge.py) where the task allows it, else in process (harness.py).

Out of process, the verdict is decided in a process that runs no code of the solution, so it cannot
be forged from Python at all; but the tests then see the solution only through values that cross
by value (crossing.py). A suite is judged so only when both hold:
 - nothing in its tests needs the solution in the same interpreter (static_reason): no
   unittest.mock (a patch of a module the solution uses would not reach the solution's process),
   no unpickling or running of code from data (the worker could leave a pickle for the judge);
 - its task was verified: the reference solution, judged out of process, passed with no value
   failing to cross, as it passes in process (scripts/check_bigcodebench_harness.py --classify
   writes VERIFIED, keyed by the tests' hash, so a changed test falls back).
Every other suite (generated tests, Axes-returning tasks, patching tests) is judged in process.
The candidate never decides which judge it gets.
"""
from __future__ import annotations

import functools
import hashlib
import json
import re
from pathlib import Path

OUT_OF_PROCESS, IN_PROCESS = "out-of-process", "in-process"
JUDGES = (OUT_OF_PROCESS, IN_PROCESS)
VERIFIED = Path(__file__).with_name("out_of_process.json")
_STATIC = (
    (re.compile(r"\bmock\b|\bpatch\b|Mock\b"), "its tests patch or mock what the solution uses"),
    (re.compile(r"pickle|joblib|\bdill\b|shelve|marshal|torch\.load"), "its tests unpickle data the solution could write"),
    (re.compile(r"\b(eval|exec)\s*\(|importlib|__import__|runpy"), "its tests run code or import modules by name"),
)


def suite_hash(tests: str) -> str:
    return hashlib.sha256(tests.encode()).hexdigest()[:16]


def static_reason(tests: str) -> str:
    """Why these tests need the in-process judge whatever the task ('' when nothing in them does)."""
    return next((why for pattern, why in _STATIC if pattern.search(tests)), "")


@functools.cache
def verified() -> frozenset[str]:
    try:
        return frozenset(json.loads(VERIFIED.read_text(encoding="utf-8"))["tests_sha256"].values())
    except (OSError, ValueError, KeyError):
        return frozenset()


def judge_for(tests: str) -> str:
    return OUT_OF_PROCESS if suite_hash(tests) in verified() and not static_reason(tests) else IN_PROCESS
