"""Code and tests are pulled out of replies of every shape a small or large model gives."""
from __future__ import annotations

from optimas_pipelines.bigcodebench.extract import code_blocks, extract_code, extract_tests, parses

PROMPT = "import math\nimport random\ndef task_func(n=3):\n"


def test_fenced_block_with_prose_around_it():
    reply = "Here you go:\n```python\nimport math\nimport random\ndef task_func(n=3):\n    return n\n```\nDone."
    assert extract_code(reply, "task_func", PROMPT) == "import math\nimport random\ndef task_func(n=3):\n    return n\n"


def test_the_block_defining_the_entry_point_wins_over_usage_examples():
    reply = "```python\ndef task_func(n=3):\n    return n * 2\n```\nUsage:\n```python\nprint(task_func(2))\n```"
    assert "return n * 2" in extract_code(reply, "task_func")
    assert "print(task_func(2))" not in extract_code(reply, "task_func")


def test_non_python_blocks_are_ignored():
    assert code_blocks("```bash\npip install x\n```\n```\nx = 1\n```") == ["x = 1"]


def test_unclosed_and_truncated_reply_is_trimmed_until_it_parses():
    reply = "```python\ndef task_func(n=3):\n    total = 0\n    for i in range(n):\n        total += i\n    return total\nprint(task_func(  "
    code = extract_code(reply, "task_func")
    assert parses(code) and "return total" in code and "print(" not in code


def test_missing_imports_of_the_code_prompt_are_added():
    code = extract_code("```python\ndef task_func(n=3):\n    return math.sqrt(n)\n```", "task_func", PROMPT)
    assert code.startswith("import math\nimport random\n") and parses(code)


def test_a_body_only_reply_is_completed_with_the_signature():
    code = extract_code("    return random.random() * n\n", "task_func", PROMPT)
    assert code == PROMPT + "    return random.random() * n\n"


def test_bare_code_after_prose_without_fences():
    code = extract_code("Sure! The answer is below.\ndef task_func(n=3):\n    return n\n", "task_func")
    assert code == "def task_func(n=3):\n    return n\n"


def test_tests_are_extracted_without_a_copy_of_the_function_under_test():
    reply = (
        "```python\nimport unittest\n\ndef task_func(n):\n    return 0\n\n"
        "class TestCases(unittest.TestCase):\n    def test_one(self):\n        self.assertEqual(task_func(1), 1)\n```"
    )
    tests = extract_tests(reply, "task_func")
    assert "class TestCases" in tests and "return 0" not in tests and parses(tests)


def test_a_reply_without_tests_gives_no_tests():
    assert extract_tests("I cannot write tests for this.", "task_func") == ""
    assert extract_tests("```python\nx = 1\n```", "task_func") == ""


def test_a_closing_fence_on_the_last_code_line_keeps_that_line():
    code = extract_code("```python\ndef task_func(n=3):\n    return n```\nThat is all.", "task_func")
    assert code == "def task_func(n=3):\n    return n\n"
