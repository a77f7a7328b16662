"""The unoptimized instructions of the four prompt components, their reply formats and output parsers.

Written for both a 135M local chat model and strong API models: short, with an explicit reply format,
and parsers that survive echoed labels ('Answer: ...'), markdown and extra lines. A reply with no
readable line raises `Unparsed` (the component falls back and counts it).

`ALTERNATIVES` and `FORMAT_CONSTRAINTS` feed the pool proposer (optimas_cli/optim/prompt.py): answer
F1 rewards a short answer in the gold answer's own words, so they push toward short, copied spans
(answer, hints) and exact names (rewriter, keywords, which decide what BM25 retrieves).
"""
from __future__ import annotations

import re

from optimas_cli.system.parsing import Unparsed
from optimas_cli.system.prompt_component import content_lines, strip_label

REWRITER_INSTRUCTION = "Rephrase the question so it is clear and self-contained. Keep every name, title and date."
REWRITER_FORMAT = "Reply with the rewritten question only, on one line."

EXTRACTOR_INSTRUCTION = "Extract the keywords to search for: the names, titles, places and dates in the query."
EXTRACTOR_FORMAT = "Reply with the search keywords only, on one line, separated by commas."

HINT_INSTRUCTION = "Using the retrieved information, write the facts that help answer the query."
HINT_FORMAT = "Reply with at most three short hint sentences."

ANSWER_INSTRUCTION = "Given the hints, answer the query with a short answer."
ANSWER_FORMAT = "Reply with the short answer only (a name, date, number, short phrase, or yes/no), no explanation."

ALTERNATIVES = {
    "question_rewriter": (
        "Repeat the question with every name, title, number and date copied exactly; only fix its grammar.",
        "Rewrite the question as one short question that names the person, place or work it asks about.",
    ),
    "info_extractor": (
        "Copy the names, titles and dates from the query exactly as written, separated by commas.",
        "List the two or three proper names or titles in the query that a search engine should look up.",
    ),
    "hint_generator": (
        "Copy the one or two sentences from the retrieved information that contain the answer to the query.",
        "Name the entity the query asks about, then quote the retrieved sentence that answers the query.",
    ),
    "answer_generator": (
        "Answer with only the exact words from the hints that answer the query: a name, date, number, or yes/no.",
        "Find the answer to the query in the hints and copy it exactly, without writing a sentence.",
        "Reply with the answer in one to five words. For a yes/no question, reply yes or no.",
    ),
}
FORMAT_CONSTRAINTS = {  # loosest first: the pool adds the first one missing, which tightens the last one
    "question_rewriter": ("Keep it to one sentence.", "Keep it under fifteen words."),
    "info_extractor": ("Give at most four keywords.", "Give at most two keywords: the names only."),
    "hint_generator": ("Write at most two sentences.", "Write one sentence, quoted from the passages."),
    "answer_generator": ("Use at most five words.", "Use at most three words, copied from the hints."),
}

SINGLE_LLM_INSTRUCTION = (
    "Answer the question with a short answer (a name, date, number, short phrase, or yes/no).\n"
    "Reply with the short answer only, no explanation."
)

_ANSWER_LABELS = ("short answer", "final answer", "answer")
_ANSWER_LEAD = re.compile(r"(?i)^(the answer is|the short answer is|answer is)\s*:?\s*")
_YES_NO = re.compile(r"(?i)^(yes|no)(?:[,.!;]|\s*$)(?!\s*\d)")


def parse_one_line(raw: str, fallback: str, labels: tuple[str, ...], echoed: tuple[str, ...]) -> str:
    """The first real line of the reply, label stripped; Unparsed(the input) when there is none."""
    lines = [strip_label(ln, labels) for ln in content_lines(raw, echoed)]
    lines = [ln for ln in lines if ln]
    if not lines:
        raise Unparsed(fallback)
    return lines[0]


def parse_rewrite(raw: str, inputs: dict) -> str:
    return parse_one_line(raw, inputs["question"], ("rewritten query", "rewritten question", "question"), ("query",))


def parse_keywords(raw: str, inputs: dict) -> str:
    return parse_one_line(raw, inputs["rewritten_query"], ("search keywords", "keywords"), ("query",))


def parse_hints(raw: str, inputs: dict) -> str:
    lines = [strip_label(ln, ("hints", "hint")) for ln in content_lines(raw, ("query", "retrieved information"))]
    hints = "\n".join(ln for ln in lines if ln)
    if not hints:
        raise Unparsed("")
    return hints


def parse_short_answer(raw: str, inputs: dict | None = None) -> str:
    """A short answer: first line, no label or 'The answer is', no quotes or final period; 'Yes, ...' -> yes."""
    lines = [strip_label(ln, _ANSWER_LABELS) for ln in content_lines(raw, ("query", "hints", "question"))]
    lines = [ln for ln in lines if ln]
    if not lines:
        raise Unparsed("")
    answer = _ANSWER_LEAD.sub("", lines[0]).strip()
    yes_no = _YES_NO.match(answer)
    if yes_no:
        return yes_no.group(1).lower()
    return answer.strip(" \"'“”‘’").rstrip(".").strip()


def single_llm_messages(example: dict) -> list[dict]:
    return [{"role": "user", "content": f"{SINGLE_LLM_INSTRUCTION}\n\nQuestion: {example['question']}"}]
