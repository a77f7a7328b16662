"""The out-of-process judge (judge.py, crossing.py, judges.py), and the attacker probe's classes of forgery.

Each probe class is a WRONG task_func (it fails every test of SUITE on its own) plus an attack on the
in-process harness, paired with an honest twin that uses the same machinery (gc, signals, threads,
descriptors, frames) harmlessly and must pass. Out of process every forgery fails by construction;
in process they fail too (docs/bigcodebench_judge.md says what the in-process judge still cannot see).
"""
from __future__ import annotations

import collections
import datetime
import decimal
import json
import sys

import pytest

from optimas_cli.sandbox import SandboxLimits
from optimas_pipelines.bigcodebench import crossing, judges
from optimas_pipelines.bigcodebench.execution import run_suites
from optimas_pipelines.bigcodebench.judges import (
    IN_PROCESS,
    JUDGES,
    OUT_OF_PROCESS,
    judge_for,
    static_reason,
    suite_hash,
)
from optimas_pipelines.bigcodebench.metric import pass_rate_metric

np = pytest.importorskip("numpy")
pd = pytest.importorskip("pandas")
linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the sandbox targets Linux")
LIMITS = SandboxLimits(wall_seconds=20, memory_mb=1024, output_bytes=4096)

WRONG = "def task_func(a, b):\n    if type(a) is str:\n        raise ValueError('no strings')\n    return a - b\n"
RIGHT = "def task_func(a, b):\n    return a + b\n"
SUITE = (
    "import unittest, math, os\nimport numpy as np\n"
    "class TestCases(unittest.TestCase):\n"
    "    def test_equal(self):\n        result = task_func(2, 3)\n        self.assertEqual(result, 5)\n"
    "    def test_close(self):\n        self.assertTrue(math.isclose(task_func(1, 1), 2))\n"
    "    def test_np(self):\n        np.testing.assert_array_equal(np.array([task_func(1, 2)]), np.array([3]))\n"
    "    def test_raises(self):\n        with self.assertRaises(TypeError):\n            task_func('a', 1)\n"
    "    def test_expected(self):\n        expected = [3, 7]\n        self.assertEqual([task_func(1, 2), task_func(3, 4)], expected)\n"
)
# From wherever it runs: find the harness checks' frame (its closure holds `record` and the plan), also
# inside a suspended generator (gi_frame), report a pass for every planned test and end the process.
FORGE = (
    "import os, sys, types\n"
    "def _forge_in(frames):\n"
    "    for frame in frames:\n"
    "        while frame is not None:\n"
    "            names = frame.f_locals\n"
    "            if callable(names.get('record')) and isinstance(names.get('state'), dict) and 'tests' in names:\n"
    "                tests, state = names['tests'], names['state']\n"
    "                if state.get('classes') is None:\n"
    "                    names['record']('load', 'ok', '')\n"
    "                for i in range(state['next'], len(tests)):\n"
    "                    names['record']('test', i, tests[i][0], tests[i][1], 'pass', '', 0)\n"
    "                names['record']('done', len(tests))\n"
    "                os._exit(0)\n"
    "            _forge_in([v.gi_frame for v in list(names.values()) if isinstance(v, types.GeneratorType) and v.gi_frame])\n"
    "            frame = frame.f_back\n"
    "def _forge(*_):\n"
    "    _forge_in([sys._getframe()])\n"
)
FORGERIES = {
    "gc.callbacks entry runs inside the hook": (
        FORGE + "import gc\ngc.callbacks.append(_forge)\ngc.set_threshold(5)\n" + WRONG,
        "import gc\ngc.callbacks.append(lambda *a: None)\ngc.set_threshold(5)\n" + RIGHT),
    "__del__ of cyclic garbage runs inside the hook": (
        FORGE + "import gc\n_left = [20000]\nclass Bomb:\n    def __del__(self):\n        _forge()\n        make()\n"
        "def make():\n    if _left[0] > 0:\n        _left[0] -= 1\n        b = Bomb()\n        b.self = b\nfor _ in range(50):\n    make()\ngc.set_threshold(1)\n" + WRONG,
        "import gc\nclass Node:\n    def __del__(self):\n        pass\nn = Node()\nn.self = n\ndel n\ngc.collect()\n" + RIGHT),
    "weakref callback runs inside the hook": (
        FORGE + "import gc, weakref\nclass T:\n    pass\n_refs = []\n"
        "def arm():\n    if len(_refs) < 20000:\n        t = T()\n        t.self = t\n        _refs.append(weakref.ref(t, lambda r: (_forge(), arm())))\n"
        "for _ in range(50):\n    arm()\ngc.set_threshold(1)\n" + WRONG,
        "import weakref\nclass T:\n    pass\nt = T()\nr = weakref.ref(t, lambda r: None)\ndel t\n" + RIGHT),
    "signal handler on an interval timer": (
        FORGE + "import signal\nsignal.signal(signal.SIGALRM, _forge)\nsignal.setitimer(signal.ITIMER_REAL, 0.0005, 0.0005)\n" + WRONG,
        "import signal\nsignal.signal(signal.SIGALRM, lambda *a: None)\nsignal.setitimer(signal.ITIMER_REAL, 0.01)\n" + RIGHT),
    "a thread reading sys._current_frames": (
        "import os, sys, threading\n"
        "def _watch():\n"
        "    while True:\n"
        "        for frame in list(sys._current_frames().values()):\n"
        "            while frame is not None:\n"
        "                names = frame.f_locals\n"
        "                if callable(names.get('record')) and isinstance(names.get('state'), dict) and 'tests' in names:\n"
        "                    tests, state = names['tests'], names['state']\n"
        "                    for i in range(state['next'], len(tests)):\n"
        "                        names['record']('test', i, tests[i][0], tests[i][1], 'pass', '', 0)\n"
        "                    names['record']('done', len(tests))\n"
        "                    os._exit(0)\n"
        "                frame = frame.f_back\n"
        "threading.Thread(target=_watch, daemon=True).start()\n" + WRONG,
        "import sys, threading\nseen = []\n"
        "def work():\n    seen.append(sys._getframe().f_code.co_name)\n"
        "threads = [threading.Thread(target=work) for _ in range(4)]\n"
        "for t in threads:\n    t.start()\nfor t in threads:\n    t.join()\n"
        "assert seen == ['work'] * 4 and len(sys._current_frames()) == 1\n" + RIGHT),
    "the worker's journal address and memmove taken from a frame": (
        "import os, sys\n"
        "def task_func(a, b):\n"
        "    frame = sys._getframe(1)\n"
        "    while frame is not None:\n"
        "        names = frame.f_locals\n"
        "        if 'address' in names and 'memmove' in names and 'plan' in names:\n"
        "            address, memmove, plan = names['address'], names['memmove'], names['plan']\n"
        "            seq = 0\n"
        "            lines = ['load\\tok\\t'] + [f'test\\t{i}\\t{c}\\t{m}\\tpass\\t\\t0' for i, (c, m) in enumerate(plan['tests'])]\n"
        "            lines.append(f\"done\\t{len(plan['tests'])}\")\n"
        "            body = ''.join(f'{i}\\t{line}\\n' for i, line in enumerate(lines)).encode()\n"
        "            memmove(address + 8, body, len(body))\n"
        "            memmove(address, len(body).to_bytes(8, 'little'), 8)\n"
        "            os.write(names['wake'], b'r')\n"
        "            os._exit(0)\n"
        "        frame = frame.f_back\n"
        "    return None if type(a) is str else a - b\n",
        "import sys\ndef task_func(a, b):\n    assert sys._getframe(1) is not None\n    return a + b\n"),
    "expecting_failure set on the running outcome, expectedFailure cleared by a cleanup": (
        "import sys, unittest\n"
        "def task_func(a, b):\n"
        "    frame = sys._getframe(1)\n"
        "    while frame is not None:\n"
        "        test = frame.f_locals.get('self')\n"
        "        if isinstance(test, unittest.TestCase) and test._outcome is not None:\n"
        "            outcome = test._outcome\n"
        "            outcome.expecting_failure = True\n"
        "            test.addCleanup(lambda: setattr(outcome, 'expectedFailure', None))\n"
        "            break\n"
        "        frame = frame.f_back\n"
        "    return None if type(a) is str else a - b\n",
        "import sys, unittest\n"
        "def task_func(a, b):\n"
        "    test = sys._getframe(1).f_locals.get('self')\n"
        "    if isinstance(test, unittest.TestCase):\n        test.addCleanup(lambda: None)\n"
        "    return a + b\n"),
    "the outcome's result replaced by one whose success flips": (
        "import sys, unittest\n"
        "class Flip:\n"
        "    def __init__(self, real):\n        self.real = real\n"
        "    def __getattr__(self, name):\n        return getattr(self.real, name)\n"
        "    def addFailure(self, *a):\n        pass\n"
        "    addError = addFailure\n"
        "    def addSubTest(self, *a):\n        pass\n"
        "def task_func(a, b):\n"
        "    test = sys._getframe(1).f_locals.get('self')\n"
        "    if isinstance(test, unittest.TestCase) and test._outcome is not None:\n"
        "        test._outcome.result = Flip(test._outcome.result)\n"
        "        test._outcome.success = True\n"
        "    return None if type(a) is str else a - b\n",
        "import sys\ndef task_func(a, b):\n    sys._getframe(1)\n    return a + b\n"),
    "assertEqual replaced on the test class by a functools.partial": (
        "import functools, sys, unittest\n"
        "def task_func(a, b):\n"
        "    test = sys._getframe(1).f_locals.get('self')\n"
        "    if isinstance(test, unittest.TestCase):\n"
        "        for name in ('assertEqual', 'assertTrue', 'assertRaises'):\n"
        "            setattr(type(test), name, functools.partial(lambda *a, **k: __import__('contextlib').suppress(Exception)))\n"
        "    return None if type(a) is str else a - b\n",
        "import functools\nadd = functools.partial(lambda a, b: a + b)\ndef task_func(a, b):\n    return add(a, b)\n"),
    "assertEqual replaced on the test class by an object with __get__": (
        "import contextlib, sys, unittest\n"
        "class Lenient:\n"
        "    def __get__(self, obj, cls=None):\n        return lambda *a, **k: contextlib.suppress(Exception)\n"
        "def task_func(a, b):\n"
        "    test = sys._getframe(1).f_locals.get('self')\n"
        "    if isinstance(test, unittest.TestCase):\n"
        "        for name in ('assertEqual', 'assertTrue', 'assertRaises', '_callTestMethod'):\n"
        "            setattr(type(test), name, Lenient())\n"
        "    return None if type(a) is str else a - b\n",
        "class Cached:\n    def __get__(self, obj, cls=None):\n        return 1\n"
        "class Holder:\n    one = Cached()\n"
        "def task_func(a, b):\n    return a + b + Holder().one - 1\n"),
    "_type_equality_funcs pointed at a harmless TestCase method": (
        "import sys, unittest\n"
        "def task_func(a, b):\n"
        "    test = sys._getframe(1).f_locals.get('self')\n"
        "    if isinstance(test, unittest.TestCase):\n"
        "        for kind in (int, list, type(None), float):\n"
        "            test._type_equality_funcs[kind] = 'assertIsNotNone'\n"
        "    return None if type(a) is str else a - b\n",
        "import sys, unittest\n"
        "def task_func(a, b):\n"
        "    test = sys._getframe(1).f_locals.get('self')\n"
        "    assert not isinstance(test, unittest.TestCase) or int in test._type_equality_funcs or True\n"
        "    return a + b\n"),
    "the running test's class swapped": (
        "import contextlib, sys, unittest\n"
        "def task_func(a, b):\n"
        "    test = sys._getframe(1).f_locals.get('self')\n"
        "    if isinstance(test, unittest.TestCase):\n"
        "        class Lenient(type(test)):\n"
        "            def assertEqual(self, *a, **k):\n                pass\n"
        "            assertTrue = assertEqual\n"
        "            def assertRaises(self, *a, **k):\n                return contextlib.suppress(Exception)\n"
        "        test.__class__ = Lenient\n"
        "    return None if type(a) is str else a - b\n",
        "class A:\n    pass\nclass B(A):\n    pass\nobj = A()\nobj.__class__ = B\n" + RIGHT),
    "library check functions rebound (math.isclose, numpy.testing)": (
        "import math, numpy.testing, os.path\n"
        "math.isclose = lambda *a, **k: True\n"
        "numpy.testing.assert_array_equal = lambda *a, **k: None\n"
        "os.path.exists = lambda p: True\n" + WRONG,
        "import math, numpy.testing\nassert math.isclose(1, 1)\nnumpy.testing.assert_array_equal([1], [1])\n" + RIGHT),
    "the tests' imported names rebound (np, math)": (
        "import sys, types\n"
        "def task_func(a, b):\n"
        "    g = sys._getframe(1).f_globals\n"
        "    fake = types.SimpleNamespace(isclose=lambda *a, **k: True)\n"
        "    g['math'] = fake\n"
        "    g['np'] = types.SimpleNamespace(array=lambda x: x, testing=types.SimpleNamespace(assert_array_equal=lambda *a: None))\n"
        "    return None if type(a) is str else a - b\n",
        "import sys\ndef task_func(a, b):\n    assert sys._getframe(0).f_globals['__name__'] == '__test__'\n    return a + b\n"),
    "a test's expected list mutated through the caller's frame": (
        "import sys\n"
        "def task_func(a, b):\n"
        "    frame = sys._getframe(1)\n"
        "    expected = frame.f_locals.get('expected')\n"
        "    if isinstance(expected, list):\n"
        "        expected[:] = [None, None]\n"
        "    return None\n",
        "import sys\ndef task_func(a, b):\n    sys._getframe(1).f_locals.get('expected')\n    return a + b\n"),
    "an exception out of the hook carries its frames (sys.audit('open') with no path)": (
        FORGE + "try:\n    sys.audit('open')\nexcept BaseException as exc:\n    tb = exc.__traceback__\n"
        "    while tb is not None:\n        _forge_in([tb.tb_frame])\n        tb = tb.tb_next\n" + WRONG,
        "import traceback\ntry:\n    open('/no/such/file')\nexcept OSError:\n    assert 'FileNotFoundError' in traceback.format_exc()\n"
        + RIGHT),
    "an event raised at the recursion limit ends the checks in a RecursionError": (
        FORGE + "def _probe(n):\n    if n > 0:\n        return _probe(n - 1)\n"
        "    try:\n        open(os.devnull).close()\n    except BaseException as exc:\n        tb = exc.__traceback__\n"
        "        while tb is not None:\n            _forge_in([tb.tb_frame])\n            tb = tb.tb_next\n"
        "for _n in range(sys.getrecursionlimit() - 80, sys.getrecursionlimit()):\n"
        "    try:\n        _probe(_n)\n    except RecursionError:\n        pass\n" + WRONG,
        "import os, sys\n"
        "def down(n):\n    if n == 0:\n        with open(os.devnull) as fh:\n            return fh.read()\n    return down(n - 1)\n"
        "assert down(sys.getrecursionlimit() - 60) == ''\n" + RIGHT),
    "a signal received by another thread while the checks run": (
        FORGE + "import signal, threading, time\n"
        "threading.Thread(target=lambda: time.sleep(60), daemon=True).start()\n"
        "signal.signal(signal.SIGALRM, _forge)\nsignal.setitimer(signal.ITIMER_REAL, 0.0002, 0.0002)\n"
        "for _ in range(3000):\n    open(__import__('os').devnull).close()\n" + WRONG,
        "import signal, threading, time\nticks = []\n"
        "threading.Thread(target=lambda: time.sleep(60), daemon=True).start()\n"
        "signal.signal(signal.SIGALRM, lambda signum, frame: ticks.append(signum))\n"
        "signal.setitimer(signal.ITIMER_REAL, 0.0002, 0.0002)\n"
        "while len(ticks) < 5:\n    open(__import__('os').devnull).close()\n"
        "signal.setitimer(signal.ITIMER_REAL, 0)\n"
        "assert signal.getsignal(signal.SIGALRM).__name__ == '<lambda>'\n" + RIGHT),
    "a handler installed past signal.signal (a fresh _signal module's own function)": (
        FORGE + "import _imp, importlib.machinery, signal\n"
        "_raw = _imp.create_builtin(importlib.machinery.BuiltinImporter.find_spec('_signal'))\n"
        "_raw.signal(signal.SIGALRM, _forge)\n"
        "signal.setitimer(signal.ITIMER_REAL, 0.0002, 0.0002)\n"
        "for _ in range(3000):\n    open(__import__('os').devnull).close()\n" + WRONG,
        "import _imp, importlib.machinery, signal\nticks = []\n"
        "_raw = _imp.create_builtin(importlib.machinery.BuiltinImporter.find_spec('_signal'))\n"
        "_raw.signal(signal.SIGALRM, lambda *a: ticks.append(1))\n"
        "signal.setitimer(signal.ITIMER_REAL, 0.001)\n"
        "while not ticks:\n    open(__import__('os').devnull).close()\n" + RIGHT),
    "a program the solution starts writes the worker's memory (/proc/<pid>/mem)": (
        # Before any record: the journal is the one anonymous mapping of exactly 1 MiB; a fresh
        # interpreter (no audit hook) writes a passing verdict there, then every descriptor wakes the judge.
        "import os, subprocess, sys\n"
        "_plan = sorted(['test_equal', 'test_close', 'test_np', 'test_raises', 'test_expected'])\n"
        "_lines = ['load\\tok\\t'] + [f'test\\t{i}\\tTestCases\\t{m}\\tpass\\t\\t0' for i, m in enumerate(_plan)] + ['done\\t5']\n"
        "_body = ''.join(f'{i}\\t{line}\\n' for i, line in enumerate(_lines)).encode()\n"
        "with open('/proc/self/maps') as fh:\n"
        "    _spans = [line.split() for line in fh]\n"
        "_at = [int(p[0].split('-')[0], 16) for p in _spans if len(p) == 5 and p[1].startswith('rw')\n"
        "       and int(p[0].split('-')[1], 16) - int(p[0].split('-')[0], 16) == 1 << 20]\n"
        "_child = ('import sys\\npid, body = int(sys.argv[1]), bytes.fromhex(sys.argv[2])\\n'\n"
        "          'with open(f\"/proc/{pid}/mem\", \"r+b\", buffering=0) as mem:\\n'\n"
        "          '    for at in map(int, sys.argv[3:]):\\n'\n"
        "          '        mem.seek(at + 8); mem.write(body); mem.seek(at); mem.write(len(body).to_bytes(8, \"little\"))\\n')\n"
        "if subprocess.run([sys.executable, '-c', _child, str(os.getpid()), _body.hex(), *map(str, _at)]).returncode == 0:\n"
        "    for fd in range(3, 40):\n"
        "        try:\n            os.write(fd, b'r')\n        except OSError:\n            pass\n"
        "    os._exit(0)\n" + WRONG,
        "import os, subprocess, sys\n"
        "def task_func(a, b):\n"
        "    out = subprocess.run([sys.executable, '-c', 'import os; print(os.getppid())'], capture_output=True, text=True)\n"
        "    assert int(out.stdout) == os.getpid()\n"
        "    return a + b\n"),
}
# An object that says it equals anything, against expected values that are not plain builtins.
EQ_SUITE = (
    "import unittest, datetime\nfrom collections import Counter, OrderedDict\nfrom decimal import Decimal\nimport numpy as np\n"
    "class TestCases(unittest.TestCase):\n"
    "    def test_counter(self):\n        self.assertEqual(task_func('counter'), Counter('abca'))\n"
    "    def test_ordered(self):\n        self.assertEqual(task_func('ordered'), OrderedDict(a=1))\n"
    "    def test_decimal(self):\n        self.assertEqual(task_func('decimal'), Decimal('1.5'))\n"
    "    def test_date(self):\n        self.assertEqual(task_func('date'), datetime.date(2020, 1, 1))\n"
    "    def test_int64(self):\n        self.assertEqual(task_func('int64'), np.int64(5))\n"
)
EQ_RIGHT = (
    "import datetime\nfrom collections import Counter, OrderedDict\nfrom decimal import Decimal\nimport numpy as np\n"
    "def task_func(kind):\n"
    "    return {'counter': Counter('abca'), 'ordered': OrderedDict(a=1), 'decimal': Decimal('1.5'),\n"
    "            'date': datetime.date(2020, 1, 1), 'int64': np.int64(5)}[kind]\n")
