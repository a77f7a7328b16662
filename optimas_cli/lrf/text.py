"""The text phi reads for r_k(x_k, y_k): component name, description, input fields, output fields.

A backbone sees at most `max_length` tokens. The output is what r_k ranks, so it gets first claim
on the budget (at least half of it when it is long); the inputs share what is left, each field
keeping up to an equal share so one long field (retrieved passages) cannot crowd out a short one
(the question). A field cut to fit keeps its head and its tail: two outputs that share a beginning
(top-5 and top-25 passages start alike) still differ where they end.

A component may declare a view per field (Component.reward_view, names from VIEWS): what r_k must
see of it to tell two outputs apart, e.g. a retriever's passages read as their count and titles.
"""
from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

DESCRIPTION_SHARE = 0.2  # the description never takes more than this share of the budget
SAFETY_MARGIN = 4  # tokens kept free: joining pieces can tokenize a little differently
MARK_TOKENS = 1  # room for the "…" that marks a cut (one token)
MIN_SPLIT_TOKENS = 16  # below this, a cut keeps only the head (a 3-token tail would say nothing)


def format_value(value: Any) -> str:
    if value is None:
        return "(none)"
    if isinstance(value, str):
        return value
    if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
        return "\n".join(f"- {v}" for v in value)
    return json.dumps(value, ensure_ascii=False, default=str)


def titled_lines(value: Any) -> str:
    """Lines of 'title | text' (retrieved passages) read as how many there are and their titles."""
    lines = [ln for ln in format_value(value).splitlines() if ln.strip()]
    titles = [ln.split(" | ", 1)[0].strip() for ln in lines]
    return f"{len(lines)} passages: " + "; ".join(titles)


VIEWS = {"text": format_value, "titled_lines": titled_lines}


@dataclass(frozen=True)
class ComponentInfo:
    """What the reward model knows about a component besides its inputs and outputs."""

    name: str
    description: str = ""
    inputs: tuple[str, ...] = field(default_factory=tuple)
    outputs: tuple[str, ...] = field(default_factory=tuple)
    views: Mapping[str, str] = field(default_factory=dict)  # field -> VIEWS name; others read as text

    def __post_init__(self) -> None:
        unknown = {f: v for f, v in self.views.items() if v not in VIEWS}
        if unknown:
            raise ValueError(f"component {self.name!r}: unknown reward view(s) {unknown}; known: {sorted(VIEWS)}")

    def view(self, name: str, value: Any) -> str:
        return VIEWS[self.views.get(name, "text")](value)

    def to_dict(self) -> dict:
        return {"description": self.description, "inputs": list(self.inputs), "outputs": list(self.outputs),
                "views": dict(self.views)}


def component_info(name: str, spec: Any) -> ComponentInfo:
    """Accept a Component, a description string, or a dict {description, inputs, outputs, views}."""
    if isinstance(spec, ComponentInfo):
        return spec
    if isinstance(spec, str):
        return ComponentInfo(name, spec)
    if isinstance(spec, Mapping):
        return ComponentInfo(name, str(spec.get("description", "")), tuple(spec.get("inputs", ())),
                             tuple(spec.get("outputs", ())), dict(spec.get("views") or {}))
    if hasattr(spec, "description") and hasattr(spec, "inputs"):  # optimas_cli.system.Component
        return ComponentInfo(name, spec.description, tuple(spec.inputs), tuple(spec.outputs),
                             dict(getattr(spec, "reward_view", None) or {}))
    raise TypeError(f"component {name!r}: expected a Component, a description or a dict, got {type(spec).__name__}")


def component_infos(system) -> dict[str, ComponentInfo]:
    """One ComponentInfo per component of a CompoundSystem (what LocalRewardModel takes)."""
    return {name: component_info(name, comp) for name, comp in system.components.items()}


