"""The components a DSPy program becomes. For each named predictor P, in the order the program calls them:

    <P>_inputs   the program's Python code up to P's call (a retriever, an `if`, string formatting), replayed
                 with the outputs of the predictors before P: P's inputs, or None for each where P is not called
    <P>          P itself, a prompt component: one dspy.Predict call per input, its signature's instructions the
                 configuration; DSPy formats and parses the call (the program's adapter, P's demos), the run's
                 LM layer answers it (cache, ledger, caps)
    program_output   the code after the last predictor: the program's final prediction

Fields are named <P>__<signature field>. Each step reads everything a predictor before it wrote (Python code may
read any of it), so changing P re-runs P and everything after it.
"""
from __future__ import annotations

import contextvars
import logging
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import dspy
from dspy.utils.exceptions import AdapterParseError

from optimas_cli.errors import UserError
from optimas_cli.methods.dspy_mipro import RunLMEngine
from optimas_cli.system import Component, ConfigKind
from optimas_cli.system.parsing import PARSE_FAILURES
from optimas_pipelines.dspy_program.replay import Replay, Unanswered, Unsupported

log = logging.getLogger("optimas")
PROGRAM_ERRORS = "program_errors"  # examples where the program's own code raised (scored as DSPy's Evaluate does: 0)
OUTPUT = "program_output"
Fields = tuple[tuple[str, ...], tuple[str, ...]]  # a predictor's signature input fields, output fields
CONCURRENT_CALLS = 32  # one batch's predictor calls in flight at once: the local provider batches what arrives together


def field_name(component: str, field: str) -> str:
    return f"{component}__{field}"


def _called(inputs: dict) -> bool:
    """A predictor runs where the program called it: its code step wrote its inputs (None each where not)."""
    return any(v is not None for v in inputs.values())


class ProgramCode(Component):
    """The program's code up to one predictor's call (`target`; None: to its return), replayed per example."""

    def __init__(self, name: str, description: str, replay: Replay, target: str | None, system_inputs: Sequence[str],
                 earlier: dict[str, Fields], outputs: Sequence[str], order: Sequence[str]):
        inputs = (*system_inputs, *(field_name(p, f) for p, (ins, outs) in earlier.items() for f in (*ins, *outs)))
        super().__init__(name, description, inputs=inputs, outputs=tuple(outputs), kind=ConfigKind.NONE)
        self.replay, self.target, self.system_inputs = replay, target, tuple(system_inputs)
        self.earlier, self.order = earlier, tuple(order)
        self._warned: set[str] = set()

    def replayed(self, x: dict, ctx) -> Any:
        """The replay's outcome on one example, or None where the program's own code raised (counted, logged once)."""
        answers, skipped = {}, set()
        for p, (ins, outs) in self.earlier.items():
            if _called({f: x[field_name(p, f)] for f in ins}):
                answers[p] = {f: x[field_name(p, f)] for f in outs}
            else:
                skipped.add(p)
        try:
            return self.replay.run({f: x[f] for f in self.system_inputs}, answers, self.target, frozenset(skipped))
        except Unsupported:
            raise
        except AdapterParseError:  # a predictor's reply did not parse (counted there): DSPy's program stops here
            return None
        except Unanswered as missing:
            raise UserError(f"on an example the program called predictor {missing.name!r} where the order traced "
                            f"on training examples ({' -> '.join(self.order)}) had not run it", "declare the predictors in the program's __init__ in the "
                            "order its forward calls them (the order predictors take where a dry run never calls them)"
                            ) from None
        except Exception as exc:  # the user's code failed on this example: no inputs for what follows
            ctx.count(self.name, PROGRAM_ERRORS)
            where = f"{type(exc).__name__}: {exc}"[:300]
            if where not in self._warned:
                self._warned.add(where)
                log.warning("the DSPy program raised %s in %s; the example goes on without it", where, self.name)
            return None