EQ_WRONG = (
    "class Anything:\n"
    "    def __eq__(self, other):\n        return True\n"
    "    def __ne__(self, other):\n        return False\n"
    "    __hash__ = object.__hash__\n"
    "def task_func(kind):\n    return Anything()\n")
# Frames reached from code the test's own frame runs (the tests call task_func in a thread of its own):
# a returned generator, a returned object's __iter__ (inspect.stack), a signal handler. Each forgery
# empties the test's `expected` and returns what then equals it.
FRAME_SUITE = (
    "import unittest\n"
    "class TestCases(unittest.TestCase):\n"
    "    def test_items(self):\n        expected = [3, 7]\n        self.assertEqual(list(task_func(1, 2)), expected)\n"
    "    def test_sum(self):\n        expected = [3]\n        self.assertEqual([sum(task_func(1, 2)) - 7], expected)\n"
)
EMPTY_EXPECTED = (
    "def _empty(frame):\n"
    "    while frame is not None:\n"
    "        expected = frame.f_locals.get('expected')\n"
    "        if isinstance(expected, list):\n            expected[:] = [3, 7] if len(expected) == 2 else [-7]\n"
    "        frame = frame.f_back\n"
)
FRAME_FORGERIES = {
    "a returned generator changes the test's expected through its caller's frame": (
        "import sys\n" + EMPTY_EXPECTED
        + "def task_func(a, b):\n    def items():\n        _empty(sys._getframe(1))\n        yield 3\n        yield 7\n"
        "    return items()\n",
        "import logging, sys\n"
        "def task_func(a, b):\n"
        "    logging.getLogger('honest').warning('adding %s and %s', a, b)\n"  # logging takes frames: in its thread
        "    assert sys._getframe(1) is not None\n"
        "    def items():\n        yield a + b\n        yield a + b + 4\n    return items()\n"),
    "a returned object's __iter__ walks inspect.stack() to the test": (
        "import inspect\n" + EMPTY_EXPECTED
        + "class Items:\n    def __iter__(self):\n        _empty(inspect.stack()[1].frame)\n        return iter([3, 7])\n"
        "def task_func(a, b):\n    return Items()\n",
        "import inspect\n"
        "class Items:\n    def __init__(self, a, b):\n        self.values = [a + b, a + b + 4]\n"
        "    def __iter__(self):\n        return iter(self.values)\n"
        "def task_func(a, b):\n    assert inspect.stack()[0].function == 'task_func'\n    return Items(a, b)\n"),
    "a signal handler reaches the waiting test's frame": (
        "import signal, sys, time\n" + EMPTY_EXPECTED
        + "signal.signal(signal.SIGALRM, lambda signum, frame: _empty(frame or sys._getframe()))\n"
        "def task_func(a, b):\n    signal.setitimer(signal.ITIMER_REAL, 0.01)\n    time.sleep(0.3)\n    return [0]\n",
        "import signal, time\nticks = []\n"
        "signal.signal(signal.SIGALRM, lambda signum, frame: ticks.append(signum))\n"
        "def task_func(a, b):\n    signal.setitimer(signal.ITIMER_REAL, 0.01)\n"
        "    while len(ticks) < 1:\n        time.sleep(0.01)\n    ticks.clear()\n    return [a + b, a + b + 4]\n"),
}
# A generator or an object of the solution's class cannot cross by value: such a task is judged in process.
RETURNS_UNCROSSABLE = {"a returned generator changes the test's expected through its caller's frame",
                       "a returned object's __iter__ walks inspect.stack() to the test"}


