"""The chat messages of BigCodeBench's LM calls.

Each instruction (first paragraph) is the component's optimizable prompt; the defaults follow the
official Optimas system. The rest — where the task, code and tests go, and the reply format (one
```python block) — is fixed, so an optimized instruction cannot break code extraction. The task
text is BigCodeBench's instruct_prompt, which already ends with the imports and signature to
start from, so small local models and API models get the same, complete statement.
"""
from __future__ import annotations

SYSTEM = "You are an expert Python programmer."

CODE_INSTRUCTION = "Provide a self-contained Python solution:"
TESTS_INSTRUCTION = (
    "Write Python unit tests that check whether an implementation of the function described below is correct."
)
FINAL_INSTRUCTION = "Refine the code based on the test results."

# For the pool proposer (optimas_cli/optim/prompt.py): the pass rate needs runnable code that keeps the
# given signature, so these push toward one complete code block and small, checkable tests.
ALTERNATIVES = {
    "code_generator": (
        "Write a complete, self-contained Python solution: keep the given imports and function signature, "
        "and return exactly what the docstring asks for.",
        "Implement the function step by step with the standard library and the given imports; handle the "
        "edge cases and exceptions the docstring names.",
    ),
    "unit_test_generator": (
        "Write a few short unit tests that call the function on small inputs and check the documented "
        "return values and raised exceptions.",
    ),
    "final_code_generator": (
        "Fix only what the failing tests show is wrong; keep the function name, signature and imports unchanged.",
        "If the tests passed, repeat the current code unchanged; otherwise correct it so it follows the problem statement.",
    ),
}
FORMAT_CONSTRAINTS = {  # loosest first
    "code_generator": ("Put all the code in one ```python block.",
                       "Put all the code in one ```python block and write nothing outside it."),
    "unit_test_generator": ("Write at most three test methods.", "Write at most three test methods and no other code."),
    "final_code_generator": ("Put all the code in one ```python block.",
                             "Put all the code in one ```python block and write nothing outside it."),
}

MAX_TESTS_CHARS = 4000  # generated tests quoted back to the final code generator
MAX_CODE_CHARS = 6000


def _clip(text: str, limit: int) -> str:
    text = (text or "").strip()
    return text if len(text) <= limit else text[:limit] + "\n# [... cut ...]"


def code_messages(instruction: str, question: str) -> list[dict]:
    user = (
        f"{instruction}\n\n{question.strip()}\n\n"
        "Reply with the complete solution (imports and the function) in one ```python code block."
    )
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}]


def tests_messages(instruction: str, question: str, entry_point: str) -> list[dict]:
    user = (
        f"{instruction}\n\nFunction to test:\n{question.strip()}\n\n"
        f"Reply with one ```python code block that imports unittest and defines "
        f"`class TestCases(unittest.TestCase)` with a few test methods calling `{entry_point}`. "
        f"Do not implement `{entry_point}` yourself."
    )
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}]


def final_messages(instruction: str, question: str, code: str, tests: str, report: str) -> list[dict]:
    user = (
        f"{instruction}\n\nProblem:\n{question.strip()}\n\n"
        f"Current code:\n```python\n{_clip(code, MAX_CODE_CHARS)}\n```\n\n"
        f"Generated unit tests:\n```python\n{_clip(tests, MAX_TESTS_CHARS) or '# (none)'}\n```\n\n"
        f"Test results:\n{report.strip()}\n\n"
        "The generated tests may themselves be wrong: trust the problem statement over them. "
        "Reply with the complete final solution (imports and the function) in one ```python code block."
    )
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}]


def single_llm_messages(example: dict) -> list[dict]:
    """The Single-LLM baseline: the raw task in one call, no tests and no revision."""
    return code_messages(CODE_INSTRUCTION, example["question"])
