"""Prompt optimizer: OPRO-style instruction search scored by the component's local reward r_k.

Each step, the run's LM (tagged "<component>.optimizer" in the usage ledger) reads a meta-prompt
showing the component's description and fields, the instructions tried so far with their
scores in ASCENDING order (OPRO: the best sits last, nearest the answer), and a few example
inputs with the current instruction's outputs and their r_k, and writes `num_candidates` new
instructions. Each candidate is scored by the mean r_k of the outputs the component produces
with it on the search sample — one component execution, never a run of the whole system
(seed Chapter 7: "each one scored by average r_k over the search-size sample"). After
`num_steps` steps the best candidate is returned if it beats the current instruction.

Weak models (the embedded 135M default) wrap, prefix, repeat or forget the answer format, so
the instruction is read from <prompt>...</prompt> tags with fallbacks (an unclosed tag, a code
fence, the cleaned reply), and empty, tiny, runaway, looping or repeated candidates are
rejected without spending a search run on them; `details["rejected"]` counts them by reason.

Settings (cfg; Table 7 defaults): num_candidates 3, num_steps 3, num_examples 3 (shown in the
meta-prompt), max_history 20 (scored instructions shown), temperature 1.0, max_tokens 256,
example_chars 300 (each shown field is cut to this), min_words 3, max_chars 2000, seed.
"""
from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from optimas_cli.optim import Proposal, make_rng, score_value, setting
from optimas_cli.system.component import Component
from optimas_cli.system.context import RunContext

NO_INSTRUCTION = "(no instruction: the component's built-in behaviour)"

SYSTEM_MESSAGE = "You improve the instructions of one step of an AI pipeline. You answer with one instruction."

TAGGED = re.compile(r"<prompt>(.*?)</prompt>", re.IGNORECASE | re.DOTALL)
OPEN_TAG = re.compile(r"<prompt>(.*)", re.IGNORECASE | re.DOTALL)
FENCED = re.compile(r"```[a-zA-Z]*\n?(.*?)```", re.DOTALL)
THINKING = re.compile(r"<think>.*?</think>", re.IGNORECASE | re.DOTALL)
LEAD_IN = re.compile(
    r"^\s*(?:sure[,!.]?\s*)?(?:here(?: is|'s)[^:\n]*:|(?:new |improved |better )?(?:instruction|prompt)\s*:)\s*",
    re.IGNORECASE,
)
SCORE_LINE = re.compile(r"^\s*score\s*[:=]", re.IGNORECASE | re.MULTILINE)


# -- reading an instruction out of a weak model's reply --------------------------------------------
def _clean(text: str) -> str:
    text = re.sub(r"</?prompt>", "", text, flags=re.IGNORECASE)
    cut = SCORE_LINE.search(text)  # the model imitating the "Score:" lines of the history
    if cut:
        text = text[: cut.start()]
    text = LEAD_IN.sub("", text.strip()).strip()
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "\"'`":
        text = text[1:-1].strip()
    return text


def candidate_readings(reply: str) -> list[str]:
    """Possible instructions in a reply, from the most explicit form present only.

    Tagged blocks if any; else the text after an unclosed <prompt>; else code fences; else the
    whole reply. A lower form is never used when a higher one exists, so a rejected tagged
    answer is not rescued by reading the chatter around it as an instruction.
    """
    reply = THINKING.sub("", reply or "")
    opened = OPEN_TAG.search(reply)
    readings = TAGGED.findall(reply) or ([opened.group(1)] if opened else []) or FENCED.findall(reply) or [reply]
    out: list[str] = []
    for r in map(_clean, readings):
        if r not in out:
            out.append(r)
    return out


def normalized(text: str) -> str:
    return " ".join(text.lower().split())


def rejection_reason(text: str, seen: set[str], min_words: int, max_chars: int) -> str | None:
    """Why a reading is not worth a search run, or None if it is a usable instruction."""
    words = text.split()
    if not words:
        return "empty"
    if len(words) < min_words:
        return "too_short"
    if len(text) > max_chars:
        return "too_long"
    if len(words) >= 12 and len(set(w.lower() for w in words)) / len(words) < 0.3:
        return "repetitive"  # a weak model stuck in a loop
    if normalized(text) in seen:
        return "duplicate"
    return None


def extract_instruction(reply: str, seen: set[str], min_words: int = 3, max_chars: int = 2000) -> tuple[str | None, str]:
    """(instruction, "ok") for the first usable reading, else (None, reason of the best reading)."""
    reasons = []
    for reading in candidate_readings(reply):
        reason = rejection_reason(reading, seen, min_words, max_chars)
        if reason is None:
            return reading, "ok"
        reasons.append(reason)
    return None, reasons[0]