@linux
@pytest.mark.parametrize("judge", JUDGES)
def test_probe_forgeries_fail_and_their_honest_twins_pass(judge):
    cases = [*((name, *pair, SUITE) for name, pair in FORGERIES.items()),
             ("an __eq__ that is always true against Counter, OrderedDict, Decimal, date, np.int64", EQ_WRONG, EQ_RIGHT,
              EQ_SUITE), *((name, *pair, FRAME_SUITE) for name, pair in FRAME_FORGERIES.items())]
    pairs = [(code, suite) for _, forged, honest, suite in cases for code in (forged, honest)]
    outcomes = run_suites(pairs, LIMITS, workers=2, judges=[judge] * len(pairs))
    problems = []
    for i, (name, *_rest) in enumerate(cases):
        forged, honest = outcomes[2 * i], outcomes[2 * i + 1]
        assert forged.judge == honest.judge == judge
        if not honest.passed and not (judge == OUT_OF_PROCESS and name in RETURNS_UNCROSSABLE):
            problems.append(f"{name}: the honest twin did not pass: {honest}")
        if forged.passed or forged.failed < forged.tests_run:
            problems.append(f"{name}: a forged test passed: {forged}")
    assert not problems, "\n".join(problems)


# What the tests' threaded calls keep as it was: the solution's calls of its own functions stay direct
# (recursion as deep as before), a test's sqlite3 connection and context variables reach task_func.
THREAD_SUITE = (
    "import decimal, sqlite3, sys, threading, unittest\n"
    "class TestCases(unittest.TestCase):\n"
    "    def setUp(self):\n        self.conn = sqlite3.connect(':memory:')\n"
    "        self.conn.execute('CREATE TABLE t (x INTEGER)')\n        self.conn.execute('INSERT INTO t VALUES (41)')\n"
    "    def test_thread(self):\n        self.assertFalse(task_func('main'))\n"
    "        self.assertTrue(threading.current_thread() is threading.main_thread())\n"
    "    def test_sqlite(self):\n        self.assertEqual(task_func('sqlite', self.conn), 41)\n"
    "    def test_context(self):\n        with decimal.localcontext() as ctx:\n            ctx.prec = 3\n"
    "            self.assertEqual(task_func('decimal'), decimal.Decimal('0.333'))\n"
    "    def test_recursion(self):\n        self.assertEqual(task_func('depth', sys.getrecursionlimit() - 80), 0)\n"
)
THREAD_CODE = (
    "import decimal, threading\n"
    "def down(n):\n    return 0 if n == 0 else down(n - 1)\n"
    "def task_func(kind, arg=None):\n"
    "    if kind == 'main':\n        return threading.current_thread() is threading.main_thread()\n"
    "    if kind == 'sqlite':\n        return arg.execute('SELECT x + 0 FROM t').fetchone()[0]\n"
    "    if kind == 'decimal':\n        return decimal.Decimal(1) / decimal.Decimal(3)\n"
    "    return down(arg)\n"
)


