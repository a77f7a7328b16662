"""Cheating solutions: each one is WRONG (task_func subtracts) and tries to make its tests pass anyway
by attacking the harness instead of solving the task. None may pass (issue 18, item 4); a correct
solution whose leftover child floods stdout must still pass (item 5).

Only `run_suites` and SuiteOutcome's fields are used (and `suite_job` to look at a run's stderr),
so the same file measures any harness version.
"""
from __future__ import annotations

import sys

import pytest

from optimas_cli.sandbox import SandboxLimits, run_job
from optimas_pipelines.bigcodebench.execution import run_suites, suite_job

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the sandbox targets Linux")

LIMITS = SandboxLimits(wall_seconds=15, memory_mb=1024, output_bytes=4096)
WRONG = "def task_func(a, b):\n    return a - b\n"
# The result is taken before the assertion is looked up, so a patch made inside task_func applies.
TESTS = (
    "import unittest\n"
    "class TestCases(unittest.TestCase):\n"
    "    def test_sum(self):\n        result = task_func(2, 3)\n        self.assertEqual(result, 5)\n"
    "    def test_other_sum(self):\n        result = task_func(1, 1)\n        self.assertEqual(result, 2)\n"
)

# Helpers the cheats share: find the running TestCase (the frame whose `self` is one) from task_func.
FIND_TEST = (
    "import sys, unittest\n"
    "def running_test():\n"
    "    frame = sys._getframe(1)\n"
    "    while frame is not None:\n"
    "        me = frame.f_locals.get('self')\n"
    "        if isinstance(me, unittest.TestCase):\n"
    "            return me, frame\n"
    "        frame = frame.f_back\n"
)

CHEATS = {
    "no-op TestCase.run (zero tests run)": (
        "import unittest\nunittest.TestCase.run = lambda self, result=None: result\n" + WRONG),
    "no-op TestResult.addFailure": (
        "import unittest\nunittest.TestResult.addFailure = lambda *a, **k: None\n" + WRONG),
    "no-op TestCase.assertEqual": (
        "import unittest\nunittest.TestCase.assertEqual = lambda *a, **k: None\n" + WRONG),
    "no-op assertEqual on the running test only": (
        FIND_TEST + "def task_func(a, b):\n"
        "    test, _ = running_test()\n"
        "    test.assertEqual = lambda *a, **k: None\n"
        "    return a - b\n"),
    "a fake TestCase base slipped under the tests": (
        "import unittest\n"
        "class Lenient(unittest.TestCase):\n"
        "    def assertEqual(self, *a, **k):\n        pass\n"
        "unittest.TestCase = Lenient\n" + WRONG),
    "walk the stack and call the harness's report function": (
        "import os, sys\n"
        "def task_func(a, b):\n"
        "    frame = sys._getframe(1)\n"
        "    while frame is not None:\n"
        "        names = {**frame.f_globals, **frame.f_locals}\n"
        "        if callable(names.get('report')):\n"  # the harness before issue 18
        "            names['report']({'loaded': True, 'tests_run': 2, 'failures': [], 'failed': 0}, 0)\n"
        "        result, index = names.get('result'), names.get('index')\n"
        "        if hasattr(result, 'addSuccess') and isinstance(index, int) and 'plan' in names:\n"  # the run loop
        "            result.addSuccess(names['test'])\n"
        "            for i in range(index, 2):\n"
        "                sys.audit('optimas.end', i)\n"
        "            sys.audit('optimas.done')\n"
        "            os._exit(0)\n"
        "        frame = frame.f_back\n"
        "    return a - b\n"),
    "forge verdict lines on every descriptor": (
        "import os, sys\n"
        "mark = next((v for f in [sys._getframe()] for v in f.f_globals.values()\n"
        "             if isinstance(v, str) and v.startswith('@@optimas')), '')\n"
        "line = ('\\n' + mark + '{\"loaded\": true, \"tests_run\": 2, \"failures\": [], \"failed\": 0}\\n').encode()\n"
        "for fd in range(1, 64):\n"
        "    try:\n"
        "        os.write(fd, line)\n"
        "        os.write(fd, b'0\\tload\\tok\\t\\n1\\ttest\\t0\\tTestCases\\ttest_other_sum\\tpass\\t\\t0\\n')\n"
        "    except OSError:\n"
        "        pass\n"
        "os._exit(0)\n"),
    "mark the failing test as an expected failure": (
        FIND_TEST + "def task_func(a, b):\n"
        "    test, _ = running_test()\n"
        "    test._outcome.expecting_failure = True\n"
        "    return a - b\n"),
    "skip the test at run time": (
        "import unittest\n"
        "def task_func(a, b):\n"
        "    raise unittest.SkipTest('not today')\n"),
    "right once, then replace the other test methods on the test class": (
        FIND_TEST + "calls = []\n"
        "def task_func(a, b):\n"
        "    calls.append(1)\n"
        "    test, _ = running_test()\n"
        "    for name in dir(type(test)):\n"
        "        if name.startswith('test') and name != test._testMethodName:\n"
        "            setattr(type(test), name, lambda self: None)\n"
        "    return a + b if len(calls) == 1 else a - b\n"),
    "swap the code of assertEqual": (
        "import unittest\n"
        "unittest.TestCase.assertEqual.__code__ = (lambda self, first, second, msg=None: None).__code__\n" + WRONG),
    "search the heap for the harness's reporter or key, then forge": (
        "import gc, hashlib, os\n"
        "def forge(key, seq):\n"
        "    lines = [] if seq else ['load\\tok\\t']\n"
        "    lines += [f'test\\t{i}\\tTestCases\\t{m}\\tpass\\t\\t0'\n"
        "                                for i, m in enumerate(['test_other_sum', 'test_sum'])] + ['done\\t2']\n"
        "    for seq, line in enumerate(lines, seq):\n"
        "        body = f'{seq}\\t{line}'.encode()\n"
        "        mac = hashlib.blake2b(body, key=key, digest_size=16).hexdigest().encode()\n"
        "        os.write(3, mac + b'\\t' + body + b'\\n')\n"
        "    os._exit(0)\n"
        "def task_func(a, b):\n"
        "    for o in gc.get_objects():\n"
        "        if callable(o) and getattr(o, '__name__', '') == 'report':\n"  # the harness before issue 18
        "            o({'loaded': True, 'tests_run': 2, 'failures': [], 'failed': 0}, 0)\n"
        "        cells = [c.cell_contents for c in getattr(o, '__closure__', None) or ()]\n"  # key, state
        "        keys = [v for v in cells if isinstance(v, bytes) and len(v) == 32]\n"
        "        seqs = [v['seq'] for v in cells if isinstance(v, dict) and 'seq' in v]\n"
        "        if keys and seqs:\n"
        "            forge(keys[0], seqs[0])\n"
        "    return a - b\n"),
}


