"""The LLM-judge baseline of paper Table 4: the run's LM, shown k scored examples, picks the better output.

Scored on the same test pairs as the trained reward. Which side holds the chosen output is
drawn at random (seeded) so a judge that always answers "A" scores about 50%, not 100% or 0%.
An answer that names neither side clearly is a tie (half credit, what a coin flip would score):
counting it wrong would push a judge that rambles below chance. How many answers parsed is
reported beside the accuracy (parse_rate).
"""
from __future__ import annotations

import random
import re
from collections.abc import Collection, Mapping, Sequence

from optimas_cli.lm.types import LMRequest
from optimas_cli.lrf.metrics import with_distinguishable
from optimas_cli.lrf.pairs import PreferencePair, by_component
from optimas_cli.lrf.text import ComponentInfo, component_info

JUDGE_COMPONENT = JUDGE_PHASE = "lrf_judge"  # the component and phase LM usage is attributed to
SYSTEM_PROMPT = (
    "You evaluate the outputs of one component of a compound AI system. An output's score is the final "
    "task reward the whole system reached when the component produced that output (higher is better)."
)

_BETTER = re.compile(r"\b(?:output\s+|option\s+|answer\s+)?\(?([AB])\)?\s+(?:is|was|seems|looks)\s+(?:better|superior|preferred|best)", re.I)
_LABELLED = re.compile(r"\b(?:output|option|answer|choice|verdict)\s*(?:is)?\s*[:=\-]?\s*\(?\*{0,2}([AB])\b", re.I)
_LEADING = re.compile(r"^[\s*(\[\"'`#]*([AB])(?![A-Za-z])(?!\s*(?:or|and|/|vs\.?)\s*[AB]\b)")
_ONLY_LETTER = re.compile(r"^\W*([abAB])\W*$")
_STANDALONE = re.compile(r"(?<![A-Za-z])([AB])(?![A-Za-z])")


def parse_verdict(text: str) -> str | None:
    """'A', 'B', or None when the answer does not name exactly one side."""
    only = _ONLY_LETTER.match(text)
    if only:
        return only.group(1).upper()
    for pattern in (_BETTER, _LABELLED):
        found = {m.upper() for m in pattern.findall(text)}
        if len(found) == 1:
            return found.pop()
    lead = _LEADING.match(text)
    if lead:
        return lead.group(1)
    found = set(_STANDALONE.findall(text))
    return found.pop() if len(found) == 1 else None


def _clip(text: str, max_chars: int) -> str:
    return text if len(text) <= max_chars else text[:max_chars] + " …"


def _fields(info: ComponentInfo, prefix: str, values: Mapping, max_chars: int) -> str:
    """Each field as the reward model reads it (the component's declared views), clipped."""
    return "\n".join(f"{prefix}{k}: {_clip(info.view(k, v), max_chars)}" for k, v in values.items())


def _prompt(info: ComponentInfo, shots: Sequence[tuple[dict, dict, float]], pair: PreferencePair,
            chosen_first: bool, max_chars: int) -> list[dict]:
    parts = [f"Component: {info.name}"]
    if info.description:
        parts.append(f"Role: {info.description}")
    if shots:
        parts.append("\nScored examples:")
        for i, (ctx, out, score) in enumerate(shots, 1):
            parts.append(f"### Example {i}\n{_fields(info, 'Input ', ctx, max_chars)}\n{_fields(info, 'Output ', out, max_chars)}\nScore: {score:.3f}")
    first, second = (pair.chosen, pair.rejected) if chosen_first else (pair.rejected, pair.chosen)
    parts.append(
        f"\nNow compare two outputs for this input.\n{_fields(info, 'Input ', pair.context, max_chars)}\n"
        f"Output A:\n{_fields(info, '', first, max_chars)}\nOutput B:\n{_fields(info, '', second, max_chars)}\n\n"
        "Which output leads to the higher score? Answer with exactly one letter: A or B."
    )
    return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": "\n".join(parts)}]


def _shots(examples: Sequence[PreferencePair], k: int, rng: random.Random) -> list[tuple[dict, dict, float]]:
    """k scored (input, output, score) examples drawn from training pairs, both sides of each pair."""
    order = list(examples)
    rng.shuffle(order)
    shots = []
    for p in order:
        shots += [(p.context, p.chosen, p.chosen_score), (p.context, p.rejected, p.rejected_score)]
        if len(shots) >= k:
            break
    shots = shots[:k]
    rng.shuffle(shots)  # do not teach "the first of two examples scores higher"
    return shots


def judge_accuracy(
    lm,
    pairs: Sequence[PreferencePair],
    examples: Sequence[PreferencePair] = (),
    k: int = 8,
    components: Mapping | None = None,
    seed: int = 0,
    model: str | None = None,
    max_chars: int = 400,
    max_tokens: int = 8,
    indistinguishable: Collection[PreferencePair] = (),
) -> dict:
    """Judge accuracy on `pairs`, per component and mean, with unparsable answers counted as ties;
    `distinguishable` beside it: the same without the pairs the reward model cannot tell apart
    (`indistinguishable`; the judge reads them like any other, so both scorers face the same pairs).

    `lm` has `.complete(list[LMRequest], component, phase) -> list[LMResponse]` (optimas_cli.lm's client).
    In-context examples come from `examples` (the training pairs) of the same component.
    """
    rng = random.Random(seed)
    train = by_component(examples)
    ties = {id(p) for p in indistinguishable}
    names, correct, seen, unparsable = [], [], [], {}
    for name, group in by_component(pairs).items():
        info = component_info(name, (components or {}).get(name, ""))
        shots = _shots(train.get(name, []), k, rng)
        chosen_first = [rng.random() < 0.5 for _ in group]
        requests = [
            LMRequest(messages=_prompt(info, shots, p, cf, max_chars), model=model, temperature=0.0,
                      max_tokens=max_tokens, seed=seed)
            for p, cf in zip(group, chosen_first, strict=True)
        ]
        responses = lm.complete(requests, component=JUDGE_COMPONENT, phase=JUDGE_PHASE)
        unparsable[name] = 0
        seen += [id(p) not in ties for p in group]
        for resp, cf in zip(responses, chosen_first, strict=True):
            verdict = parse_verdict(resp.texts[0] if resp.texts else "")
            unparsable[name] += verdict is None
            names.append(name)
            correct.append(0.5 if verdict is None else float(verdict == ("A" if cf else "B")))
    summary = with_distinguishable(names, correct, seen)
    for name, v in summary["per_component"].items():
        v["unparsable"] = unparsable[name]
        v["parse_rate"] = 1 - unparsable[name] / v["n"]
    summary["unparsable"] = sum(unparsable.values())
    summary["parse_rate"] = 1 - summary["unparsable"] / summary["n"] if summary["n"] else None
    return summary
