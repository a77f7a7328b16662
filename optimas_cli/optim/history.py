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