@linux
def test_the_tests_call_the_solution_in_a_thread_of_its_own_and_nothing_else_changes():
    (outcome,) = run_suites([(THREAD_CODE, THREAD_SUITE)], LIMITS, workers=1, judges=[IN_PROCESS])
    assert outcome.passed and outcome.tests_run == 4, outcome


@linux
def test_a_failure_trace_goes_from_the_test_to_the_solution_without_the_judges_frames():
    """The trace is what the code's author reads (the generator's feedback): the judge's own frames between
    the test and the solution (the thread a call runs in, the call across processes) are left out."""
    code = "def helper(a):\n    raise ValueError('no strings')\ndef task_func(a, b):\n    return helper(a)\n"
    suite = ("import unittest\nclass TestCases(unittest.TestCase):\n"
             "    def test_one(self):\n        self.assertEqual(task_func(1, 2), 3)\n")
    for judge in JUDGES:
        (outcome,) = run_suites([(code, suite)], LIMITS, workers=1, judges=[judge])
        trace = outcome.failures[0]["trace"]
        assert 'in test_one' in trace and 'in task_func' in trace and 'in helper' in trace, (judge, trace)
        assert 'File "main.py"' not in trace, (judge, trace)


FIDELITY_CODE = (
    "import os, random, warnings\nimport numpy as np\nLIMIT = 3\n"
    "def task_func(kind, arg=None):\n"
    "    if kind == 'rng':\n        return [random.random(), float(np.random.rand())]\n"
    "    if kind == 'env':\n        os.environ['SET_BY_CODE'] = '1'\n        return os.environ.get('FROM_TEST')\n"
    "    if kind == 'cwd':\n        return os.getcwd()\n"
    "    if kind == 'print':\n        print('hello')\n        return None\n"
    "    if kind == 'file':\n        with open('out.txt', 'w') as fh:\n            fh.write('x')\n        return os.path.abspath('out.txt')\n"
    "    if kind == 'mutate':\n        arg.append(4)\n        return None\n"
    "    if kind == 'frame':\n        arg['b'] = arg['a'] * 2\n        return arg\n"
    "    if kind == 'raise':\n        raise FileNotFoundError(2, 'nope')\n"
    "    if kind == 'warn':\n        warnings.warn('careful', DeprecationWarning)\n        return 1\n"
    "    if kind == 'gen':\n        return (i for i in range(3))\n"
    "    os._exit(3)\n"
)
FIDELITY_TESTS = (
    "import contextlib, io, os, random, tempfile, unittest\nimport numpy as np\nimport pandas as pd\n"
    "class TestCases(unittest.TestCase):\n"
    "    def test_a_random_states_cross_both_ways(self):\n"
    "        random.seed(1)\n        np.random.seed(1)\n        first = task_func('rng')\n        after = random.random()\n"
    "        random.seed(1)\n        np.random.seed(1)\n        self.assertEqual(first, [random.random(), float(np.random.rand())])\n"
    "        self.assertEqual(after, random.random())\n"
    "    def test_b_environment_and_folder(self):\n"
    "        os.environ['FROM_TEST'] = 'x'\n        self.assertEqual(task_func('env'), 'x')\n"
    "        self.assertEqual(os.environ.get('SET_BY_CODE'), '1')\n"
    "        old = os.getcwd()\n"
    "        with tempfile.TemporaryDirectory() as folder:\n"
    "            os.chdir(folder)\n            try:\n                self.assertEqual(task_func('cwd'), os.getcwd())\n"
    "            finally:\n                os.chdir(old)\n"
    "    def test_c_redirected_stdout(self):\n"
    "        buffer = io.StringIO()\n        with contextlib.redirect_stdout(buffer):\n            task_func('print')\n"
    "        self.assertEqual(buffer.getvalue(), 'hello\\n')\n"
    "    def test_d_files(self):\n        with open(task_func('file')) as fh:\n            self.assertEqual(fh.read(), 'x')\n"
    "    def test_e_changed_in_place(self):\n"
    "        items = [1, 2, 3]\n        task_func('mutate', items)\n        self.assertEqual(items, [1, 2, 3, 4])\n"
    "        frame = pd.DataFrame({'a': [1, 2]})\n        out = task_func('frame', frame)\n"
    "        self.assertEqual(list(frame.columns), ['a', 'b'])\n        pd.testing.assert_frame_equal(out, frame)\n"
    "    def test_f_library_exception(self):\n"
    "        with self.assertRaises(FileNotFoundError) as caught:\n            task_func('raise')\n"
    "        self.assertEqual(caught.exception.errno, 2)\n"
    "    def test_g_warning(self):\n        with self.assertWarns(DeprecationWarning):\n            task_func('warn')\n"
    "    def test_h_the_solutions_constants(self):\n        self.assertEqual(LIMIT, 3)\n"
    "    def test_i_a_generator_cannot_cross(self):\n        self.assertEqual(list(task_func('gen')), [0, 1, 2])\n"
    "    def test_j_the_solution_ends_its_process(self):\n        task_func('exit')\n"
)


