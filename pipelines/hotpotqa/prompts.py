"""The unoptimized instructions of the four prompt components, their reply formats and output parsers.

Written for both a 135M local chat model and strong API models: short, with an explicit reply format,
and parsers that survive echoed labels ('Answer: ...'), markdown, extra lines and empty replies.
"""
from __future__ import annotations

import re

from optimas_cli.system.prompt_component import content_lines, strip_label

REWRITER_INSTRUCTION = "Rephrase the question so it is clear and self-contained. Keep every name, title and date."
REWRITER_FORMAT = "Reply with the rewritten question only, on one line."

EXTRACTOR_INSTRUCTION = "Extract the keywords to search for: the names, titles, places and dates in the query."
EXTRACTOR_FORMAT = "Reply with the search keywords only, on one line, separated by commas."

HINT_INSTRUCTION = "Using the retrieved information, write the facts that help answer the query."
HINT_FORMAT = "Reply with at most three short hint sentences."

ANSWER_INSTRUCTION = "Given the hints, answer the query with a short answer."
ANSWER_FORMAT = "Reply with the short answer only (a name, date, number, short phrase, or yes/no), no explanation."

SINGLE_LLM_INSTRUCTION = (
    "Answer the question with a short answer (a name, date, number, short phrase, or yes/no).\n"
    "Reply with the short answer only, no explanation."
)

_ANSWER_LABELS = ("short answer", "final answer", "answer")
_ANSWER_LEAD = re.compile(r"(?i)^(the answer is|the short answer is|answer is)\s*:?\s*")
_YES_NO = re.compile(r"(?i)^(yes|no)(?:[,.!;]|\s*$)(?!\s*\d)")


def parse_one_line(raw: str, fallback: str, labels: tuple[str, ...], echoed: tuple[str, ...]) -> str:
    """The first real line of the reply, label stripped; the fallback (the input) when there is none."""
    lines = [strip_label(ln, labels) for ln in content_lines(raw, echoed)]
    lines = [ln for ln in lines if ln]
    return lines[0] if lines else fallback


def parse_rewrite(raw: str, inputs: dict) -> str:
    return parse_one_line(raw, inputs["question"], ("rewritten query", "rewritten question", "question"), ("query",))


def parse_keywords(raw: str, inputs: dict) -> str:
    return parse_one_line(raw, inputs["rewritten_query"], ("search keywords", "keywords"), ("query",))


def parse_hints(raw: str, inputs: dict) -> str:
    lines = [strip_label(ln, ("hints", "hint")) for ln in content_lines(raw, ("query", "retrieved information"))]
    return "\n".join(ln for ln in lines if ln)


def parse_short_answer(raw: str, inputs: dict | None = None) -> str:
    """A short answer: first line, no label or 'The answer is', no quotes or final period; 'Yes, ...' -> yes."""
    lines = [strip_label(ln, _ANSWER_LABELS) for ln in content_lines(raw, ("query", "hints", "question"))]
    lines = [ln for ln in lines if ln]
    if not lines:
        return ""
    answer = _ANSWER_LEAD.sub("", lines[0]).strip()
    yes_no = _YES_NO.match(answer)
    if yes_no:
        return yes_no.group(1).lower()
    return answer.strip(" \"'“”‘’").rstrip(".").strip()


def single_llm_messages(example: dict) -> list[dict]:
    return [{"role": "user", "content": f"{SINGLE_LLM_INSTRUCTION}\n\nQuestion: {example['question']}"}]
