"""The unit-test harness that runs INSIDE the sandbox, as its main.py (never imported by the project).

The solution and its tests run in one interpreter (tests call the solution's functions), so
whatever that process says could be forged by the solution. The harness is therefore two
processes. The judge (the program's own process) never runs any solution code: it holds the
report channel (fd 3) and the run's secret key, and makes itself undumpable before it reads the
key, so no other process of the sandbox user can read its memory, trace it or take its
descriptors. The worker, forked before the key was read, runs the tests: an audit hook,
installed before the solution is loaded and not removable from Python, appends records to a raw
memory mapping that no Python object refers to, and wakes the judge, which reads them straight
from the worker's memory (/proc/<worker>/mem, opened while the worker was still trusted), keys
each with a BLAKE2b MAC and writes it to fd 3, where the runner checks every record. So nothing
the solution can read signs a verdict; forging one needs writing the worker's memory. Records:
  load   - whether solution + tests loaded (else the error);
  test   - one record per planned test, in plan order: pass, or the failure (kind, trace);
  tamper - what the solution did to the harness (the worker exits at once);
  done   - all planned tests reported.
A test's outcome reaches the hook only from this file's Result methods called by unittest's own
code, for the test the harness is running, so calling them (or sys.audit) from the solution, a
thread, a finalizer or a stack walk is caught; class-level patches of unittest (a no-op
TestCase.run, addFailure, assertEqual), swapped __code__, instance-level shadows of assert
methods and foreign classes in a test class's MRO are checked for.
Integrity by identity: before the solution runs, the hook keeps the originals (trace and profile
functions, builtins, sys's functions, the harness modules' sys.modules entries and namespaces, and
each planned test's code objects, compiled here from the tests' source); after the solution's
statements ran (before the tests' did), after the tests loaded and after each test it compares
them with `is`, and any difference is tampering. Setting a trace or profile function, adding an
audit hook or looking up the interpreter's C API with ctypes is tampering the moment it happens.
The checks run inside a generator with the garbage collector off, signal handlers held by a
dispatcher and other threads waiting, so no finalizer, gc callback, signal handler or thread of
the solution runs or looks while their frames (whose free variables reach the journal) are on the
stack; nothing leaves them with a traceback, and the hook's own frame holds nothing that reaches
the journal or decides what is checked. The tests call the solution's functions in a thread of
their own (THREADED), so no frame the solution takes leads to a test's, whose data it could change;
taking one that does from code a test's frame runs (a returned generator) is tampering. This is the in-process judge, the fallback for tasks the
out-of-process judge (judge.py) cannot take; docs/bigcodebench_judge.md says what each guarantees, and README.md in
optimas_cli/sandbox what this one cannot stop. Standard library only.
"""
import __future__

import _thread
import ast
import builtins
import contextlib
import contextvars
import functools
import gc
import hashlib
import importlib
import linecache
import os
import re
import select
import signal
import struct
import sys
import threading
import traceback
import types
import unittest

CHANNEL_FD = 3
TEST_FILE = "__test__.py"
EXIT_FAILED, EXIT_ERROR, EXIT_MEMORY = 1, 2, 3
INSPECTION_EVENTS = ("gc.get_objects", "gc.get_referrers", "gc.get_referents")
FRAME_ATTRIBUTES = {"tb_frame": types.TracebackType, "gi_frame": types.GeneratorType,
                    "cr_frame": types.CoroutineType, "ag_frame": types.AsyncGeneratorType}
THREADED = "__optimas_threaded__"  # the tests' calls of the solution's functions go through it
OK_KINDS = ("success", "expected failure", "skip")
JOURNAL_BYTES = 1 << 20  # as much as the runner keeps of the report channel
__unittest = True  # unittest leaves this file's frames (the equality check below) out of failure traces
PR_SET_DUMPABLE = 4
FUTURE_FLAGS = functools.reduce(lambda a, b: a | b, (getattr(__future__, n).compiler_flag for n in __future__.all_feature_names))


def _codes_of(namespaces, frame):
    """Ids of every code object (nested ones too) of these namespaces' functions and methods, and of
    the frames on the stack now (the prelude, this file's top level): no solution code has run yet."""
    todo = []
    while frame is not None:
        todo.append(frame.f_code)
        frame = frame.f_back
    for namespace in namespaces:
        for value in namespace.values():
            members = list(vars(value).values()) if isinstance(value, type) else [value]
            for member in members:
                func = getattr(member, "__func__", member)
                if isinstance(func, property):
                    func = func.fget
                while isinstance(func, types.FunctionType):  # a decorated one too (contextmanager)
                    todo.append(func.__code__)
                    func = getattr(func, "__wrapped__", None)
    return set(_nested_codes(todo))


def _nested_codes(roots):
    """Every code object of `roots` and nested in their constants (function and class bodies), by id; the
    dict holds them, so no id is reused while it lives."""
    found, todo = {}, list(roots)
    while todo:
        code = todo.pop()
        if id(code) not in found:
            found[id(code)] = code
            todo += [c for c in code.co_consts if isinstance(c, types.CodeType)]
    return found


def _classes_of(module_names):
    return [v for name in module_names for v in vars(sys.modules[name]).values() if isinstance(v, type)]


METHOD_TYPES = (types.FunctionType, classmethod, staticmethod, property)


def _is_method(value):
    """By exact type: isinstance could consult a __class__ the solution wrote."""
    kind = type(value)
    return any(kind is t for t in METHOD_TYPES)


def _methods(cls):
    """name -> the method objects a class defines itself (what a patch would replace)."""
    return {k: v for k, v in vars(cls).items() if _is_method(v)}


# Equality assertions (and unittest's older names for them) that an answer could pass by deciding
# equality itself: an __eq__ that is always true, unittest.mock.ANY.
EQUALITY_ASSERTS = (
    "assertEqual", "assertNotEqual", "assertAlmostEqual", "assertNotAlmostEqual", "assertSequenceEqual",
    "assertListEqual", "assertTupleEqual", "assertSetEqual", "assertDictEqual", "assertCountEqual",
    "assertMultiLineEqual", "assertIn", "assertNotIn", "assertEquals", "failUnlessEqual", "assertNotEquals",
    "failIfEqual", "assertAlmostEquals", "failUnlessAlmostEqual", "assertNotAlmostEquals", "failIfAlmostEqual")
PLAIN = (bool, int, float, complex, str, bytes, type(None), list, tuple, set, frozenset, dict)
WALK_LIMIT = 100_000  # objects looked at per side; a bigger value is checked that far
_mro_of, _dict_of = type.__dict__["__mro__"].__get__, type.__dict__["__dict__"].__get__  # no metaclass can shadow


def _inside(value):
    """`value` and what it holds through containers of exactly the builtin types (walking them runs no code of the solution)."""
    stack, seen = [value], 0
    while stack and seen < WALK_LIMIT:
        item = stack.pop()
        seen += 1
        kind = type(item)
        if kind is dict:
            stack.extend(item.keys())
            stack.extend(item.values())
        elif kind in (list, tuple, set, frozenset):
            stack.extend(item)
        yield item