def fair_shares(lengths: Sequence[int], budget: int) -> list[int]:
    """Split `budget` over pieces: short pieces keep their length, long ones share the rest equally."""
    alloc = [0] * len(lengths)
    open_idx = [i for i, n in enumerate(lengths) if n > 0]
    remaining = max(budget, 0)
    while open_idx and remaining > 0:
        share = remaining // len(open_idx)
        if share == 0:
            break
        fits = [i for i in open_idx if lengths[i] - alloc[i] <= share]
        if not fits:
            for i in open_idx:
                alloc[i] += share
            remaining -= share * len(open_idx)
            break
        for i in fits:
            remaining -= lengths[i] - alloc[i]
            alloc[i] = lengths[i]
        open_idx = [i for i in open_idx if i not in fits]
    return alloc


class TextRenderer:
    """Renders (component, inputs, output) into one string that fits the tokenizer's budget."""

    def __init__(self, tokenizer, max_length: int):
        self.tokenizer = tokenizer
        self.max_length = int(max_length)
        specials = tokenizer.num_special_tokens_to_add(pair=False) if hasattr(tokenizer, "num_special_tokens_to_add") else 2
        self.budget = max(16, self.max_length - specials - SAFETY_MARGIN)

    def _count(self, text: str) -> int:
        return len(self.tokenizer(text, add_special_tokens=False, verbose=False)["input_ids"])

    def _cut(self, text: str, n_tokens: int) -> str:
        """`text` within n_tokens tokens: its head and its tail around a " … " mark (the head alone
        when the budget is too small to be worth splitting)."""
        if n_tokens <= 0:
            return "…"
        enc = self.tokenizer(text, add_special_tokens=False, verbose=False,
                             return_offsets_mapping=getattr(self.tokenizer, "is_fast", False))
        ids = enc["input_ids"]
        if len(ids) <= n_tokens:
            return text
        keep = max(1, n_tokens - MARK_TOKENS)
        head = keep if keep < MIN_SPLIT_TOKENS else (keep + 1) // 2
        tail = keep - head
        if "offset_mapping" in enc:
            offsets = enc["offset_mapping"]
            start = text[: offsets[head - 1][1]]
            end = text[offsets[len(ids) - tail][0]:] if tail else ""
        else:  # slow tokenizers: cut by proportion
            start = text[: max(1, len(text) * head // len(ids))]
            end = text[len(text) - len(text) * tail // len(ids):] if tail else ""
        return f"{start} … {end}" if end else f"{start} …"

    def render(self, info: ComponentInfo, inputs: Mapping, outputs: Mapping) -> str:
        header = f"Component: {info.name}"
        description = f"Role: {info.description}" if info.description else ""
        in_fields = list(info.inputs) or list(inputs)
        out_fields = list(info.outputs) or list(outputs)
        in_labels = [f"Input {f}: " for f in in_fields]
        out_labels = [f"Output {f}: " for f in out_fields]
        in_values = [info.view(f, inputs.get(f)) for f in in_fields]
        out_values = [info.view(f, outputs.get(f)) for f in out_fields]

        fixed = self._count(header) + sum(self._count(lab) for lab in in_labels + out_labels) + len(in_fields) + len(out_fields) + 1
        desc_len = self._count(description) if description else 0
        desc_budget = min(desc_len, int(self.budget * DESCRIPTION_SHARE))
        room = max(0, self.budget - fixed - desc_budget)

        in_lens = [self._count(v) for v in in_values]
        out_lens = [self._count(v) for v in out_values]
        out_room = min(sum(out_lens), max(room // 2, room - sum(in_lens)))
        out_alloc = fair_shares(out_lens, out_room)
        in_alloc = fair_shares(in_lens, room - sum(out_alloc))

        lines = [header]
        if description:
            lines.append(self._cut(description, desc_budget) if desc_budget < desc_len else description)
        for lab, val, n, a in zip(in_labels, in_values, in_lens, in_alloc, strict=True):
            lines.append(lab + (val if a >= n else self._cut(val, a)))
        for lab, val, n, a in zip(out_labels, out_values, out_lens, out_alloc, strict=True):
            lines.append(lab + (val if a >= n else self._cut(val, a)))
        return "\n".join(lines)