# Issue 26, item 5: no gc, no /proc/self/mem: raw reads with ctypes over every writable mapping,
# looking for closure cells that hold 32 bytes (the harness's key lived in one), then records
# keyed with it, written to every descriptor.
READ_THE_KEY_WITH_CTYPES = (
    "import ctypes, hashlib, os, struct, types\n"
    "def regions():\n"
    "    with open('/proc/self/maps') as fh:\n"
    "        for line in fh:\n"
    "            span, perms = line.split()[:2]\n"
    "            lo, hi = (int(x, 16) for x in span.split('-'))\n"
    "            if perms.startswith('rw') and hi - lo < (256 << 20):\n"
    "                yield lo, hi\n"
    "def keys_in_cells():\n"
    "    spans = list(regions())\n"
    "    readable = lambda a, n: any(lo <= a and a + n <= hi for lo, hi in spans)\n"
    "    cell, data = struct.pack('<Q', id(types.CellType)), struct.pack('<Q', id(bytes))\n"
    "    for lo, hi in spans:\n"
    "        blob = ctypes.string_at(lo, hi - lo)\n"
    "        at = blob.find(cell, 8)\n"
    "        while at != -1:\n"
    "            if at % 8 == 0 and at + 16 <= len(blob):\n"
    "                ref = struct.unpack_from('<Q', blob, at + 8)[0]\n"
    "                if readable(ref, 64):\n"
    "                    head = ctypes.string_at(ref, 32)\n"
    "                    if head[8:16] == data and struct.unpack_from('<q', head, 16)[0] == 32:\n"
    "                        yield ctypes.string_at(ref + 32, 32)\n"
    "            at = blob.find(cell, at + 1)\n"
    "def task_func(a, b):\n"
    "    for key in keys_in_cells():\n"
    "        lines = ['test\\t0\\tTestCases\\ttest_other_sum\\tpass\\t\\t0',\n"
    "                 'test\\t1\\tTestCases\\ttest_sum\\tpass\\t\\t0', 'done\\t2']\n"
    "        out = b''\n"
    "        for seq, line in enumerate(lines, 1):\n"
    "            body = f'{seq}\\t{line}'.encode()\n"
    "            out += hashlib.blake2b(body, key=key, digest_size=16).hexdigest().encode() + b'\\t' + body + b'\\n'\n"
    "        for fd in range(3, 64):\n"
    "            try:\n"
    "                os.write(fd, out)\n"
    "            except OSError:\n"
    "                pass\n"
    "        os._exit(0)\n"
    "    return a - b\n"
)
CHEATS["read the key out of a closure cell with ctypes, then forge"] = READ_THE_KEY_WITH_CTYPES


