"""The user's side of pipeline=dspy: the program named `module:attribute`, its data sets and its metric.

The convention (docs/own_pipeline.md): the program's module holds, beside the program, `trainset`, `devset`
and `testset` (lists of dspy.Example with their inputs marked by .with_inputs(...)) and `metric(example,
prediction, trace=None)`, DSPy's own metric signature; the pipeline's keys name other attributes, or
`module:attribute` elsewhere. The module imports dspy, never optimas. A module is an importable name or a .py
file's path (`examples/dspy_program/rag.py:program`), imported as `python FILE` imports it: its folder first on
the import path, so the modules beside it import as they do when the program runs on its own.
"""
from __future__ import annotations

import importlib
import re
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import dspy

from optimas_cli.errors import UserError

HOW = "see docs/own_pipeline.md (already have a DSPy program?)"
# Modules whose predictors run in a loop or on tools: no fixed set of one call per predictor to map.
UNSUPPORTED_MODULES = {
    dspy.ReAct: "dspy.ReAct (tool calls in a loop)",
    dspy.ReActV2: "dspy.ReActV2 (tool calls in a loop)",
    dspy.CodeAct: "dspy.CodeAct (tool calls in a loop)",
    dspy.ProgramOfThought: "dspy.ProgramOfThought (generated code, retried in a loop)",
    dspy.Refine: "dspy.Refine (its module run several times)",
    dspy.BestOfN: "dspy.BestOfN (its module run several times)",
    dspy.RLM: "dspy.RLM (a model-driven loop)",
}


def resolve(spec: str, home: ModuleType | None, key: str) -> Any:
    """`module:attribute`, or an attribute of `home` (the program's module)."""
    if ":" in spec or home is None:
        module_name, sep, attribute = spec.partition(":")
        if not sep or not module_name or not attribute:
            raise UserError(f"pipeline.{key}={spec!r} is not module:attribute",
                            f"name it like my_program:{key}, the module importable from where optimas runs")
        home = import_module(module_name, key)
        spec = attribute
    if not hasattr(home, spec):
        raise UserError(f"{home.__name__} has no {spec!r} (pipeline.{key})", f"define it there; {HOW}")
    return getattr(home, spec)


def import_module(name: str, key: str) -> ModuleType:
    """The module `name`: importable from here, or a .py file's path (its folder goes first on the import path)."""
    if name.endswith(".py"):
        path = Path(name).resolve()
        if not path.is_file():
            raise UserError(f"pipeline.{key} file {name} does not exist", "give the .py file's path from where optimas "
                            "runs, or an importable module name")
        if str(path.parent) not in sys.path:
            sys.path.insert(0, str(path.parent))
        name = path.stem
        loaded = sys.modules.get(name)
        if loaded is not None and Path(getattr(loaded, "__file__", "") or "").resolve() != path:
            raise UserError(f"pipeline.{key} file {path} and the already imported module {name!r} "
                            f"({getattr(loaded, '__file__', None)}) share one name", "rename the file")
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        raise UserError(f"cannot import pipeline.{key} module {name!r} ({type(exc).__name__}: {exc})",
                        "run optimas from the folder that holds it, add that folder to PYTHONPATH, or give the "
                        "file's path (path/to/module.py:attribute)") from None


def load_program(spec: str | None) -> tuple[dspy.Module, ModuleType]:
    """The dspy.Module `spec` names (an instance, or a Module class built with no arguments) and its module."""
    if not spec:
        raise UserError("pipeline=dspy needs the program to optimize", "add program=my_module:my_program")
    found = resolve(spec, None, "program")
    home = import_module(spec.partition(":")[0], "program")
    if isinstance(found, type) and issubclass(found, dspy.Module):
        found = found()
    if not isinstance(found, dspy.Module):
        raise UserError(f"program {spec} is a {type(found).__name__}, not a dspy.Module",
                        "name a dspy.Module instance, or a dspy.Module class that takes no arguments")
    refuse_unsupported(found, spec)
    return found, home


def refuse_unsupported(program: dspy.Module, spec: str) -> None:
    for path, module in program.named_sub_modules():
        for kind, what in UNSUPPORTED_MODULES.items():
            if isinstance(module, kind):
                raise UserError(f"program {spec} uses {what} at {path!r}, which pipeline=dspy cannot map to components",
                                "optimize a program of plain predictors (dspy.Predict, dspy.ChainOfThought) and "
                                "Python code; " + HOW)
    if not program.named_predictors():
        raise UserError(f"program {spec} has no predictors (dspy.Predict, dspy.ChainOfThought)",
                        "name a dspy.Module whose attributes hold its predictors")
    for path, predictor in program.named_predictors():
        if not predictor.signature.input_fields:
            raise UserError(f"predictor {path!r} of program {spec} has no input fields",
                            "give its signature at least one input field")
        for field, info in {**predictor.signature.input_fields, **predictor.signature.output_fields}.items():
            if "Tool" in repr(info.annotation):
                raise UserError(f"predictor {path!r} of program {spec} has the tool field {field!r}: tool calling is "
                                "not supported", "call tools in the program's Python code; " + HOW)


def component_names(program: dspy.Module, spec: str) -> dict[str, str]:
    """Predictor path -> component name (`cot.predict` -> `cot_predict`): names that fit a field name and a file."""
    names = {path: re.sub(r"\W+", "_", path).strip("_") or "predictor" for path, _ in program.named_predictors()}
    taken: dict[str, str] = {}
    for path, name in names.items():
        if name in taken:
            raise UserError(f"predictors {taken[name]!r} and {path!r} of program {spec} both map to component {name!r}",
                            "rename one of the attributes")
        taken[name] = path
    return names


def examples(value: Any, key: str) -> list[dspy.Example]:
    """A data set as a list of dspy.Example with their input fields marked."""
    if not isinstance(value, list | tuple) or not value:
        raise UserError(f"pipeline.{key} is {type(value).__name__}{' (empty)' if not value else ''}, not a list of "
                        "dspy.Example", f"set it to [dspy.Example(...).with_inputs(...), ...]; {HOW}")
    for i, example in enumerate(value):
        if not isinstance(example, dspy.Example) or not example._input_keys:
            raise UserError(f"pipeline.{key}[{i}] is not a dspy.Example with its inputs marked",
                            "build it as dspy.Example(question=..., answer=...).with_inputs('question')")
    return list(value)