def _written_by_the_code(klass):
    namespace = _dict_of(klass)
    module = namespace.get("__module__")
    if type(module) is str and (module == "__test__" or module.startswith("unittest.")):
        return True  # the solution's or the tests' own class, or one of unittest.mock's (ANY equals anything)
    for value in namespace.values():
        func = getattr(value, "__func__", value) if type(value) in (staticmethod, classmethod) else value
        if type(func) is types.FunctionType and func.__code__.co_filename == TEST_FILE:
            return True  # a class that claims another module but whose methods are in the code
    return False


def _decides_its_own_equality(kind):
    """Whether the class that gives `kind` its __eq__ (or __ne__) was written by the code under test."""
    for name in ("__eq__", "__ne__"):
        owner = next((k for k in _mro_of(kind) if name in _dict_of(k)), object)
        if owner is not object and _written_by_the_code(owner):
            return True
    return False


def _self_judging(value):
    return next((item for item in _inside(value) if type(item) not in PLAIN and _decides_its_own_equality(type(item))), None)


def _strict(original):
    """`original`, failing first when one side holds an object whose equality the code under test
    decides (it could say "equal" to anything) and the other side none: a plain builtin value, or a
    library's (Counter, OrderedDict, Decimal, date, a numpy scalar, whose __eq__ defers to the other
    side's when it does not know the type)."""

    def check(self, first, second, *args, **kwargs):
        for plain, other in ((first, second), (second, first)):
            culprit = _self_judging(other)
            if culprit is not None and _self_judging(plain) is None:
                raise self.failureException(
                    f"{type(culprit).__name__!s} decides its own equality (its __eq__ is the code's own), "
                    f"so comparing it with a {type(plain).__name__} checks nothing")
        return original(self, first, second, *args, **kwargs)

    check.__doc__ = original.__doc__
    return check


def _strict_equality():
    for name in EQUALITY_ASSERTS:
        if name in vars(unittest.TestCase):
            setattr(unittest.TestCase, name, _strict(vars(unittest.TestCase)[name]))


OWN_FRAME = re.compile(r'^  File "main\.py", line \d+, in .*\n(?:    .*\n)*', re.M)


def _without_own_frames(trace):
    """A failure trace without this file's frames (the calls between a test and the solution): unittest
    leaves out only the ones before the test's, and the trace is what the code's author reads."""
    return OWN_FRAME.sub("", trace)


class Result(unittest.TestResult):
    """Passes each outcome to the hook the moment unittest reports it."""

    def addSuccess(self, test):
        sys.audit("optimas.outcome", "success", test, "")

    def addFailure(self, test, err):
        sys.audit("optimas.outcome", "failure", test, self._text(err, test))

    def addError(self, test, err):
        kind = "memory" if issubclass(err[0], MemoryError) else "error"
        sys.audit("optimas.outcome", kind, test, self._text(err, test))

    def addSkip(self, test, reason):
        sys.audit("optimas.outcome", "skip", test, str(reason)[:300])

    def addExpectedFailure(self, test, err):
        sys.audit("optimas.outcome", "expected failure", test, "")

    def addUnexpectedSuccess(self, test):
        sys.audit("optimas.outcome", "unexpected success", test, "")

    def addSubTest(self, test, subtest, err):
        if err is not None:
            kind = "failure" if issubclass(err[0], test.failureException) else "error"
            sys.audit("optimas.subtest", kind, test, self._text(err, test))

    def _text(self, err, test):
        try:
            return _without_own_frames(self._exc_info_to_string(err, test))[-700:]
        except Exception:  # noqa: BLE001 - an exception whose repr fails still fails its test
            return err[0].__name__


def _guard_should_stop():
    """unittest swallows its internal _ShouldStop (meant for failfast and expected failures) as if the
    test part had ended well: raised by the code under test, it would pass a test that never finished.
    Outside an expected failure (this harness never sets failfast), it is the test's failure."""
    outcome, should_stop = unittest.case._Outcome, unittest.case._ShouldStop
    original = outcome.testPartExecutor

    def part_executor(self, test_case, subTest=False):  # noqa: N803 - unittest's own keyword
        with original(self, test_case, subTest):
            try:
                yield
            except should_stop:
                if not self.expecting_failure:
                    raise AssertionError("the code raised unittest's internal _ShouldStop, which would end "
                                         "the test silently") from None
                raise
            except BaseException:
                if self.expecting_failure and not _marked_expected(test_case):
                    self.expecting_failure = False  # set by the code, not the tests: the failure stands
                raise

    part_executor.__wrapped__ = original  # where _codes_of finds unittest's own code, which reports failures
    outcome.testPartExecutor = contextlib.contextmanager(part_executor)


def _marked_expected(test):
    method = getattr(test, getattr(test, "_testMethodName", ""), None)
    return bool(getattr(method, "__unittest_expecting_failure__", False) or getattr(test, "__unittest_expecting_failure__", False))


def _library_functions(dotted_names):
    """[(module name, its namespace, {attribute: value})] for the library functions, classes and modules
    the tests use (`numpy.testing.assert_array_equal` -> numpy.testing's assert_array_equal), imported
    now, before the solution could rebind them; names that do not import are left out."""
    found = {}
    for dotted in dotted_names:
        parts = dotted.split(".")
        for cut in range(len(parts) - 1, 0, -1):
            try:
                module = importlib.import_module(".".join(parts[:cut]))
            except Exception:  # noqa: BLE001 - not a module (or not importable here): a shorter prefix
                continue
            value = vars(module).get(parts[cut])
            if callable(value) or isinstance(value, types.ModuleType):
                found.setdefault(module.__name__, (vars(module), {}))[1][parts[cut]] = value
            break
    return [(name, namespace, names) for name, (namespace, names) in found.items()]


def _namespace_versions(classes):
    """A function that says which of `classes` had their namespace changed since now, even if it was
    put back (a no-op assertion that restores the original when called). CPython gives a dict a new
    version number at each change and never an old one again; it is read from the dict object, at
    its offset after the object header and ma_used, through /proc/self/mem opened now (before the
    hook, which forbids that file). Where a scratch dict does not behave so, nothing is watched."""
    mem = os.open("/proc/self/mem", os.O_RDONLY)
    offset = 3 * struct.calcsize("n")  # ob_refcnt, ob_type, ma_used

    def version(namespace):
        return struct.unpack("<Q", os.pread(mem, 8, id(namespace) + offset))[0]

    probe = {}
    first = version(probe)
    probe["x"] = 1
    second = version(probe)
    probe["x"] = 2
    if not first < second < version(probe) or sys.implementation.name != "cpython":
        return lambda: []
    # Each class with its namespace (held, so that it stays at its address), that address and its version.
    watched = [(cls, namespace, id(namespace) + offset, version(namespace))
               for cls in classes for namespace in gc.get_referents(vars(cls)) if type(namespace) is dict]
    pread, unpack = os.pread, struct.unpack

    def changed():
        return [cls for cls, _, address, then in watched if unpack("<Q", pread(mem, 8, address))[0] != then]

    return changed