@linux
def test_out_of_process_calls_share_state_files_output_and_in_place_changes_by_value():
    (outcome,) = run_suites([(FIDELITY_CODE, FIDELITY_TESTS)], LIMITS, judges=[OUT_OF_PROCESS])
    assert outcome.judge == OUT_OF_PROCESS and outcome.tests_run == 10, outcome
    kinds = {f["test"]: f["kind"] for f in outcome.failures}
    assert kinds == {"test_i_a_generator_cannot_cross": "uncrossable", "test_j_the_solution_ends_its_process": "error"}, outcome
    assert "ended" in outcome.failures[-1]["trace"], outcome.failures[-1]


ROUND_TRIP = [
    None, True, -5, 2 ** 70, 1.5, -0.0, 1 + 2j, "t\u00e9xt", b"\x00b", bytearray(b"ab"), [1, (2, 3), {4}], {"a": 1, 2: [3]},
    frozenset({1}), range(1, 9, 2), collections.OrderedDict(a=1), collections.Counter("abca"),
    collections.defaultdict(list, {"x": [1]}), collections.deque([1, 2], 5), decimal.Decimal("1.10"),
    datetime.datetime(2020, 1, 2, 3, 4, 5, 6), datetime.date(2020, 1, 1), datetime.timedelta(days=-1, seconds=5),
    datetime.datetime(2020, 3, 1, tzinfo=datetime.UTC), int, ValueError,
]


