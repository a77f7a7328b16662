"""The chat messages of PubMedQA's LM calls.

The instruction (first paragraph) is the component's optimizable prompt; the defaults are the
paper's unoptimized instructions. The rest of each message — where the inputs go and the output
format — is fixed, so an optimized instruction can never break answer parsing. Formats are short
and explicit, so a 135M local chat model follows them as well as an API model does.
"""
from __future__ import annotations

SYSTEM = "You are a scientist."

ANALYST_INSTRUCTION = (
    "You are supposed to summarize the key information from the given context to answer the provided question."
)
SOLVER_INSTRUCTION = "You are supposed to provide a solution to a given problem based on the provided summary."

# For the pool proposer (optimas_cli/optim/prompt.py): accuracy needs one of the three labels, and
# 'maybe' only where the evidence is mixed, so these name the label set and when each applies.
ALTERNATIVES = {
    "context_analyst": (
        "State the study's main finding and whether it supports or contradicts the question's claim.",
        "Summarize the results that answer the question: what was measured, and what was found.",
    ),
    "problem_solver": (
        "Decide from the summary whether the evidence supports the question: answer yes if it does, "
        "no if it contradicts it, and maybe only if the evidence is mixed.",
        "Answer the question with yes, no or maybe. Most studies give a clear result: prefer yes or no.",
    ),
}
FORMAT_CONSTRAINTS = {  # loosest first
    "context_analyst": ("Use at most two sentences.", "Use one sentence that states the result."),
    "problem_solver": ("End with 'Answer: yes', 'Answer: no' or 'Answer: maybe'.",
                       "Reply with only 'Answer: yes', 'Answer: no' or 'Answer: maybe'."),
}

ANSWER_FORMAT = (
    "Is the answer yes, no or maybe? Reason in at most two sentences, then write the last line as "
    "'Answer: yes', 'Answer: no' or 'Answer: maybe'."
)


def analyst_messages(instruction: str, question: str, context: str) -> list[dict]:
    user = (
        f"{instruction}\n\nContext:\n{context}\n\nQuestion: {question}\n\n"
        "Summarize, in two or three sentences, the facts from the context that answer the question."
    )
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}]


def solver_messages(instruction: str, question: str, summary: str) -> list[dict]:
    user = f"{instruction}\n\nQuestion: {question}\n\nSummary of the evidence:\n{summary}\n\n{ANSWER_FORMAT}"
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}]


def single_llm_messages(example: dict) -> list[dict]:
    """The Single-LLM baseline: the raw task in one call, no analyst and no selector."""
    user = f"Context:\n{example['context']}\n\nQuestion: {example['question']}\n\n{ANSWER_FORMAT}"
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}]