def _originals(tests_code, plan, harness_modules):
    """What the verdict relies on, taken before any code of the solution runs, to be compared by
    identity later: the interpreter's trace and profile functions, `builtins`, the harness modules
    (their entries in sys.modules and their namespaces) and, for each planned test, the code objects
    compiled from the tests' source that may define it."""
    tests_codes, by_name = _nested_codes([tests_code] if tests_code is not None else []), {}
    test_classes = {cls for cls, _ in plan["tests"]}
    for code in tests_codes.values():
        if code.co_name in test_classes:  # a class body: its test methods' code
            for member in code.co_consts:
                if isinstance(member, types.CodeType):
                    by_name.setdefault(member.co_name, set()).add(id(member))
    guarded = [*harness_modules, "builtins", "sys", "threading"]
    return {
        "hooks": (sys.gettrace(), sys.getprofile(), getattr(threading, "_trace_hook", None),
                  getattr(threading, "_profile_hook", None)),
        "builtins": dict(vars(builtins)),
        "modules": {name: sys.modules[name] for name in guarded},
        # A module's functions, classes and modules: its data may change as it runs (mock_open fills file_spec).
        "namespaces": [(name, vars(sys.modules[name]), {k: v for k, v in vars(sys.modules[name]).items()
                                                        if callable(v) or isinstance(v, types.ModuleType)})
                       for name in harness_modules],
        # sys's functions, but not the hooks for uncaught exceptions and the like, which code may set
        "sys": {n: v for n, v in vars(sys).items() if type(v) is types.BuiltinFunctionType and not n.endswith("hook")},
        "tests_codes": tests_codes,
        "test_codes": {method: by_name.get(method, set()) for _, method in plan["tests"]},
        "shadowable": list(plan.get("builtins_used", [])),
    }


def _integrity_checks(originals, trusted, tamper, exact_str_keys):
    """(check(namespace), check_test(cls, method)): each calls `tamper` at the first difference from
    `originals`. Everything they use is bound here, and they compare by identity only, so no code of
    the solution runs while they look."""
    gettrace, getprofile, threading_names, modules = sys.gettrace, sys.getprofile, vars(threading), sys.modules
    builtins_names, sys_names, module_type = vars(builtins), vars(sys), types.ModuleType
    _type, _id, _str, function_type = type, id, str, types.FunctionType
    _mro_of, _dict_of = type.__dict__["__mro__"].__get__, type.__dict__["__dict__"].__get__
    hooks, builtins0, modules0 = originals["hooks"], originals["builtins"], originals["modules"]
    namespaces0, sys0, shadowable = originals["namespaces"], originals["sys"], originals["shadowable"]
    tests_codes, test_codes = originals["tests_codes"], originals["test_codes"]

    def same(now, then, what):
        exact_str_keys(now, what)
        for name, value in then.items():
            if now.get(name) is not value:
                tamper(f"{what}.{name} was replaced or removed")

    def check(namespace):
        now = (gettrace(), getprofile(), threading_names.get("_trace_hook"), threading_names.get("_profile_hook"))
        if any(a is not b for a, b in zip(now, hooks, strict=True)):
            tamper("a trace or profile function was set (it can rewrite the tests' variables)")
        same(builtins_names, builtins0, "builtins")
        same(sys_names, sys0, "sys")
        exact_str_keys(modules, "sys.modules")
        for name, module in modules0.items():
            if modules.get(name) is not module or _type(module) is not module_type:
                tamper(f"sys.modules[{name!r}] was replaced")
        for name, live, then in namespaces0:
            same(live, then, name)
        if namespace is not None:
            exact_str_keys(namespace, "the tests' module")
            if namespace.get("__builtins__") is not builtins_names:
                tamper("the tests' module was given builtins of its own")
            for name in shadowable:
                if name in namespace:
                    tamper(f"a global {name} hides the builtin {name} that the tests call")

    def check_test(cls, method, namespace):
        """The function unittest will call for `method` is the tests' own (its code object compiled
        from the tests' source), reached through wrappers of unittest, the tests or a library only."""
        value = None
        for klass in _mro_of(cls):
            exact_str_keys(_dict_of(klass), "a test class")
            if method in _dict_of(klass):
                value = _dict_of(klass)[method]
                break
        while True:
            if _type(value) is staticmethod or _type(value) is classmethod:
                value = value.__func__
            if _type(value) is not function_type:
                tamper(f"{method} is no longer the tests' function")
            code = value.__code__
            if _id(code) in test_codes[method]:
                if value.__globals__ is not namespace or value.__builtins__ is not builtins_names:
                    tamper(f"{method} runs with other globals or builtins than the tests'")
                return
            filename = code.co_filename
            if not (_id(code) in trusted or _id(code) in tests_codes or (
                    _type(filename) is _str and filename.startswith("/") and filename.endswith(".py"))):
                tamper(f"{method} was replaced by code that is not the tests' ({code.co_name})")
            exact_str_keys(value.__dict__, "a test's wrapper")
            value = value.__dict__.get("__wrapped__")

    return check, check_test


def _memory_path_check(tamper):
    """Whether an opened path is a process's memory (/proc/<pid>/mem), however it is written: bytes,
    `//proc/self/mem`, a symlink to it, a pathlib path, or `mem` relative to a folder (dir_fd). A path
    of another type could only be read by running its own code (__fspath__), so it is refused."""
    _type, _str, _bytes, _int, fsdecode, realpath = type, str, bytes, int, os.fsdecode, os.path.realpath
    import pathlib

    pure_paths, _list, join = (pathlib.PosixPath, pathlib.PurePosixPath), list, "/".join
    # A pathlib path's parts, read from its slots (Python 3.11's layout) without calling its methods.
    root_of, parts_of = vars(pathlib.PurePath)["_root"].__get__, vars(pathlib.PurePath)["_parts"].__get__

    def is_memory(path):
        kind = _type(path)
        if kind is _int:
            return False  # an open descriptor, itself opened through this check
        if kind in pure_paths:
            root, parts = root_of(path), parts_of(path)
            if _type(root) is not _str or _type(parts) is not _list:
                tamper("a pathlib path whose parts were rewritten was opened")
            path = root + join(parts[1:]) if root else join(parts)
        elif kind is _bytes:
            path = fsdecode(path)
        elif kind is not _str:
            tamper(f"a path of type {kind.__name__} was opened (the harness reads only str, bytes and pathlib paths)")
        name = path.rstrip("/").rsplit("/", 1)[-1]
        return name == "mem" and (not path.startswith("/") or realpath(path).startswith("/proc/"))

    return is_memory


def _foreign_code(trusted, tests_codes):
    """Whether a code object is the solution's (or made at run time): not the tests', not the harness's
    or unittest's, and not read from a library's file. Verdicts are kept with their code objects, so
    an id is never reused while it is cached."""
    known, _id, _type, _str, isfile = {}, id, type, str, os.path.isfile

    def foreign(code):
        seen = known.get(_id(code))
        if seen is None:
            name = code.co_filename
            inside = _id(code) in trusted or _id(code) in tests_codes or (
                _type(name) is _str and name != TEST_FILE and (name.startswith("<frozen ") or isfile(name)))
            seen = known[_id(code)] = (code, not inside)
        return seen[1]

    return foreign