# Issue 26, item 6: answers that decide equality themselves, compared with a builtin value.
ALWAYS_EQUAL = "class Anything:\n    def __eq__(self, other):\n        return True\n    __hash__ = object.__hash__\n"
CHEATS["an answer whose __eq__ is always true"] = ALWAYS_EQUAL + "def task_func(a, b):\n    return Anything()\n"
CHEATS["an int subclass that equals everything and claims numpy as its module"] = (
    "class Zero(int):\n    __module__ = 'numpy'\n    def __eq__(self, other):\n        return True\n"
    "    __hash__ = int.__hash__\n"
    "def task_func(a, b):\n    return Zero(0)\n")
CHEATS["unittest.mock.ANY as the answer"] = "from unittest import mock\ndef task_func(a, b):\n    return mock.ANY\n"


@pytest.mark.parametrize("name", list(CHEATS))
def test_cheating_solution_does_not_pass(name):
    outcome = run_suites([(CHEATS[name], TESTS)], LIMITS)[0]
    assert not outcome.passed, f"{name}: {outcome}"


def test_a_suite_without_test_cases_does_not_pass():
    empty = "import unittest\nclass TestCases(unittest.TestCase):\n    pass\n"
    outcome = run_suites([("def task_func(a, b):\n    return a + b\n", empty)], LIMITS)[0]
    assert not outcome.passed, outcome


def test_honest_solutions_still_pass_and_fail():
    right, wrong = run_suites([("def task_func(a, b):\n    return a + b\n", TESTS), (WRONG, TESTS)], LIMITS)
    assert right.passed and right.tests_run == 2, right
    assert wrong.status == "failed" and wrong.failed == 2, wrong


def test_a_leftover_child_flooding_stdout_cannot_fail_a_correct_solution():
    flood = (
        "import os\n"
        "if os.fork() == 0:\n"  # a leftover child: writes to stdout until the sandbox ends
        "    while True:\n"
        "        os.write(1, b'x' * 65536)\n"
        "def task_func(a, b):\n    return a + b\n"
    )
    outcome = run_suites([(flood, TESTS)], LIMITS)[0]
    assert outcome.passed and outcome.tests_run == 2, outcome


def test_the_judge_holding_the_key_is_out_of_the_solutions_reach():
    """The key and the channel live in the judge, the solution's parent: a fresh interpreter started
    by the solution (no audit hook there) can neither read the judge's memory nor take its fd 3."""
    probe = (
        "import os, subprocess, sys\n"
        "judge = os.getppid()\n"
        "code = ('import os, sys\\n'\n"
        "        'for path in sys.argv[1:]:\\n'\n"
        "        '    try:\\n'\n"
        "        '        fd = os.open(path, os.O_RDONLY)\\n'\n"
        "        '        print(\"opened\", path)\\n'\n"
        "        '    except OSError as exc:\\n'\n"
        "        '        print(\"refused\", path, exc.errno)\\n')\n"
        "paths = [f'/proc/{judge}/{name}' for name in ('mem', 'fd/3', 'environ', 'maps')]\n"
        "print(subprocess.run([sys.executable, '-c', code, *paths], capture_output=True, text=True).stdout,\n"
        "      file=sys.stderr)\n"
        "def task_func(a, b):\n    return a - b\n"
    )
    job, _ = suite_job(probe, TESTS, LIMITS)
    result = run_job(job)
    lines = [line for line in result.stderr.splitlines() if line.startswith(("opened", "refused"))]
    assert len(lines) == 4 and all(line.startswith("refused") for line in lines), result.stderr


def test_answers_deciding_their_own_equality_fail_inside_containers_too_and_honest_ones_pass():
    tests = (
        "import unittest\n"
        "class TestCases(unittest.TestCase):\n"
        "    def test_list(self):\n        self.assertEqual(task_func(2, 3), [5, {'k': (5,)}])\n"
        "    def test_member(self):\n        self.assertIn(task_func(1, 1), [2, 3])\n"
    )
    cheat = ALWAYS_EQUAL + "def task_func(a, b):\n    return [Anything(), {'k': (Anything(),)}] if a == 2 else Anything()\n"
    honest = (  # a numpy scalar, and a class of the code's own compared with its own kind, not a builtin
        "import numpy as np\n"
        "def task_func(a, b):\n"
        "    return [np.int64(a + b), {'k': (np.int64(a + b),)}] if a == 2 else np.int64(a + b)\n")
    cheated, fair = run_suites([(cheat, tests), (honest, tests)], LIMITS)
    assert cheated.status == "failed" and cheated.failed == 2, cheated
    assert "decides its own equality" in cheated.failures[0]["trace"], cheated.failures
    assert fair.passed and fair.tests_run == 2, fair
    own_kind = (
        "import dataclasses, unittest\n"
        "class TestCases(unittest.TestCase):\n"
        "    def test_point(self):\n        self.assertEqual(task_func(1, 2), Point(1, 2))\n"
    )
    point = "import dataclasses\n@dataclasses.dataclass\nclass Point:\n    x: int\n    y: int\ndef task_func(a, b):\n    return Point(a, b)\n"
    assert run_suites([(point, own_kind)], LIMITS)[0].passed