# -- the meta-prompt ----------------------------------------------------------------------------
def _shorten(value: Any, limit: int) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= limit else text[:limit] + " ..."


def _fields(record: dict, limit: int) -> str:
    return "\n".join(f"  {k}: {_shorten(v, limit)}" for k, v in record.items())


def meta_prompt(
    component: Component, history: Sequence[tuple[str, float]], examples: Sequence[tuple[dict, dict, float]],
    example_chars: int,
) -> list[dict]:
    """The OPRO meta-prompt: task, scored instructions in ascending order, example runs, the ask."""
    parts = [
        f"A pipeline step called '{component.name}' does this: {component.description}",
        f"It reads the fields {', '.join(component.inputs)} and writes the fields {', '.join(component.outputs)}.",
        "Its behaviour is set by an instruction. Below are instructions tried so far with their scores, "
        "from lowest to highest. A higher score is better.",
    ]
    for text, score in sorted(history, key=lambda pair: pair[1]):
        parts.append(f"Instruction:\n{text}\nScore: {score:.3f}")
    if examples:
        parts.append("Examples of what the step receives and what it writes with the current instruction:")
        for i, (inputs, outputs, score) in enumerate(examples, 1):
            parts.append(
                f"Example {i} input:\n{_fields(inputs, example_chars)}\n"
                f"Example {i} output:\n{_fields(outputs, example_chars)}\nExample {i} score: {score:.3f}"
            )
    parts.append(
        "Write a new instruction that is different from all the instructions above and gets a higher score. "
        "Reply with the instruction only, between <prompt> and </prompt>."
    )
    return [{"role": "system", "content": SYSTEM_MESSAGE}, {"role": "user", "content": "\n\n".join(parts)}]


# -- the search ---------------------------------------------------------------------------------
def propose(
    component: Component,
    current_value: str | None,
    search_inputs: Sequence[dict],
    lrf: Any,
    ctx: RunContext,
    cfg: Mapping | None = None,
    *,
    rng: np.random.Generator | None = None,
) -> Proposal:
    num_candidates = int(setting(cfg, "num_candidates", 3))
    num_steps = int(setting(cfg, "num_steps", 3))
    num_examples = int(setting(cfg, "num_examples", 3))
    max_history = int(setting(cfg, "max_history", 20))
    example_chars = int(setting(cfg, "example_chars", 300))
    min_words, max_chars = int(setting(cfg, "min_words", 3)), int(setting(cfg, "max_chars", 2000))
    request = {"temperature": float(setting(cfg, "temperature", 1.0)), "max_tokens": int(setting(cfg, "max_tokens", 256))}
    rng = make_rng(rng, cfg, ctx)

    baseline, outputs, per_input = score_value(component, current_value, search_inputs, lrf, ctx)
    shown = rng.choice(len(search_inputs), size=min(num_examples, len(search_inputs)), replace=False)
    examples = [(search_inputs[i], outputs[i], per_input[i]) for i in sorted(shown)]

    current_text = current_value if current_value else NO_INSTRUCTION
    history: list[tuple[str, float]] = [(current_text, baseline)]
    seen = {normalized(current_text)}
    candidates: list[dict] = []
    rejected: Counter[str] = Counter()
    for step in range(num_steps):
        best_so_far = sorted(history, key=lambda pair: pair[1])[-max_history:]
        messages = meta_prompt(component, best_so_far, examples, example_chars)
        for _ in range(num_candidates):
            # A fresh sample index per proposal: the LM cache keys on it, so identical meta-prompts
            # (same step, or a later iteration after a rejection) still give distinct samples.
            sample = ctx.replace(sample_index=int(rng.integers(1 << 30)))
            reply = sample.complete(f"{component.name}.optimizer", [messages], **request)[0]
            text, reason = extract_instruction(reply, seen, min_words, max_chars)
            if text is None:
                rejected[reason] += 1
                continue
            seen.add(normalized(text))
            score = score_value(component, text, search_inputs, lrf, ctx)[0]
            history.append((text, score))
            candidates.append({"step": step, "prompt": text, "score": score})

    best = max(candidates, key=lambda c: c["score"], default=None)
    improved = best is not None and best["score"] > baseline
    return Proposal(
        value=best["prompt"] if improved else current_value,
        local_score=best["score"] if improved else baseline,
        baseline_score=baseline,
        details={
            "candidates": candidates,
            "rejected": dict(rejected),
            "proposals_requested": num_candidates * num_steps,
            "improved": improved,
        },
    )