def _signal_dispatch(checking):
    """(guard, deliver) for the hook: Python runs a signal handler at any instruction of the main
    thread, the checks' included, whoever received the signal (another thread may, whatever this
    one masks). So every Python-level handler is this file's dispatcher, which runs the code's own
    handler at once outside the checks and holds it while they run (`checking()` says so); `deliver`
    runs what it held when they end. signal.signal/getsignal keep their meaning (they go through
    _signal's, replaced here); a handler installed past them (_signal's original function, kept
    below) is found by `guard`, in one C call at the checks' entry, and put behind the dispatcher."""
    import _signal

    original_signal, original_getsignal = _signal.signal, _signal.getsignal
    catchable = tuple(s for s in signal.valid_signals() if s not in (signal.SIGKILL, signal.SIGSTOP))
    handlers, pending, _callable, _map, _list, _zip = {}, [], callable, map, list, zip

    def dispatch(signum, frame):  # Python runs handlers in the main thread only
        if checking():
            pending.append(signum)
            return
        handler = handlers.get(signum)
        if handler is not None:
            handler(signum, None)  # the interrupted frame may be a test's, whose data the handler could change

    def install(signalnum, handler):
        before = handlers.get(signalnum)
        previous = original_signal(signalnum, dispatch if _callable(handler) else handler)
        if _callable(handler):
            handlers[signalnum] = handler
        else:
            handlers.pop(signalnum, None)
        return before if previous is dispatch else previous

    def getsignal(signalnum):
        handler = original_getsignal(signalnum)
        return handlers.get(signalnum) if handler is dispatch else handler

    def guard():
        while True:  # until one look (a single C call, during which no handler runs) finds none
            now = _list(_map(original_getsignal, catchable))
            raw = [(s, h) for s, h in _zip(catchable, now) if _callable(h) and h is not dispatch]
            if not raw:
                return
            for signum, handler in raw:
                handlers[signum] = handler
                original_signal(signum, dispatch)

    def deliver():
        while pending:
            signum = pending.pop(0)
            handler = handlers.get(signum)
            if handler is not None:
                handler(signum, None)  # (its frame would be the hook's)

    _signal.signal, _signal.getsignal = install, getsignal
    guard()  # SIGINT's default handler too: its KeyboardInterrupt may not leave the checks' frames
    return guard, deliver


