"""Prompt candidates that do not depend on the optimizer LM's writing (the `pool` proposer).

A 135M optimizer LM mostly writes word salad, so the prompt search also draws from:
  alternative  instructions the pipeline ships for the component (Component.alternatives), written
               for what its metric rewards (answer length for F1, the label set, the index format);
  constrain    the current best instruction plus the first of the component's output-format
               constraints it lacks (Component.format_constraints, loosest first: adding the next
               one tightens the format); a generic pair where the pipeline declares none;
  shorten      the current best instruction without its last sentence;
  example      the current best instruction plus a worked example: the search input whose output
               the component's local reward scored highest, with that output.
Edits apply to the best instruction found so far, so successive steps compose them. A search that
takes its candidates up front (DSPy's MIPROv2) gets `fixed_drafts`: the same pool, drawn once from the
original instruction.
"""
from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from optimas_cli.system.component import Component

GENERIC_CONSTRAINTS = (
    "Reply in exactly the format asked for, with nothing else.",
    "Keep the reply as short as that format allows.",
)
EXAMPLE_HEADER = "Example of a good reply:"
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=\S)")


@dataclass(frozen=True)
class Draft:
    text: str
    source: str  # alternative | constrain | shorten | example | lm


def _norm(text: str) -> str:
    return " ".join(text.lower().split())


def add_constraint(instruction: str, constraints: Sequence[str]) -> str | None:
    missing = [c for c in constraints if _norm(c) not in _norm(instruction)]
    return f"{instruction.strip()} {missing[0]}".strip() if missing else None


def shorten(instruction: str) -> str | None:
    sentences = _SENTENCE_END.split(instruction.strip())
    return " ".join(sentences[:-1]) if len(sentences) >= 2 else None


def worked_example(component: Component, inputs: dict, outputs: dict, chars: int) -> str:
    """The example as the component's prompt labels its fields (a PromptComponent's `labels`)."""
    labels = getattr(component, "labels", None) or {f: f for f in component.inputs}

    def cut(value) -> str:
        text = " ".join(str(value or "").split())
        return text if len(text) <= chars else text[:chars] + " ..."

    shown = [f"{label}: {cut(inputs.get(field))}" for field, label in labels.items()]
    shown += [f"{field}: {cut(outputs.get(field))}" for field in component.outputs]
    return EXAMPLE_HEADER + "\n" + "\n".join(shown)


def pool_drafts(component: Component, best: str, example: str | None) -> list[Draft]:
    """Every pool candidate for the component, given the best instruction so far and a worked example."""
    drafts = [Draft(text, "alternative") for text in component.alternatives]
    constrained = add_constraint(best, component.format_constraints or GENERIC_CONSTRAINTS)
    if constrained:
        drafts.append(Draft(constrained, "constrain"))
    short = shorten(best)
    if short:
        drafts.append(Draft(short, "shorten"))
    if example and EXAMPLE_HEADER not in best:
        drafts.append(Draft(f"{best.strip()}\n\n{example}".strip(), "example"))
    return drafts


def fixed_drafts(component: Component, instruction: str) -> list[Draft]:
    """The pool as one fixed list of candidates for `instruction`: every draft but the worked example
    (which needs a local reward to pick its input), without repeats or the instruction itself."""
    seen, out = {_norm(instruction)}, []
    for d in pool_drafts(component, instruction, None):
        if d.text.strip() and _norm(d.text) not in seen:
            seen.add(_norm(d.text))
            out.append(d)
    return out


def draw(drafts: Sequence[Draft], usable, n: int, rng: np.random.Generator) -> list[Draft]:
    """Up to n drafts that `usable(text)` accepts, in a random order (edits and alternatives mixed)."""
    picked: list[Draft] = []
    for i in rng.permutation(len(drafts)):
        if len(picked) == n:
            break
        if usable(drafts[i].text):
            picked.append(drafts[i])
    return picked
