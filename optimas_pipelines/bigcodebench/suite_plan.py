"""Which tests a suite holds, read from its source without running it (in the trusted runner).

The harness in the sandbox runs exactly these tests and must report each of them; the runner
checks that it did. Reading the tests rather than asking the sandboxed process means that code
that stops unittest from finding or running tests (a no-op `TestCase.run`, an empty suite, a
TestCase class of its own) cannot change the count the verdict is checked against.
Collected as unittest's loader would: module-level classes deriving (directly or through other
classes of the module) from a `...TestCase`, their callable `test*` methods, sorted by name,
classes in the order they are defined. Tests created at run time (setattr in a loop) are not seen.
"""
from __future__ import annotations

import ast
import builtins
import symtable
from dataclasses import dataclass, field


@dataclass
class SuitePlan:
    tests: list[tuple[str, str]] = field(default_factory=list)  # (class name, method name), in run order
    # Every name each test class (and each of its in-module bases) defines itself: these, and only
    # these, may override what unittest.TestCase defines (setUp, tearDown, a helper assert...).
    own_names: dict[str, list[str]] = field(default_factory=dict)
    # Builtins the tests call without defining them: a global of the solution by one of these names
    # would answer in the builtin's place (an `abs` that returns 0), so the harness forbids it.
    builtins_used: list[str] = field(default_factory=list)
    # The global names the tests read without defining or importing them: the solution's (task_func,
    # its constants, the code prompt's `np`), which the out-of-process judge binds in the tests' module.
    solution_names: list[str] = field(default_factory=list)
    # What the tests import (names bound by their import statements) and the library functions they
    # reach through them (`np.testing.assert_array_equal`, `math.isclose`): the in-process harness
    # takes these before the solution runs and treats a rebinding as tampering.
    imported_names: list[str] = field(default_factory=list)
    library_attributes: list[str] = field(default_factory=list)

    def to_json(self) -> dict:
        return {"tests": [list(t) for t in self.tests], "own_names": self.own_names,
                "builtins_used": self.builtins_used, "solution_names": self.solution_names,
                "imported_names": self.imported_names, "library_attributes": self.library_attributes}


# What every module's namespace holds (its __name__ ...): these names are the module's, not the solution's.
MODULE_NAMES = {"__name__", "__doc__", "__package__", "__loader__", "__spec__", "__file__", "__builtins__"}


def _base_name(node: ast.expr) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return ""


def _functions(body: list[ast.stmt]) -> list[str]:
    return [s.name for s in body if isinstance(s, ast.FunctionDef | ast.AsyncFunctionDef)]


def _defined_names(body: list[ast.stmt]) -> list[str]:
    names = []
    for stmt in body:
        if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.append(stmt.name)
        elif isinstance(stmt, ast.Assign | ast.AnnAssign | ast.AugAssign):
            targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
            names += [n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)]
        elif isinstance(stmt, ast.Import | ast.ImportFrom):
            names += [(a.asname or a.name).split(".")[0] for a in stmt.names]
    return names


def _global_reads(source: str) -> set[str]:
    """Names read as globals in any scope of `source` (a class body's and a function's free names too)."""
    reads, todo = set(), [symtable.symtable(source, "tests", "exec")]
    while todo:
        table = todo.pop()
        top = table.get_type() == "module"
        reads.update(s.get_name() for s in table.get_symbols()
                     if s.is_referenced() and (s.is_global() if not top else not (s.is_assigned() or s.is_imported())))
        todo += table.get_children()
    return reads


def _imports(module: ast.Module) -> tuple[dict[str, str], list[str]]:
    """(name the tests' top-level imports bind -> what it names, dotted; the dotted library names
    the tests use through those names: `np.testing.assert_array_equal` -> numpy.testing.assert_array_equal)."""
    bound: dict[str, str] = {}
    for stmt in module.body:
        if isinstance(stmt, ast.Import):
            for alias in stmt.names:
                bound[alias.asname or alias.name.split(".")[0]] = alias.name if alias.asname else alias.name.split(".")[0]
        elif isinstance(stmt, ast.ImportFrom) and stmt.level == 0 and stmt.module:
            bound.update({alias.asname or alias.name: f"{stmt.module}.{alias.name}" for alias in stmt.names if alias.name != "*"})
    used = set()
    for node in ast.walk(module):
        chain = []
        while isinstance(node, ast.Attribute):
            chain.insert(0, node.attr)
            node = node.value
        if isinstance(node, ast.Name) and node.id in bound and (chain or "." in bound[node.id]):
            used.add(".".join([bound[node.id], *chain]))
    return bound, sorted(used)


def plan_suite(tests_source: str) -> SuitePlan:
    """The plan of `tests_source`; an unparsable source gives an empty plan (the run then reports the syntax error)."""
    try:
        module = ast.parse(tests_source)
    except (SyntaxError, ValueError):
        return SuitePlan()
    aliases = {"TestCase", "IsolatedAsyncioTestCase"}
    for stmt in module.body:  # from unittest import TestCase as TC
        if isinstance(stmt, ast.ImportFrom) and stmt.module == "unittest":
            aliases.update(a.asname for a in stmt.names if a.asname and a.name.endswith("TestCase"))
    classes: dict[str, tuple[list[str], list[str], list[str]]] = {}  # name -> (test bases, own names, functions)
    plan = SuitePlan()
    loaded = {n.id for n in ast.walk(module) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    plan.builtins_used = sorted((loaded & set(dir(builtins))) - set(_defined_names(module.body)) - MODULE_NAMES)
    bound, plan.library_attributes = _imports(module)
    plan.imported_names = sorted(bound)
    plan.solution_names = sorted(_global_reads(tests_source) - set(dir(builtins)) - set(_defined_names(module.body))
                                 - MODULE_NAMES)
    for stmt in module.body:
        if not isinstance(stmt, ast.ClassDef):
            continue
        bases = [_base_name(b) for b in stmt.bases]
        if not any(b in classes or b in aliases or b.endswith("TestCase") for b in bases):
            continue
        classes[stmt.name] = ([b for b in bases if b in classes], _defined_names(stmt.body), _functions(stmt.body))
        methods, seen, todo = set(), set(), [stmt.name]
        while todo:  # the class and its in-module test bases
            name = todo.pop()
            if name in seen:
                continue
            seen.add(name)
            inherited, own, functions = classes[name]
            plan.own_names[name] = own
            methods.update(n for n in functions if n.startswith("test"))
            todo += inherited
        plan.tests += [(stmt.name, m) for m in sorted(methods)]
    return plan