def _seal(plan, journal, tests_code):
    """Install the hook that alone writes records (see the module docstring) into `journal`:
    (address of the mapping, ctypes.memmove, the pipe that wakes the judge, the pipe it answers on).
    `tests_code` is the tests' part of the source, compiled (None when it did not compile)."""
    base, memmove, wake, answer = journal
    write, read, pack, getframe, get_ident = os.write, os.read, struct.pack, sys._getframe, threading.get_ident
    # Builtins and constants the hook uses, bound now: the solution may replace them in builtins or here.
    _type, _len, _id, _str, _int, _exit = type, len, id, str, int, os._exit
    _vars, _getattr, _set, _sorted, is_method, methods_of = vars, getattr, set, sorted, _is_method, _methods
    _object, _assertion_error, ok_kinds, _any, _dict, _tuple = object, AssertionError, OK_KINDS, any, dict, tuple
    inspection_events, exit_failed, frame_attributes = INSPECTION_EVENTS, EXIT_FAILED, dict(FRAME_ATTRIBUTES)
    main_thread = get_ident()
    current_frames, exit_memory = sys._current_frames, EXIT_MEMORY
    getrecursionlimit, setrecursionlimit = sys.getrecursionlimit, sys.setrecursionlimit
    gc_isenabled, gc_disable, gc_enable = gc.isenabled, gc.disable, gc.enable
    # One thread at a time in the checks (a forked child gets a free lock). No mutable state says
    # who is in them (code that reached the hook's frame could set it): the thread that owns this
    # lock while the generator below runs is, and the events its checks raise pass through.
    checks_lock = threading.RLock()
    os.register_at_fork(after_in_child=checks_lock._at_fork_reinit)
    guard_signals, deliver_signals = _signal_dispatch(checks_lock._is_owned)
    outcome_class, result_class = unittest.case._Outcome, Result
    pristine_equality = dict(vars(unittest.TestCase())["_type_equality_funcs"])
    case_names = {n for n, v in vars(unittest.TestCase).items() if callable(v) or isinstance(v, classmethod | staticmethod)}
    case_names.add("failureException")
    # What every class may hold without having written it: what TestCase.__init_subclass__ sets
    # (_classSetupFailed, _class_cleanups) and what Python puts in a class's namespace.
    case_data = _set(vars(unittest.TestCase)) - case_names | {
        "__module__", "__qualname__", "__doc__", "__dict__", "__weakref__", "__firstlineno__",
        "__static_attributes__", "__annotations__", "__classcell__", "_classSetupFailed", "_class_cleanups"}
    pristine = {n: vars(unittest.TestCase)[n] for n in case_names}
    # unittest runs each test part inside contextlib's context manager: a patched __exit__ there
    # could swallow a failure, so contextlib is guarded as unittest is.
    harness_modules = [m for m in sys.modules if m == "unittest" or m.startswith("unittest.")] + ["contextlib"]
    # Python 3.11 audits no assignment to a class attribute, so each guarded class's methods are
    # compared with a snapshot instead, at load and after every test.
    snapshots = [(cls, _methods(cls)) for cls in [*_classes_of(harness_modules), Result]]
    guarded_classes = {_id(cls) for cls, _ in snapshots}
    changed_classes = _namespace_versions([cls for cls, _ in snapshots])
    trusted = _codes_of([vars(sys.modules[m]) for m in harness_modules] + [globals()], getframe())
    originals = _originals(tests_code, plan, harness_modules)
    originals["namespaces"] += _library_functions(plan["library_attributes"])  # math.isclose, np.testing...
    tests_codes = originals["tests_codes"]
    originals["namespaces"].append(("the harness", globals(), dict(globals())))  # this file's functions and classes
    guarded_code_owners = {_id(f) for name in harness_modules for v in vars(sys.modules[name]).values()
                           for f in ([v] + (list(vars(v).values()) if isinstance(v, type) else []))
                           if isinstance(f, types.FunctionType)}
    guarded_code_owners |= {_id(f) for f in [*globals().values(), *vars(Result).values()]
                            if isinstance(f, types.FunctionType)}
    result_codes = {kind: vars(Result)[name].__code__ for kind, name in (
        ("success", "addSuccess"), ("failure", "addFailure"), ("error", "addError"), ("memory", "addError"),
        ("skip", "addSkip"), ("expected failure", "addExpectedFailure"),
        ("unexpected success", "addUnexpectedSuccess"))}
    own_names = {cls: set(names) for cls, names in plan["own_names"].items()}
    imported_names = list(plan["imported_names"])
    tests = [tuple(t) for t in plan["tests"]]
    state = {"seq": 0, "next": 0, "test": None, "outcomes": [], "classes": None, "length": 0, "finished": []}
    capacity = JOURNAL_BYTES - 8

    def record(*fields):
        body = "\t".join(_str(f).encode("unicode_escape").decode("ascii") for f in (state["seq"], *fields))
        state["seq"] += 1
        line = (body + "\n").encode()
        start, end = state["length"], state["length"] + _len(line)
        if end > capacity:
            _exit(exit_failed)  # more than the runner would keep: no verdict can be given
        memmove(base + 8 + start, line, _len(line))
        memmove(base, pack("<Q", end), 8)  # the commit: the judge reads up to here
        state["length"] = end
        try:
            write(wake, b"r")
            read(answer, 1)  # the judge has signed it
        except OSError:
            _exit(exit_failed)  # the pipes were closed or replaced: no verdict can be given

    def tamper(what):
        record("tamper", what)
        _exit(exit_failed)

    def check_caller(allowed_code, depth):
        """The event must come from `allowed_code`, on the main thread, with only trusted code below it."""
        if get_ident() != main_thread:
            tamper("a harness event raised from another thread")
        frame = getframe(depth)  # the caller of sys.audit, above this function and the hook's own frames
        if frame.f_code is not allowed_code:
            tamper(f"a harness event raised by {frame.f_code.co_name}")
        while frame is not None:
            if _id(frame.f_code) not in trusted:
                tamper(f"a harness event raised with {frame.f_code.co_name} ({frame.f_code.co_filename}) on the stack")
            frame = frame.f_back

    def check_class(cls, name):
        """The test class as the tests wrote it: nothing foreign in its MRO, TestCase's methods intact."""
        if _type(cls) is not _type:
            tamper(f"{name} has a foreign metaclass")
        for klass in cls.__mro__:
            if _id(klass) in guarded_classes or klass is _object:
                continue
            exact_str_keys(_vars(klass), "a test class")
            kname = klass.__name__
            # Methods the tests did not write (data is theirs to set: setUpClass stores paths on cls).
            extra = {n for n in _set(_vars(klass)) - own_names.get(kname, _set()) - case_data if is_method(_vars(klass)[n])}
            if kname not in own_names or _type(klass) is not _type or extra:
                tamper(f"{name}'s class chain holds {kname}, which the tests did not define as such ({_sorted(extra)[:5]})")
        for attr in case_names - own_names.get(name, _set()):
            for klass in cls.__mro__:
                if attr in _vars(klass):
                    found = _vars(klass)[attr]
                    if _id(klass) in guarded_classes:
                        if found is not pristine[attr]:
                            tamper(f"unittest.TestCase.{attr} was replaced")
                    elif attr not in own_names.get(klass.__name__, ()):  # whatever its type: a partial, a descriptor
                        tamper(f"{klass.__name__}.{attr} was set, and the tests did not define it")
                    break

    def check_snapshots():
        for cls, methods in snapshots:
            now = _vars(cls)
            exact_str_keys(now, "a guarded class")
            for name, value in methods.items():
                if now.get(name) is not value:
                    tamper(f"{cls.__name__}.{name} was replaced or removed")
            for name, value in now.items():
                if name not in methods and is_method(value):
                    tamper(f"{cls.__name__}.{name} was added")
        for cls in changed_classes():
            tamper(f"{cls.__name__} was changed (and perhaps put back) during the run")

    def check_instance(test, method):
        exact_str_keys(_vars(test), "the test")
        for attr, value in _vars(test).items():
            if attr == method or (attr in case_names and attr != "failureException") or (
                    attr == "failureException" and value is not _assertion_error):
                tamper(f"the test's own {attr} was replaced")
        equality = _vars(test).get("_type_equality_funcs", {})
        # unittest's own, or a function the tests registered (addTypeEqualityFunc): never another name
        # of TestCase, which would check nothing (int -> 'assertIsNotNone').
        if _type(equality) is not _dict or _any(v is not pristine_equality.get(k) and not tests_own(v, test)
                                                for k, v in equality.items()):
            tamper("assertEqual's type-specific checks were replaced")

    def tests_own(check, test):
        """A function (or method) compiled from the tests' source, or the name of one the tests' class defines."""
        if _type(check) is types.MethodType:
            check = check.__func__
        if _type(check) is types.FunctionType:
            return _id(check.__code__) in tests_codes
        return _type(check) is _str and check in own_names.get(_type(test).__name__, ())

    def on_outcome(event, args):
        kind, test, trace = args
        if event == "optimas.subtest":
            kind = "error" if kind == "error" and _type(kind) is _str else "failure"
        trace = trace if _type(trace) is _str else "?"
        # A failed subtest can only fail its test, so it is taken from anywhere (unittest reports it
        # from within the test method's own frame); an outcome that may pass a test is checked.
        if event != "optimas.subtest":
            check_caller(result_codes.get(kind), 5)  # 0 check_caller, 1 on_outcome, 2 check_event, 3 keep, 4 hook, 5 the Result method
        if test is not state["test"]:
            tamper("an outcome reported for a test that is not running")
        if _type(test) is not state["classes"][tests[state["next"]][0]]:
            tamper("the running test's class was swapped")
        exact_str_keys(_vars(test), "the test")
        method = _getattr(_type(test), tests[state["next"]][1])
        marked = _getattr(method, "__unittest_expecting_failure__", False) is True or _getattr(
            _type(test), "__unittest_expecting_failure__", False) is True
        # unittest's outcome for this test, whatever the outcome: the harness's result, and a failure
        # expected only where the test is marked so (else a swallowed failure reads as a success).
        # (None outside run's body: a decorated skip, or the harness's own error for a KeyboardInterrupt.)
        outcome = _vars(test).get("_outcome")
        if outcome is None and kind in ("success", "expected failure", "unexpected success"):
            tamper("the test's outcome was removed")
        if outcome is not None:
            if _type(outcome) is not outcome_class:
                tamper("the test's outcome was replaced")
            exact_str_keys(_vars(outcome), "the test's outcome")
            if _type(_vars(outcome).get("result")) is not result_class:
                tamper("the test's outcome reports to another result")
            expecting = _vars(outcome).get("expecting_failure")  # True only while a marked test's method runs
            if expecting is not False and not (expecting is True and marked):
                tamper("the test's outcome was told to expect a failure")
        if kind == "expected failure" and not _getattr(method, "__unittest_expecting_failure__", False):
            kind, trace = "failure", "an unexpected 'expected failure' (the test is not marked so)"
        if kind == "success" and _vars(outcome).get("expectedFailure") is not None:
            kind, trace = "failure", "the test raised, and the code had its failure marked as expected"
        if kind == "skip" and not (_getattr(method, "__unittest_skip__", False) or _getattr(_type(test), "__unittest_skip__", False)):
            kind, trace = "failure", f"skipped at run time, which does not test the code ({trace})"
        outcomes = state["outcomes"]
        if outcomes and (kind in ok_kinds or outcomes[-1][0] in ok_kinds):
            tamper("a second outcome for one test")
        outcomes.append((kind, trace))

    # No code of the solution may run while a frame of the hook is on the stack (the frame's free
    # variables lead to the key): so nothing below compares, hashes or formats an object that is not
    # exactly a str, int or type (a str subclass could carry its own __eq__, __hash__ or __str__).
    def exact_str_keys(namespace, what):
        for name in namespace:
            if _type(name) is not _str:
                tamper(f"{what} holds a name that is not a plain string")

    check_integrity, check_test = _integrity_checks(originals, trusted, tamper, exact_str_keys)
    foreign = _foreign_code(trusted, tests_codes)

    def frame_taken(taken):
        """A frame taken (sys._getframe, inspect's stack, a traceback's or generator's frame) while code
        that is neither the tests', the harness's nor a library's runs above a test's frame, or one that
        leads to a test's frame, is tampering: through it the code could change what the test compares
        with. The tests call the solution's functions in a thread of their own (THREADED), whose stack
        holds no test, so this meets only code that the tests' own frame runs: a returned generator or
        object's method, a handler. 4: 0 frame_taken, 1 check_event, 2 keep, 3 hook, 4 who took it."""
        frame, code_seen = getframe(4), False
        while frame is not None and _id(frame.f_code) not in tests_codes:
            code_seen = code_seen or foreign(frame.f_code)
            frame = frame.f_back
        if not code_seen:
            return
        while frame is None and taken is not None:
            frame = taken if _id(taken.f_code) in tests_codes else None
            taken = taken.f_back
        if frame is not None:
            tamper("the code took a frame that leads to a running test's own (what it compares with)")
    process_memory = _memory_path_check(tamper)

    def keep():
        """The checks run inside this generator. Suspended, its frame (whose free variables reach the
        journal) is reachable only through gi_frame, which the checks refuse; nothing leaves it with a
        traceback (an exception would carry its frames to the code that raised the event)."""
        while True:
            try:
                sent = yield
                if _type(sent) is not _tuple or _len(sent) != 2 or _type(sent[1]) is not _tuple:
                    tamper("the harness's checks were called with a made-up event")
                check_event(*sent)
            except MemoryError:
                _exit(exit_memory)
            except BaseException:  # noqa: BLE001 - a malformed event (sys.audit('open')) or throw()/close()
                tamper("the harness's checks were called out of turn or interrupted")

    keeper = keep()
    next(keeper)

    def hook(event, args):
        """The way into the checks. No code of the solution runs while they do: the collector is off (a
        gc callback, the __del__ of cyclic garbage, a weakref callback), every Python-level signal
        handler goes through a dispatcher that holds it until they end, and other threads wait. This
        frame holds nothing that reaches the journal or decides what is checked: a handler that runs
        before the dispatcher is sure of (at this function's first instruction) finds nothing to use."""
        if keeper.gi_running and checks_lock._is_owned():
            return  # raised by the checks' own reads in this thread (a frame's f_code, sys._getframe)
        collecting = gc_isenabled()
        gc_disable()
        try:
            with checks_lock:
                if get_ident() == main_thread:
                    guard_signals()
                # Room for the checks wherever the code raised the event (an event raised at the
                # recursion limit would otherwise end them in a RecursionError).
                limit = getrecursionlimit()
                setrecursionlimit(limit + 1000)
                try:
                    keeper.send((event, args))
                finally:
                    setrecursionlimit(limit)
        finally:
            if collecting:
                gc_enable()
        if get_ident() == main_thread:
            deliver_signals()

    def check_event(event, args):
        if _type(event) is not _str:
            return
        if event.startswith("optimas."):
            if event == "optimas.call":  # a threaded call (_in_a_thread): the hook's entry guarded the signals
                return
            if event in ("optimas.outcome", "optimas.subtest"):
                on_outcome(event, args)
                return
            check_caller(state["harness_code"], 4)  # 0 check_caller, 1 check_event, 2 keep, 3 hook, 4 the caller of sys.audit
            if event == "optimas.solution":  # the solution is loaded, the tests are not yet
                state["namespace"] = args[0]
                check_integrity(state["namespace"])
            elif event == "optimas.loaded":
                error, classes = args
                if error:
                    record("load", error[0], error[1])
                    return
                exact_str_keys(classes, "the test classes")
                state["classes"] = _dict(classes)  # a copy: the run loop's dict is within the code's reach
                for name, cls in state["classes"].items():
                    check_class(cls, name)
                    snapshots.extend((k, methods_of(k)) for k in cls.__mro__ if _id(k) not in guarded_classes
                                     and k is not _object)
                check_snapshots()
                check_integrity(state["namespace"])
                # What the tests' imports bound (np, math): rebound later, the tests would call the code's.
                state["imported"] = {n: state["namespace"][n] for n in [*imported_names, THREADED] if n in state["namespace"]}
                for cls_name, method in tests:
                    check_test(state["classes"][cls_name], method, state["namespace"])
                record("load", "ok", "")
            elif event == "optimas.begin":
                index, test = args
                expected = tests[index] if _type(index) is _int and index == state["next"] < _len(tests) else None
                if expected is None or _type(test) is not state["classes"][expected[0]]:
                    tamper("the tests were not run in their planned order")
                exact_str_keys(_vars(test), "the test")
                name = _vars(test).get("_testMethodName")
                if _type(name) is not _str or name != expected[1]:
                    tamper("the tests were not run in their planned order")
                check_test(state["classes"][expected[0]], name, state["namespace"])
                state["test"], state["outcomes"] = test, []  # (what they held stays in "finished")
            elif event == "optimas.end":
                test, (cls_name, method) = state["test"], tests[state["next"]]
                check_class(state["classes"][cls_name], cls_name)
                check_snapshots()
                check_integrity(state["namespace"])
                check_instance(test, method)
                for name, value in state["imported"].items():
                    if state["namespace"].get(name) is not value:
                        tamper(f"the tests' {name} was rebound")
                if _type(test) is not state["classes"][cls_name]:
                    tamper("the running test's class was swapped")
                problems = [o for o in state["outcomes"] if o[0] not in ok_kinds]
                if not state["outcomes"]:
                    problems = [("error", "the test reported no outcome")]
                first = problems[0] if problems else ("pass", "")
                record("test", state["next"], cls_name, method, first[0], first[1], _len(problems))
                state["next"] += 1
                # Kept alive: its last reference dropped here would run its finalizers (and the
                # solution's objects it holds) with this hook's frame on the stack.
                state["finished"].append(test)
                state["test"] = None
            elif event == "optimas.done":
                if state["next"] != _len(tests):
                    tamper("the run ended before every planned test reported")
                check_integrity(state["namespace"])
                record("done", _len(tests))
            elif event == "optimas.aborted":  # KeyboardInterrupt or SystemExit outside a test
                record("abort", args[0] if _type(args[0]) is _str else "?")
        elif event in ("object.__setattr__", "object.__delattr__"):
            obj, attr = args[0], args[1]
            if _type(attr) is not _str:
                return
            if attr == "__code__" and _id(obj) in guarded_code_owners:
                tamper(f"the code of {obj.__name__} was swapped")
        elif event in inspection_events:
            tamper(f"{event} (the harness's objects are off limits)")
        elif event in ("sys.settrace", "sys.setprofile"):  # also threading's, and C's PyEval_SetTrace
            tamper(f"{event} (a trace or profile function can rewrite the tests' variables)")
        elif event == "sys.addaudithook":
            tamper("sys.addaudithook (an audit hook sees, and can interrupt, the harness's events)")
        elif event == "ctypes.dlsym" and _type(args[-1]) is _str and args[-1].startswith(("Py", "_Py")):
            tamper(f"ctypes looked up the interpreter's own {args[-1]} (it can rewrite frames and hooks)")
        elif event == "open" and process_memory(args[0]):
            tamper("reading the process's own memory")
        elif event in ("sys._current_frames", "sys._current_exceptions"):
            # Another thread's frames may be the checks' own (a thread's events run them too).
            if get_ident() != main_thread or _len(current_frames()) > 1:
                tamper(f"{event} while other threads run (their frames can be the harness's checks)")
        elif event == "object.__getattr__" and args[0] is keeper:
            tamper("the frame of the harness's checks was asked for")
        elif event == "sys._getframe":
            frame_taken(args[0])
        elif event == "object.__getattr__" and _type(args[1]) is _str and _type(args[0]) is frame_attributes.get(args[1]):
            frame_taken(_getattr(args[0], args[1]))

    state["harness_code"] = _run.__code__
    sys.addaudithook(hook)


