"""Forged verdicts (issue 47): each technique is a WRONG task_func that tries to pass anyway, paired with
an honest RIGHT solution that uses the same machinery harmlessly and must still pass.

The wrong function fails all four tests below on its own (tests/test_sandbox_adversarial.py holds the
older cheats; this file covers the interpreter's hooks, builtins, unittest's internals and the tests'
own code). A forgery and its twin run side by side, each in its own sandbox.
"""
from __future__ import annotations

import sys

import pytest

from optimas_cli.sandbox import SandboxLimits
from optimas_pipelines.bigcodebench.execution import run_suites

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the sandbox targets Linux")

LIMITS = SandboxLimits(wall_seconds=20, memory_mb=1024, output_bytes=4096)
RIGHT = "def task_func(a, b):\n    return a + b\n"
WRONG = "def task_func(a, b):\n    if type(a) is str:\n        raise ValueError('no strings')\n    return a - b\n"
SUITE = (
    "import unittest\n"
    "class TestCases(unittest.TestCase):\n"
    "    def test_equal(self):\n        result = task_func(2, 3)\n        self.assertEqual(result, 5)\n"
    "    def test_true(self):\n        self.assertTrue(abs(task_func(1, 1) - 2) < 1e-9)\n"
    "    def test_raises(self):\n        with self.assertRaises(TypeError):\n            task_func('a', 1)\n"
    "    def test_sub(self):\n"
    "        for a, b in ((1, 2), (3, 4)):\n"
    "            with self.subTest(a=a):\n                self.assertEqual(task_func(a, b), a + b)\n"
)

# The issue's first forgery: a trace function rewrites the assertions' locals, which Python writes back.
REWRITE_LOCALS = (
    "def _rewrite(frame, event, arg):\n"
    "    name, names = frame.f_code.co_name, frame.f_locals\n"
    "    if event == 'call' and name == 'assertEqual':\n"
    "        names['first'] = names['second']\n"
    "    elif event == 'call' and name == 'assertTrue':\n"
    "        names['expr'] = True\n"
    "    elif event == 'call' and name == '__exit__' and 'exc_type' in names:\n"
    "        names['exc_type'] = names['self'].expected\n"
    "    return None\n"
)
# The issue's second forgery: class creation wrapped so that the tests' methods become no-ops.
NO_OP_TESTS = (
    "import builtins\n"
    "_build = builtins.__build_class__\n"
    "def _lenient(func, name, *bases, **kw):\n"
    "    cls = _build(func, name, *bases, **kw)\n"
    "    if name.startswith('Test'):\n"
    "        for attr in list(vars(cls)):\n"
    "            if attr.startswith('test'):\n"
    "                setattr(cls, attr, lambda self: None)\n"
    "    return cls\n"
)
FIND_TEST = (
    "import sys, unittest\n"
    "def running_test():\n"
    "    frame = sys._getframe(1)\n"
    "    while frame is not None:\n"
    "        if isinstance(frame.f_locals.get('self'), unittest.TestCase):\n"
    "            return frame.f_locals['self'], frame\n"
    "        frame = frame.f_back\n"
)