class PredictorInputs(ProgramCode):
    def __init__(self, replay: Replay, target: str, target_fields: Sequence[str], system_inputs: Sequence[str],
                 earlier: dict[str, Fields], order: Sequence[str]):
        super().__init__(f"{target}_inputs", f"The program's Python code up to predictor {target}'s call: its inputs.",
                         replay, target, system_inputs, earlier, [field_name(target, f) for f in target_fields], order)
        self.target_fields = tuple(target_fields)

    def forward(self, inputs: list[dict], value, ctx) -> list[dict]:
        outs = []
        for x in inputs:
            outcome = self.replayed(x, ctx)
            called = outcome.inputs if outcome is not None and outcome.inputs is not None else {}
            outs.append({field_name(self.target, f): called.get(f) for f in self.target_fields})
        return outs


class ProgramOutput(ProgramCode):
    """The program's final prediction: `fields` maps each output field to the prediction's key."""

    def __init__(self, replay: Replay, system_inputs: Sequence[str], earlier: dict[str, Fields],
                 fields: dict[str, str], order: Sequence[str]):
        super().__init__(OUTPUT, "The program's Python code after its predictors: its final prediction.", replay, None,
                         system_inputs, earlier, list(fields), order)
        self.fields = dict(fields)

    def forward(self, inputs: list[dict], value, ctx) -> list[dict]:
        outs = []
        for x in inputs:
            outcome = self.replayed(x, ctx)
            prediction = outcome.prediction if outcome is not None else None
            outs.append({f: _get(prediction, key) for f, key in self.fields.items()})
        return outs


def _get(prediction: Any, key: str) -> Any:
    if prediction is None:
        return None
    return prediction.get(key) if hasattr(prediction, "get") else getattr(prediction, key, None)


class PredictorStep(Component):
    """One named predictor as a prompt component. Its configuration is its signature's instructions; its demos
    stay as the program has them. Each input is one real `predictor(...)` call (DSPy's adapter formats and
    parses it, JSON fallback included) whose LM is the run's, through the DSPy bridge of the dspy method. A reply
    that does not parse counts a parse failure and leaves the outputs None: the replayed program raises DSPy's
    AdapterParseError there, so, as under DSPy, nothing after it runs on that example."""

    calls_lm = True

    def __init__(self, name: str, path: str, predictor: dspy.Predict, max_tokens: int):
        signature = predictor.signature
        self.fields_in, self.fields_out = tuple(signature.input_fields), tuple(signature.output_fields)
        super().__init__(name, f"DSPy predictor {path} ({', '.join(self.fields_in)} -> {', '.join(self.fields_out)})",
                         inputs=tuple(field_name(name, f) for f in self.fields_in),
                         outputs=tuple(field_name(name, f) for f in self.fields_out),
                         kind=ConfigKind.PROMPT, default=signature.instructions, when=_called)
        self.path, self.predictor, self.max_tokens = path, predictor, int(max_tokens)

    def forward(self, inputs: list[dict], value, ctx) -> list[dict]:
        signature = self.predictor.signature.with_instructions(str(value))
        rows = ctx.noise_rows

        def call(i: int) -> dict:
            # one bridge per row: its first call is the context's sample, keyed by this row's shared noise
            row_ctx = ctx.replace(noise_rows=(rows[i],)) if rows else ctx
            engine = RunLMEngine(row_ctx, component=self.name, max_tokens=self.max_tokens)
            lm = dspy.LM(f"optimas/{self.name}", engine=engine, cache=False)
            kwargs = {f: inputs[i][field_name(self.name, f)] for f in self.fields_in
                      if inputs[i][field_name(self.name, f)] is not None}
            try:
                prediction = self.predictor(**kwargs, signature=signature, lm=lm)
            except AdapterParseError:  # DSPy found no output fields in the reply (after its JSON fallback)
                ctx.count(self.name, PARSE_FAILURES)
                return dict.fromkeys(self.outputs)
            return {field_name(self.name, f): prediction.get(f) for f in self.fields_out}

        # each call in the caller's DSPy context (a dspy.context(adapter=...) around the run), as dspy.Parallel does
        contexts = [contextvars.copy_context() for _ in inputs]
        with ThreadPoolExecutor(max_workers=max(1, min(len(inputs), CONCURRENT_CALLS))) as pool:
            return list(pool.map(lambda i: contexts[i].run(call, i), range(len(inputs))))