def _load_sources():
    """The solution and the tests, read and removed with the other inputs; the code then sees an empty
    working directory, as in the official harness."""
    with open("solution.py", encoding="utf-8") as fh:
        solution = fh.read()
    with open("tests.py", encoding="utf-8") as fh:
        tests = fh.read()
    for name in ("solution.py", "tests.py", "main.py"):
        os.remove(name)
    os.mkdir("task")
    os.chdir("task")
    return solution, tests


def _compile(solution, tests):
    """(solution's code, tests' code, None), or (None, None, the error): one source, as the official
    harness runs it, compiled in two parts (the solution's statements, then the tests') so that the
    harness can look between them; the lines keep their numbers in the whole."""
    source = solution + "\n\n" + tests
    # Tracebacks then quote the failing lines, which is what the final code generator needs to see.
    linecache.cache[TEST_FILE] = (len(source), None, source.splitlines(True), TEST_FILE)
    try:
        compile(source, TEST_FILE, "exec")  # the whole decides what is an error, and which
        tree = ast.parse(source, TEST_FILE)
    except (SyntaxError, ValueError):
        return None, None, traceback.format_exc()[-1500:]
    first_test_line = solution.count("\n") + 3
    solution_part = [stmt for stmt in tree.body if stmt.lineno < first_test_line]
    tests_part = [stmt for stmt in tree.body if stmt.lineno >= first_test_line]
    if tests_part and isinstance(tests_part[0], ast.Expr) and isinstance(tests_part[0].value, ast.Constant):
        tests_part.insert(0, ast.copy_location(ast.Pass(), tests_part[0]))  # not a docstring in the whole
    solution_code = compile(ast.Module(solution_part, []), TEST_FILE, "exec", dont_inherit=True)
    future = solution_code.co_flags & FUTURE_FLAGS  # a __future__ import of the solution covers the tests too
    functions = {stmt.name for stmt in solution_part if isinstance(stmt, ast.FunctionDef)}
    tests_module = ast.fix_missing_locations(_ThreadedCalls(functions).visit(ast.Module(tests_part, [])))
    return solution_code, compile(tests_module, TEST_FILE, "exec", flags=future, dont_inherit=True), None