@pytest.mark.parametrize("value", ROUND_TRIP, ids=lambda v: type(v).__name__)
def test_builtin_and_standard_values_cross_exactly(value):
    back = crossing.loads(crossing.dumps(value))
    assert type(back) is type(value) and back == value and repr(back) == repr(value)


def test_numpy_and_pandas_values_cross_exactly():
    frame = pd.DataFrame({"a": [1, 2], "b": ["x", None], "c": [1.5, np.nan],
                          "d": pd.to_datetime(["2020-01-01", "2021-01-01"]),
                          "cat": pd.Categorical(["u", "v"], categories=["v", "u", "w"])},
                         index=pd.Index(["r", "r"], name="k"))
    pd.testing.assert_frame_equal(crossing.loads(crossing.dumps(frame)), frame, check_exact=True)
    series = pd.Series([1.0, 2.0], name="s", index=pd.date_range("2020", periods=2, freq="D"))
    pd.testing.assert_series_equal(crossing.loads(crossing.dumps(series)), series, check_exact=True, check_freq=True)
    for value in (np.arange(6).reshape(2, 3), np.array(["a", "bc"]), np.array([None, 1], dtype=object)):
        back = crossing.loads(crossing.dumps(value))
        assert back.dtype == value.dtype and back.shape == value.shape and (back == value).all()
    for value in (np.int64(3), np.float32(1.5), np.bool_(True), pd.Timestamp("2020-01-01 05:00", tz="UTC")):
        back = crossing.loads(crossing.dumps(value))
        assert type(back) is type(value) and back == value


