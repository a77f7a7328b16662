"""The user's DSPy program run with its predictors answered from a table instead of an LM.

A predictor component runs one dspy.Predict; the Python code around the predictors (a retriever, an `if` on
an intermediate output, string formatting) runs here, replayed: the program's forward is called again with
every predictor that already ran answering with its recorded outputs, until the predictor asked about is
called (its inputs are then known) or the program returns (its final prediction). The code must therefore be
deterministic given its inputs and its predictors' outputs, as a DSPy program under a cached LM is.

What cannot be mapped to one component per predictor is refused in one line (`Unsupported`): a predictor
called twice in one run (loops, dspy.ReAct, dspy.Refine, dspy.BestOfN), a predictor called from another
thread (dspy.Parallel), an LM call outside the named predictors, per-call `config=`/`lm=`/`demos=`/`signature=`.
"""
from __future__ import annotations

import contextvars
import typing
from dataclasses import dataclass, field
from typing import Any

import dspy
from dspy.utils.exceptions import AdapterParseError

from optimas_cli.errors import UserError

PRIVILEGED = ("config", "lm", "demos", "signature")  # Predict's per-call keywords that change the call itself
UNSUPPORTED_HINT = ("pipeline=dspy maps each named predictor to one component called at most once per example "
                    "(see docs/own_pipeline.md)")


class Unsupported(UserError):
    """A construct of the program the tracer cannot map to components."""

    def __init__(self, what: str):
        super().__init__(what, UNSUPPORTED_HINT)


class _Reached(BaseException):  # BaseException: a program's own `except Exception` must not swallow it
    def __init__(self, inputs: dict):
        super().__init__()
        self.inputs = inputs


class _NotReached(BaseException):
    """The code called a predictor that comes after the one asked about: that one is not called on this example."""


class Unanswered(BaseException):
    """The code called a predictor the wiring says did not run on this example (the traced order is wrong for it)."""

    def __init__(self, name: str):
        super().__init__(name)
        self.name = name


@dataclass
class _Session:
    answers: dict[str, dict | None]  # predictor component -> its outputs (None: answer with placeholders)
    stop_at: str | None
    skipped: frozenset[str]
    calls: list[str] = field(default_factory=list)


@dataclass
class Outcome:
    """A replay's end: `inputs` of the predictor asked about (None: not called on this example), or the
    program's final `prediction`; `calls`: the predictors it called, in order."""

    calls: list[str]
    inputs: dict | None = None
    prediction: Any = None


_SESSION: contextvars.ContextVar[_Session | None] = contextvars.ContextVar("dspy_program_replay", default=None)


class _NoLM:
    """The engine of the LM the program sees while replayed: any call outside its named predictors is refused."""

    def complete(self, request):
        raise Unsupported("the program calls the LM outside its named predictors (dspy.settings.lm or an LM "
                          "object called directly)")

    def stream(self, request):
        return self.complete(request)

    def close(self) -> None:
        pass


def no_lm() -> dspy.LM:
    return dspy.LM("optimas/no-lm-outside-predictors", engine=_NoLM(), cache=False)


def placeholder(annotation: Any) -> Any:
    """A value of the field's type for a dry run: the first option of a Literal, the empty value otherwise."""
    origin = typing.get_origin(annotation)
    if origin is typing.Literal:
        return typing.get_args(annotation)[0]
    empty = {str: "", bool: False, int: 0, float: 0.0, list: [], dict: {}}
    return empty.get(origin or annotation)


class Replay:
    """A copy of the program whose predictors (`names`: predictor path -> component name) answer from a table."""

    def __init__(self, program: dspy.Module, names: dict[str, str]):
        self.program = program.deepcopy()
        self.signatures = {}
        for path, predictor in self.program.named_predictors():
            name = names[path]
            self.signatures[name] = predictor.signature
            # an instance attribute: Module.__call__ calls self.forward, so every other part of the call stays DSPy's
            predictor.forward = self._hook(name)
        self.foreign: list[str] = []  # predictors called outside the replaying thread

    @staticmethod
    def _foreign_message(name: str) -> str:
        return f"predictor {name!r} is called from another thread (dspy.Parallel or a thread pool in the program)"

    def _hook(self, name: str):
        def answer(**kwargs):
            session = _SESSION.get()
            if session is None:  # remembered too: dspy.Parallel logs its workers' errors and goes on
                self.foreign.append(name)
                raise Unsupported(self._foreign_message(name))
            if name in session.calls:
                raise Unsupported(f"predictor {name!r} is called twice in one run of the program (a loop, dspy.ReAct, "
                                  "dspy.Refine or dspy.BestOfN)")
            session.calls.append(name)
            privileged = [k for k in PRIVILEGED if k in kwargs]
            if privileged:
                raise Unsupported(f"predictor {name!r} is called with {privileged[0]}=, which pipeline=dspy cannot "
                                  "configure per call")
            if name == session.stop_at:
                raise _Reached(kwargs)
            if name in session.skipped or (name not in session.answers and session.stop_at is None):
                raise Unanswered(name)
            if name not in session.answers:
                raise _NotReached()
            outputs = session.answers[name]
            signature = self.signatures[name]
            if outputs is None:  # a dry run: values of the declared types
                outputs = {f: placeholder(info.annotation) for f, info in signature.output_fields.items()}
            elif all(v is None for v in outputs.values()):  # its call failed to parse: it raises here, as in DSPy
                raise AdapterParseError(adapter_name="ChatAdapter", signature=signature, lm_response="",
                                        message=f"predictor {name!r}: no output fields in its reply")
            return dspy.Prediction.from_completions([dict(outputs)], signature=signature)

        return answer

    def run(self, inputs: dict, answers: dict[str, dict | None], stop_at: str | None = None,
            skipped: frozenset[str] = frozenset()) -> Outcome:
        """Run the program on `inputs`, each predictor in `answers` answering with its outputs, until `stop_at` is
        called (None: to the program's return); a predictor after it in the wiring, called first, means `stop_at`
        is not called on this example. Raises Unanswered(name) where the code calls a predictor that was
        `skipped` (or, run to its return, one without an answer). Exceptions of the program's own code propagate."""
        session = _Session(answers, stop_at, frozenset(skipped))
        token = _SESSION.set(session)
        try:
            with dspy.context(lm=no_lm(), trace=None):
                prediction = self.program(**inputs)
        except _Reached as reached:
            return Outcome(session.calls, inputs=reached.inputs)
        except _NotReached:
            return Outcome(session.calls)
        finally:
            _SESSION.reset(token)
            if self.foreign:
                name = self.foreign[-1]
                self.foreign.clear()
                raise Unsupported(self._foreign_message(name))
        return Outcome(session.calls) if stop_at is not None else Outcome(session.calls, prediction=prediction)

    def dry_run(self, inputs: dict) -> Outcome:
        """Every predictor answers with placeholders of its output types: the calls the code makes on `inputs`."""
        return self.run(inputs, dict.fromkeys(self.signatures))
