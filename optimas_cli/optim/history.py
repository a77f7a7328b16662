"""One entry of an optimization's history: the contract every method writes and the report reads.

Validation values are the SUMMED reward over the `n` examples the gate scores on (`scored_on`: the
validation split, or a training sample for LLMSelector's estimates), before the proposal, of the
candidate (None when nothing new was proposed), and after the decision. `runs_so_far` is the
ledger's equivalent system runs when the entry was written: the x axis of a validation curve by cost.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

NUMBER = (int, float)
# What a reader may rely on in a saved entry (results.json, checkpoints): what makes it an iteration's
# record, and the fields the report computes with when they are there (None where the field allows it).
REQUIRED = {"iteration": (int,), "accepted": (bool,)}
OPTIONAL = {"val_before": NUMBER, "val_after": NUMBER, "val_candidate": NUMBER, "runs_so_far": NUMBER, "n": (int,),
            "scored_on": (str,), "gate": (dict,)}
GATE = {"rule": (str,), "accepted": (bool,), "delta": NUMBER, "ci_low": NUMBER, "ci_high": NUMBER}


@dataclass
class HistoryEntry:
    iteration: int
    component: str | list[str] | None   # what the proposal changed (several for whole-system methods)
    val_before: float
    val_after: float
    accepted: bool
    runs_so_far: float
    n: int = 0                          # examples behind each total (a mean is total / n)
    scored_on: str = "validation"
    val_candidate: float | None = None
    kind: str | None = None             # the configuration kind (prompt, choice, weights)
    proposal: Any = None
    local_score: float | None = None    # mean r_k of the proposal on the search sample
    baseline_local_score: float | None = None
    gate: dict | None = None            # how the validation gate decided (rule, delta, CI)
    note: str = ""
    details: dict = field(default_factory=dict)  # method-specific evidence

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> HistoryEntry:
        known = {f.name for f in dataclasses.fields(cls)}
        extra = {k: v for k, v in data.items() if k not in known}
        entry = cls(**{k: v for k, v in data.items() if k in known})
        entry.details.update(extra)
        return entry


def history_problem(history: Any) -> str | None:
    """What is wrong with a saved history (a list of HistoryEntry dicts), in words; None when nothing is."""
    if not isinstance(history, list):
        return f"history is {_shown(history)}, not a list of iteration entries"
    for i, entry in enumerate(history):
        if not isinstance(entry, dict):
            return f"history[{i}] is {_shown(entry)}, not an iteration entry (a JSON object)"
        missing = [key for key in REQUIRED if key not in entry]
        if missing:
            return f"history[{i}] lacks {', '.join(missing)}"
        wrong = _mistyped(entry, REQUIRED) or _mistyped(entry, OPTIONAL, none_ok=True)
        if wrong:
            return f"history[{i}].{wrong}"
        if isinstance(entry.get("gate"), dict):
            wrong = _mistyped(entry["gate"], GATE, missing_ok=False)
            if wrong:
                return f"history[{i}].gate.{wrong}"
    return None


def _mistyped(data: dict, types: dict, none_ok: bool = False, missing_ok: bool = True) -> str | None:
    for key, kinds in types.items():
        if key not in data:
            if missing_ok:
                continue
            return f"{key} is missing"
        value = data[key]
        if value is None and none_ok:
            continue
        if isinstance(value, bool) != (bool in kinds) or not isinstance(value, kinds):
            return f"{key} is {_shown(value)}, not of type {' or '.join(k.__name__ for k in kinds)}"
    return None


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