def test_what_cannot_cross_is_refused_and_decoding_builds_data_only():
    looped: list = []
    looped.append(looped)

    class Anything:
        def __eq__(self, other):
            return True

    for value in ((i for i in range(2)), lambda: 1, Anything(), looped):
        with pytest.raises(crossing.Uncrossable):
            crossing.dumps(value)
    # A list subclass crosses as a plain list, without the __eq__ it carried.
    assert type(crossing.loads(crossing.dumps(type("Lenient", (list,), {"__eq__": lambda s, o: True})([1])))) is list
    for sent in ('["ref", "os", "system"]', '["ref", "__main__", "x"]', '["ndarray", "|V8", [1], ""]',
                 '{"a": 1}', '["Generator", "Foo", 1]', '["nope"]'):
        with pytest.raises(crossing.Uncrossable):
            crossing.loads(sent)  # the judge takes classes by name, never a function (os.system)


def test_the_task_not_the_candidate_picks_the_judge(monkeypatch):
    plain = "import unittest\nclass T(unittest.TestCase):\n    def test(self):\n        self.assertEqual(task_func(), 1)\n"
    mocked = plain.replace("import unittest", "import unittest\nfrom unittest.mock import patch")
    assert judge_for(plain) == IN_PROCESS  # never verified: generated tests, a changed task
    monkeypatch.setattr(judges, "verified", lambda: frozenset({suite_hash(plain), suite_hash(mocked)}))
    assert judge_for(plain) == OUT_OF_PROCESS
    assert static_reason(mocked) and judge_for(mocked) == IN_PROCESS
    table = json.loads(judges.VERIFIED.read_text())["tests_sha256"]
    assert all(len(h) == 16 for h in table.values())