class _ThreadedCalls(ast.NodeTransformer):
    """Every name in the tests that reads one of the solution's functions (`task_func`) reads it through
    THREADED, so the tests call it in a thread of its own: a frame the solution takes there (sys._getframe(1),
    inspect's stack, a traceback) leads to no frame of the tests, whose data (the `expected` a test compares
    with) it could otherwise change. The solution's calls of its own functions stay direct."""

    def __init__(self, functions):
        self.functions = functions

    def visit_Name(self, node):  # noqa: N802 - ast's visitor naming
        if node.id not in self.functions or not isinstance(node.ctx, ast.Load):
            return node
        return ast.copy_location(ast.Call(ast.Name(THREADED, ast.Load()), [node], []), node)


def _named(exc):
    try:
        return "".join(traceback.format_exception_only(type(exc), exc)).strip()[-300:]
    except BaseException:  # noqa: BLE001 - an exception whose str() fails is still named
        return type(exc).__name__


def _threaded_calls(tests_code):
    """THREADED (see _ThreadedCalls): a function of the solution, read by the tests, becomes one that the
    main thread runs in a fresh thread and waits for, with the caller's context variables (decimal's
    context); its result or exception comes back as it is. Anything else (the tests' own functions,
    classes, mocks) is returned untouched."""
    main, tests_codes = _thread.get_ident(), _nested_codes([tests_code])

    def threaded(func):
        if type(func) is not types.FunctionType or id(func.__code__) in tests_codes:
            return func

        @functools.wraps(func)
        def call(*args, **kwargs):
            if _thread.get_ident() != main:
                return func(*args, **kwargs)
            return _in_a_thread(func, args, kwargs)

        return call

    return threaded


def _in_a_thread(func, args, kwargs):
    done, box, context = _thread.allocate_lock(), [], contextvars.copy_context()
    done.acquire()

    def run():
        try:
            box.append((True, context.run(func, *args, **kwargs)))
        except BaseException as exc:  # noqa: BLE001 - raised again in the caller's thread, whatever it is
            box.append((False, exc))
        finally:
            done.release()

    sys.audit("optimas.call")  # the hook takes any signal handler set past signal.signal behind its dispatcher
    _thread.start_new_thread(run, ())
    done.acquire()
    (returned, value), = box
    box.clear()
    if returned:
        return value
    raise value


def _run(plan, run_case, loaded):
    solution_code, tests_code, error = loaded
    module = types.ModuleType("__test__")
    module.__file__ = TEST_FILE
    module.__builtins__ = vars(builtins)
    sys.modules["__test__"] = module
    if error is not None:
        sys.audit("optimas.loaded", ("error", error), None)
        return EXIT_ERROR
    try:
        exec(solution_code, module.__dict__)
        sys.audit("optimas.solution", module.__dict__)
        module.__dict__[THREADED] = _threaded_calls(tests_code)
        exec(tests_code, module.__dict__)
    except MemoryError:
        sys.audit("optimas.loaded", ("memory", "MemoryError while loading the code"), None)
        return EXIT_MEMORY
    except (KeyboardInterrupt, SystemExit) as exc:  # the code ended its own run: that fails it
        sys.audit("optimas.loaded", ("failed", f"the code raised {_named(exc)} while loading"), None)
        return EXIT_FAILED
    except BaseException:  # noqa: BLE001 - whatever the code raised, it did not load
        sys.audit("optimas.loaded", ("error", traceback.format_exc()[-1500:]), None)
        return EXIT_ERROR
    planned = tuple((cls, method) for cls, method in plan["tests"])  # the code could reach a list of them
    classes = {name: vars(module).get(name) for name, _ in planned}
    if any(not isinstance(cls, type) for cls in classes.values()):
        missing = sorted(n for n, c in classes.items() if not isinstance(c, type))
        sys.audit("optimas.loaded", ("error", f"the test classes {missing} are not classes after loading"), None)
        return EXIT_ERROR
    sys.audit("optimas.loaded", None, classes)
    result, current, class_error = Result(), None, None
    try:
        for index, (cls_name, method) in enumerate(planned):
            if classes[cls_name] is not current:  # class fixtures, as unittest's suite would run them
                _tear_down_class(current)
                current, class_error = classes[cls_name], None
                try:
                    current.setUpClass()
                except BaseException:  # noqa: BLE001 - every test of the class then fails with this error
                    class_error = sys.exc_info()
            test = current(method)
            sys.audit("optimas.begin", index, test)
            if class_error is None:
                try:
                    run_case(test, result)
                except KeyboardInterrupt:  # unittest lets it through to end the run; here it fails its test
                    result.addError(test, sys.exc_info())
            else:
                result.addError(test, class_error)
            sys.audit("optimas.end", index)
        _tear_down_class(current)
    except BaseException as exc:  # noqa: BLE001 - KeyboardInterrupt or SystemExit between tests
        sys.audit("optimas.aborted", f"the code raised {_named(exc)} between tests")
        return EXIT_FAILED
    sys.audit("optimas.done")
    return 0


