"""The chat messages of the Amazon pipeline's LM calls.

The session analyzer and candidate profiler are trained (LoRA), not prompted: their messages are
fixed, and what changes is the adapter that reads them. The next item decider's instruction is its
optimizable prompt; the default is the paper's unoptimized instruction. Formats are short and
explicit so a 135M local chat model follows them as well as an API model does.
"""
from __future__ import annotations

DECIDER_INSTRUCTION = "Select the next item by considering both the summary and the provided feedback carefully."
# For the pool proposer (optimas_cli/optim/prompt.py): accuracy needs one index out of the candidate
# list, and the strongest signal in a session is its last products, so these say both.
DECIDER_ALTERNATIVES = (
    "Pick the candidate whose product type and brand best match what the user is shopping for, and reply "
    "with its number from the candidate list.",
    "Choose the candidate most similar to the products the user viewed last; answer with its number only.",
)
DECIDER_FORMAT_CONSTRAINTS = ("Reply with the number of one candidate.",
                              "Reply with 'Answer: ' and the number of one candidate, nothing else.")


def index_format(choices: list[str]) -> str:
    return f"Reply with only the number (0 to {len(choices) - 1}) of the chosen product, e.g. 'Answer: 1'."


def numbered(choices: list[str]) -> str:
    return "\n".join(f"{i}. {title}" for i, title in enumerate(choices))


def analyzer_messages(sequence: str) -> list[dict]:
    user = (
        "You are an e-commerce behaviour analyst.\n\n"
        f"Products the user viewed, in order:\n{sequence}\n\n"
        "In two or three sentences, describe what the user is shopping for."
    )
    return [{"role": "user", "content": user}]


def profiler_messages(context: str, choices: list[str]) -> list[dict]:
    user = (
        "You are an e-commerce candidate profiler.\n\n"
        f"What the user is shopping for:\n{context}\n\n"
        f"Candidate products:\n{numbered(choices)}\n\n"
        "For each candidate, write one line: its number, then why the user would or would not view it next."
    )
    return [{"role": "user", "content": user}]


def decider_messages(instruction: str, context: str, feedback: str, choices: list[str]) -> list[dict]:
    user = (
        f"{instruction}\n\nWhat the user is shopping for:\n{context}\n\n"
        f"Feedback on the candidates:\n{feedback}\n\n"
        f"Candidate products:\n{numbered(choices)}\n\n"
        f"Which product will the user view next? {index_format(choices)}"
    )
    return [{"role": "user", "content": user}]


def single_llm_messages(example: dict) -> list[dict]:
    """The Single-LLM baseline: the raw task in one call, no analyzer and no profiler."""
    user = (
        f"A user on an online shopping platform viewed these products, in order:\n{example['sequence']}\n\n"
        f"Candidate products:\n{numbered(example['choices'])}\n\n"
        f"Which product will the user view next? {index_format(example['choices'])}"
    )
    return [{"role": "user", "content": user}]