@linux
def test_the_metric_counts_verdicts_per_judge():
    counts: dict[str, int] = {}
    metric = pass_rate_metric(LIMITS, workers=1, judges=counts)
    assert metric.many([{"test": EQ_SUITE}], [{"code": EQ_RIGHT}]) == [1.0]
    assert counts == {OUT_OF_PROCESS: 0, IN_PROCESS: 1}


@linux
def test_real_tasks_are_judged_out_of_process_and_a_wrong_answer_fails_there():
    data = pytest.importorskip("optimas_pipelines.bigcodebench.data")
    try:
        tasks = {t["task_id"]: t for t in data.load_tasks()}
    except Exception:  # noqa: BLE001 - no local data and no hub: nothing real to check
        pytest.skip("BigCodeBench data not available (OPTIMAS_DATA_DIR)")
    table = json.loads(judges.VERIFIED.read_text())["tests_sha256"]
    chosen = [tasks[i] for i in ("BigCodeBench/3", "BigCodeBench/8", "BigCodeBench/11") if i in table and i in tasks]
    if not chosen or any(data.task_missing_libs(t) for t in chosen):
        pytest.skip("the chosen tasks are not verified or not runnable here")
    pairs = [(t["code_prompt"] + body, t["test"]) for t in chosen
             for body in (t["canonical_solution"], "\n    return None\n")]
    outcomes = run_suites(pairs, SandboxLimits(wall_seconds=60, memory_mb=2048), workers=2)
    for task, right, wrong in zip(chosen, outcomes[::2], outcomes[1::2], strict=True):
        assert right.judge == wrong.judge == OUT_OF_PROCESS, task["task_id"]
        assert right.passed, (task["task_id"], right)
        assert not wrong.passed and wrong.failed >= 1, (task["task_id"], wrong)


# The probe's classes whose attack runs as the code loads, closed in process: on real tasks judged there.
CLOSED_ON_LOAD = ("signal handler on an interval timer", "a thread reading sys._current_frames",
                  "an exception out of the hook carries its frames (sys.audit('open') with no path)",
                  "an event raised at the recursion limit ends the checks in a RecursionError",
                  "a signal received by another thread while the checks run",
                  "a handler installed past signal.signal (a fresh _signal module's own function)")


@linux
def test_real_in_process_tasks_refuse_the_probes_forgeries_and_pass_their_honest_twins():
    data = pytest.importorskip("optimas_pipelines.bigcodebench.data")
    try:
        tasks = {t["task_id"]: t for t in data.load_tasks()}
    except Exception:  # noqa: BLE001 - no local data and no hub: nothing real to check
        pytest.skip("BigCodeBench data not available (OPTIMAS_DATA_DIR)")
    chosen = [tasks[i] for i in ("BigCodeBench/12", "BigCodeBench/16") if i in tasks]  # one mocks, one uses files
    if not chosen or any(data.task_missing_libs(t) or judge_for(t["test"]) != IN_PROCESS for t in chosen):
        pytest.skip("the chosen tasks are not runnable or not judged in process here")
    pairs = []
    for task in chosen:
        wrong, right = task["code_prompt"] + "\n    return None\n", task["code_prompt"] + task["canonical_solution"]
        pairs.append((wrong, task["test"]))
        for name in CLOSED_ON_LOAD:
            forged, honest = FORGERIES[name]
            assert forged.endswith(WRONG) and honest.endswith(RIGHT), name
            pairs += [(forged[:-len(WRONG)] + wrong, task["test"]), (honest[:-len(RIGHT)] + right, task["test"])]
    outcomes = run_suites(pairs, SandboxLimits(wall_seconds=60, memory_mb=2048), workers=2)
    problems, per_task = [], 1 + 2 * len(CLOSED_ON_LOAD)
    for k, task in enumerate(chosen):
        plain, *rest = outcomes[k * per_task:(k + 1) * per_task]
        assert plain.judge == IN_PROCESS and not plain.passed, (task["task_id"], plain)
        for name, forged, honest in zip(CLOSED_ON_LOAD, rest[::2], rest[1::2], strict=True):
            if forged.passed or (forged.tests_run and forged.failed < plain.failed):
                problems.append(f"{task['task_id']} {name}: a forged test passed: {forged}")
            if not honest.passed:
                problems.append(f"{task['task_id']} {name}: the honest twin did not pass: {honest}")
    assert not problems, "\n".join(problems)