def _tear_down_class(cls):
    if cls is not None:
        try:
            cls.tearDownClass()
        except Exception:  # noqa: BLE001 - the tests already reported; say it on stderr only
            traceback.print_exc()


def _journal():
    """A raw anonymous mapping, which no Python object refers to, and the function that writes it."""
    import ctypes
    import mmap

    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    address = libc.mmap(None, JOURNAL_BYTES, mmap.PROT_READ | mmap.PROT_WRITE,
                        mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS, -1, 0)
    if address in (None, ctypes.c_void_p(-1).value):
        raise OSError(ctypes.get_errno(), "mmap of the journal failed")
    return address, ctypes.memmove


def _worker(plan, wake, answer):
    """Runs the tests; holds neither the channel nor the key (forked before the judge read it), and
    its frame, under every frame of the solution, holds no part of the journal (_prepare's did)."""
    code = EXIT_ERROR
    try:
        os.close(CHANNEL_FD)
        prepared = _prepare(plan, wake, answer)
        if prepared is not None:
            code = _run(plan, *prepared)
            sys.stdout.flush()
            sys.stderr.flush()
    except BaseException:  # noqa: BLE001 - the harness itself failed: say where, for whoever reads stderr
        traceback.print_exc()
    finally:
        os._exit(code)  # no atexit handler or leftover thread of the solution may hold the exit


def _prepare(plan, wake, answer):
    """The journal mapped and handed to the judge, the sources loaded, the hook sealed over the journal:
    (unittest's own TestCase.run, the compiled sources), or None when the judge is not ready."""
    address, memmove = _journal()
    os.write(wake, struct.pack("<Q", address))
    if os.read(answer, 1) != b"g":  # the judge is ready: undumpable, the key read and deleted
        return None
    solution, tests = _load_sources()
    loaded = _compile(solution, tests)
    if "sqlite3" in solution or "sqlite3" in tests:
        _sqlite_across_threads()
    if "mock" in tests:
        importlib.import_module("unittest.mock")  # loaded now, so that _seal guards it as unittest
    run_case = unittest.TestCase.run  # unittest's own, taken before the solution can touch the class
    _strict_equality()  # before _seal, whose snapshot of unittest then holds the strict versions
    _guard_should_stop()
    _seal(plan, (address, memmove, wake, answer), loaded[1])
    # The judge's descriptor on this memory, and the seal's, are open: from now on no other process of
    # the sandbox's user (a program the solution starts has no audit hook) may open this one's memory,
    # write it or trace it.
    _undumpable()
    return run_case, loaded


def _sqlite_across_threads():
    """A sqlite3 connection the tests make and the solution uses (or the other way round) now crosses
    threads (THREADED), which sqlite3's same-thread check refuses: that check guards against use at
    the same time, and the two threads never run at once, so connections are made without it."""
    import sqlite3
    import sqlite3.dbapi2

    for module in (sqlite3, sqlite3.dbapi2):
        module.connect = functools.partial(module.connect, check_same_thread=False)


def _undumpable():
    """No other process of this user may read or write this one's memory, trace it or take its descriptors."""
    import ctypes

    if ctypes.CDLL(None, use_errno=True).prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_DUMPABLE) failed")


def _signed(key, body):
    return hashlib.blake2b(body, key=key, digest_size=16).hexdigest().encode() + b"\t" + body + b"\n"


def _forward(mem, address, key, sent):
    """Sign and send the records the worker committed past byte `sent`; return the new mark."""
    try:
        (length,) = struct.unpack("<Q", os.pread(mem, 8, address))
        if not sent < length <= JOURNAL_BYTES - 8:
            return sent
        data = os.pread(mem, length - sent, address + 8 + sent)
    except OSError:
        return sent  # the worker is gone
    if len(data) != length - sent:
        return sent
    try:
        os.write(CHANNEL_FD, b"".join(_signed(key, body) for body in data.split(b"\n")[:-1]))
    except OSError:
        pass
    return length


def _judge(worker, wake, answer):
    """The program's own process: signs what the worker journaled, then ends as the worker did."""
    try:
        mem = os.open(f"/proc/{worker}/mem", os.O_RDONLY)  # now, while the worker runs only this file
        (address,) = struct.unpack("<Q", os.read(wake, 8))
        _undumpable()
    except (OSError, struct.error) as exc:
        with open("key", "rb") as fh:
            key = fh.read()
        os.write(CHANNEL_FD, _signed(key, f"0\tload\terror\tthe harness cannot watch its tests: {exc}".encode()))
        os.kill(worker, signal.SIGKILL)
        os.waitpid(worker, 0)
        os._exit(EXIT_ERROR)
    with open("key", "rb") as fh:
        key = fh.read()
    os.remove("key")
    os.write(answer, b"g")
    poller = select.poll()
    poller.register(wake, select.POLLIN)
    try:
        ended = os.pidfd_open(worker)
        poller.register(ended, select.POLLIN)
    except (AttributeError, OSError):
        ended = None  # then the end of the pipe says the worker is done
    sent = 0
    while True:
        ready = {fd for fd, _ in poller.poll()}
        if wake in ready:
            if os.read(wake, 4096):
                sent = _forward(mem, address, key, sent)
                try:
                    os.write(answer, b"a")
                except OSError:
                    pass
                continue
            poller.unregister(wake)  # every writer closed it
            if ended is None:
                break
        elif ended in ready:
            break
    _, status = os.waitpid(worker, 0)
    if os.WIFSIGNALED(status):  # end the same way, so the runner classifies the run as it would
        sig = os.WTERMSIG(status)
        try:
            signal.signal(sig, signal.SIG_DFL)
        except (OSError, ValueError):
            pass  # SIGKILL cannot be handled anyway
        os.kill(os.getpid(), sig)
    os._exit(os.WEXITSTATUS(status) if os.WIFEXITED(status) else EXIT_FAILED)


def main():
    import json

    with open("plan.json", encoding="utf-8") as fh:
        plan = json.load(fh)
    os.remove("plan.json")
    wake_r, wake_w = os.pipe()
    answer_r, answer_w = os.pipe()
    worker = os.fork()  # before the key is read: the worker's memory never held it
    if worker == 0:
        os.close(wake_r)
        os.close(answer_w)
        _worker(plan, wake_w, answer_r)
    os.close(wake_w)
    os.close(answer_r)
    _judge(worker, wake_r, answer_w)


if __name__ == "__main__":
    main()