# name -> (wrong solution that forges, right solution that uses the same machinery honestly)
FORGERIES = {
    "sys.settrace rewrites assertion locals": (
        "import sys\n" + REWRITE_LOCALS + "sys.settrace(_rewrite)\n" + WRONG,
        "import sys\n" + REWRITE_LOCALS + "assert sys.gettrace() is None\n" + RIGHT),
    "sys.setprofile rewrites assertion locals": (
        "import sys\n" + REWRITE_LOCALS + "sys.setprofile(_rewrite)\n" + WRONG,
        "import sys\n" + REWRITE_LOCALS + "assert sys.getprofile() is None\n" + RIGHT),
    "threading.settrace for the threads the tests start": (
        "import threading\n" + REWRITE_LOCALS + "threading.settrace(_rewrite)\n"
        "threading.Thread(target=lambda: None).start()\n" + WRONG,
        "import threading\nthreading.Thread(target=lambda: None).start()\n" + RIGHT),
    "threading.setprofile, never triggered": (
        "import threading\n" + REWRITE_LOCALS + "threading.setprofile(_rewrite)\n" + WRONG,
        "import threading\n" + RIGHT),
    "a trace function set from inside task_func": (
        "import sys\n" + REWRITE_LOCALS + "_set = []\n"
        "def task_func(a, b):\n"
        "    if not _set:\n        _set.append(sys.settrace(_rewrite))\n"
        "    return None if type(a) is str else a - b\n",
        "import sys\ndef task_func(a, b):\n    sys.gettrace()\n    return a + b\n"),
    "builtins.__build_class__ makes test methods no-ops": (
        NO_OP_TESTS + "builtins.__build_class__ = _lenient\n" + WRONG,
        NO_OP_TESTS + RIGHT),
    "__build_class__ wrapper that puts itself back after the test class": (
        NO_OP_TESTS.replace("    return cls\n", "    builtins.__build_class__ = _build\n    return cls\n")
        + "builtins.__build_class__ = _lenient\n" + WRONG,
        NO_OP_TESTS + "class Helper:\n    pass\n" + RIGHT),
    "module-level __builtins__ swapped for the tests' class body": (
        NO_OP_TESTS + "__builtins__ = {**vars(builtins), '__build_class__': _lenient}\n" + WRONG,
        NO_OP_TESTS + "assert __builtins__ is vars(builtins) or __builtins__ is builtins\n" + RIGHT),
    "a global shadowing the builtin abs the tests call": (
        "def abs(x):\n    return 0\n" + WRONG,
        "def absolute(x):\n    return x if x >= 0 else -x\n" + RIGHT),
    "builtins.issubclass always true (assertRaises accepts any exception)": (
        "import builtins\nbuiltins.issubclass = lambda *args: True\n" + WRONG,
        "import builtins\nassert builtins.issubclass(bool, int)\n" + RIGHT),
    "builtins.__import__ hands the tests a lenient unittest": (
        "import builtins, types, unittest\n"
        "_lenient = types.ModuleType('unittest')\n"
        "class _Case(unittest.TestCase):\n"
        "    def assertEqual(self, *a, **k):\n        pass\n"
        "    assertTrue = assertEqual\n"
        "    def assertRaises(self, *a, **k):\n        import contextlib\n        return contextlib.suppress(Exception)\n"
        "_lenient.TestCase = _Case\n"
        "_import = builtins.__import__\n"
        "builtins.__import__ = lambda name, *a, **k: _lenient if name == 'unittest' else _import(name, *a, **k)\n"
        + WRONG,
        "import builtins, importlib\nassert builtins.__import__('unittest') is importlib.import_module('unittest')\n" + RIGHT),
    "sys.modules['unittest'] swapped for a lenient module": (
        "import sys, types, unittest\n"
        "_lenient = types.ModuleType('unittest')\n"
        "class _Case(unittest.TestCase):\n"
        "    def assertEqual(self, *a, **k):\n        pass\n"
        "    assertTrue = assertEqual\n"
        "_lenient.TestCase = _Case\n"
        "sys.modules['unittest'] = _lenient\n" + WRONG,
        "import sys, unittest\nassert sys.modules['unittest'] is unittest\n" + RIGHT),
    "unittest.TestCase.assertTrue monkeypatched": (
        "import unittest\nunittest.TestCase.assertTrue = lambda self, expr, msg=None: None\n" + WRONG,
        "import unittest\nclass Mine(unittest.TestCase):\n    def assertTrue(self, expr, msg=None):\n        pass\n" + RIGHT),
    "a no-op assertEqual that puts the original back when it is called": (
        "import unittest\n"
        "_original = unittest.TestCase.assertEqual\n"
        "def _once(self, *args, **kwargs):\n"
        "    unittest.TestCase.assertEqual = _original\n"
        "def task_func(a, b):\n"
        "    if (a, b) == (2, 3):  # test_equal, which looks assertEqual up after calling task_func\n"
        "        unittest.TestCase.assertEqual = _once\n"
        "    return None if type(a) is str else a - b\n",
        "import unittest\n_original = unittest.TestCase.assertEqual\n"
        "def task_func(a, b):\n    unittest.TestCase.assertEqual = _original\n    return a + b\n"),
    "unittest.TestResult.addFailure replaced on the harness's result class": (
        FIND_TEST + "def task_func(a, b):\n"
        "    frame = sys._getframe(1)\n"
        "    while frame is not None:\n"
        "        result = frame.f_locals.get('result')\n"
        "        if isinstance(result, unittest.TestResult):\n"
        "            for name in ('addFailure', 'addError', 'addSubTest'):\n"
        "                setattr(type(result), name, lambda *a, **k: None)\n"
        "        frame = frame.f_back\n"
        "    return None if type(a) is str else a - b\n",
        "import unittest\nassert unittest.TestResult.addFailure.__name__ == 'addFailure'\n" + RIGHT),
    "unittest.case module function _addError reports a success instead": (
        "import unittest.case\n"
        "unittest.case._addError = lambda result, test, exc_info: result.addSuccess(test)\n" + WRONG,
        "import unittest.case\nassert callable(unittest.case._addError)\n" + RIGHT),
    "unittest.TestLoader and runner classes patched to hide the tests": (
        "import unittest\n"
        "unittest.TestLoader.getTestCaseNames = lambda self, cls: []\n"
        "unittest.TextTestRunner.run = lambda self, test: unittest.TestResult()\n" + WRONG,
        "import unittest\nassert unittest.TestLoader().getTestCaseNames(unittest.TestCase) == []\n" + RIGHT),
    "unittest's internal _ShouldStop ends the test silently": (
        "import unittest.case\ndef task_func(a, b):\n    raise unittest.case._ShouldStop()\n",
        "import unittest.case\nassert issubclass(unittest.case._ShouldStop, Exception)\n" + RIGHT),
    "an AssertionError that is also unittest's _ShouldStop": (
        "import unittest.case\n"
        "class Oops(AssertionError, unittest.case._ShouldStop):\n    pass\n"
        "def task_func(a, b):\n    raise Oops('wrong')\n",
        "class Oops(AssertionError):\n    pass\n"
        "def task_func(a, b):\n    try:\n        raise Oops('inside')\n    except Oops:\n        return a + b\n"),
    "an AssertionError that is also SkipTest": (
        "import unittest\n"
        "class Oops(AssertionError, unittest.SkipTest):\n    pass\n"
        "def task_func(a, b):\n    raise Oops('wrong')\n",
        "import unittest\n"
        "class Oops(AssertionError, unittest.SkipTest):\n    pass\n"
        "def task_func(a, b):\n    try:\n        raise Oops('inside')\n    except Oops:\n        return a + b\n"),
    "an AssertionError whose str() raises": (
        "class Oops(AssertionError):\n    def __str__(self):\n        raise RuntimeError('no')\n"
        "def task_func(a, b):\n    raise Oops()\n",
        "class Oops(AssertionError):\n    def __str__(self):\n        raise RuntimeError('no')\n" + RIGHT),
    "SystemExit(0) at import": (
        "import sys\nsys.exit(0)\n" + WRONG,
        "import sys\ntry:\n    sys.exit(0)\nexcept SystemExit:\n    pass\n" + RIGHT),
    "KeyboardInterrupt raised by task_func": (
        "def task_func(a, b):\n    raise KeyboardInterrupt\n",
        "def task_func(a, b):\n    try:\n        raise KeyboardInterrupt\n    except KeyboardInterrupt:\n        return a + b\n"),
    "atexit handler and exit before the tests": (
        "import atexit, os\natexit.register(lambda: os.write(1, b'OK'))\nraise SystemExit(0)\n" + WRONG,
        "import atexit\natexit.register(lambda: None)\n" + RIGHT),
    "__del__ reports a success for the running test": (
        FIND_TEST + "class Ghost:\n"
        "    def __del__(self):\n"
        "        test, frame = running_test()\n"
        "        sys.audit('optimas.outcome', 'success', test, '')\n"
        "def task_func(a, b):\n    Ghost()\n    return None if type(a) is str else a - b\n",
        "class Ghost:\n    def __del__(self):\n        pass\n"
        "def task_func(a, b):\n    Ghost()\n    return a + b\n"),
    "frames of every thread: shrink the harness's plan of tests": (
        "import sys\n"
        "def task_func(a, b):\n"
        "    for frame in sys._current_frames().values():\n"
        "        while frame is not None:\n"
        "            plan = frame.f_locals.get('plan')\n"
        "            if isinstance(plan, dict) and 'tests' in plan:\n"
        "                del plan['tests'][1:]\n"
        "            classes = frame.f_locals.get('classes')\n"
        "            if isinstance(classes, dict):\n"
        "                classes.clear()\n"
        "            frame = frame.f_back\n"
        "    return None if type(a) is str else a - b\n",
        # (as the code loads: the tests call task_func in a thread of its own, while the main thread waits)
        "import sys\nassert sys._current_frames()\ndef task_func(a, b):\n    return a + b\n"),
    "gc-reachable frames: find the assertion's frame and rewrite it": (
        "import gc, types\n"
        "def task_func(a, b):\n"
        "    for obj in gc.get_objects():\n"
        "        if isinstance(obj, types.FrameType) and obj.f_code.co_name.startswith('test'):\n"
        "            obj.f_locals.clear()\n"
        "    return None if type(a) is str else a - b\n",
        "import gc\ndef task_func(a, b):\n    gc.collect()\n    return a + b\n"),
    # test_sub computes its expected value after task_func returns: rewriting the test's `b` would pass it.
    "f_locals written through f_back (no trace function)": (
        "import sys\n"
        "def task_func(a, b):\n"
        "    sys._getframe(1).f_locals['b'] = -b\n"
        "    return None if type(a) is str else a - b\n",
        "import sys\ndef task_func(a, b):\n    assert 'func' in sys._getframe(1).f_locals\n    return a + b\n"),
    "f_locals written back with ctypes' PyFrame_LocalsToFast": (
        "import ctypes, sys\n"
        "def task_func(a, b):\n"
        "    caller = sys._getframe(1)\n"
        "    caller.f_locals['b'] = -b\n"
        "    ctypes.pythonapi.PyFrame_LocalsToFast(ctypes.py_object(caller), ctypes.c_int(0))\n"
        "    return None if type(a) is str else a - b\n",
        "import ctypes\nassert ctypes.sizeof(ctypes.c_int) == 4\n" + RIGHT),
    "an audit hook of the solution's own": (
        "import sys\n"
        "def _quiet(event, args):\n"
        "    if event == 'optimas.outcome' and args[0] != 'success':\n        raise SystemExit(0)\n"
        "sys.addaudithook(_quiet)\n" + WRONG,
        "import sys\nsys.audit('my.event', 1)\n" + RIGHT),
    "TestCase.__init_subclass__ patches every test class made later": (
        "import unittest\n"
        "def _hollow(cls, **kw):\n"
        "    for attr in [a for a in vars(cls) if a.startswith('test')]:\n"
        "        setattr(cls, attr, lambda self: None)\n"
        "unittest.TestCase.__init_subclass__ = classmethod(_hollow)\n" + WRONG,
        "import unittest\nclass Base(unittest.TestCase):\n    def __init_subclass__(cls, **kw):\n"
        "        super().__init_subclass__(**kw)\n" + RIGHT),
}


def test_the_suite_tells_right_from_wrong():
    wrong, right = run_suites([(WRONG, SUITE), (RIGHT, SUITE)], LIMITS)
    assert wrong.status == "failed" and wrong.failed == 4, wrong
    assert right.passed and right.tests_run == 4, right


@pytest.mark.parametrize("name", list(FORGERIES))
def test_a_forgery_fails_and_its_honest_twin_passes(name):
    forged, honest = run_suites([(FORGERIES[name][0], SUITE), (FORGERIES[name][1], SUITE)], LIMITS)
    # WRONG fails every test alone: a forgery may not pass the suite, nor any single test of it.
    assert not forged.passed and forged.failed == forged.tests_run, f"{name}: a forged test passed: {forged}"
    assert honest.passed and honest.tests_run == 4, f"{name}: the honest twin did not pass: {honest}"
