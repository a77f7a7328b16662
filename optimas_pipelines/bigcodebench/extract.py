"""Getting runnable code out of a model's reply: fenced blocks, bare code, truncated endings.

API models answer with one ```python block and some prose; a 135M local model may open a fence
and never close it, repeat the function, skip the imports or answer with the body only. The
functions here turn each of those into a program that at least parses whenever that is possible.
"""
from __future__ import annotations

import ast
import re

# A fence, its language tag, and its body up to the closing fence (which may end the last code
# line: "return x```") or the end of the text.
_FENCE = re.compile(r"```[ \t]*([\w+#.-]*)[^\n]*\n(.*?)(?:```[ \t]*(?:\n|\Z)|\Z)", re.DOTALL)
_NOT_PYTHON = {"bash", "sh", "shell", "console", "text", "txt", "json", "output", "yaml", "plaintext", "csv"}
_CODE_START = re.compile(r"^(import |from |def |class |@|#|[A-Za-z_][\w.]*\s*=)")
MAX_TRIMMED_LINES = 40  # how many trailing lines a truncated reply may lose to become parseable


def code_blocks(text: str) -> list[str]:
    """The bodies of the reply's fenced blocks that may be Python (untagged ones included)."""
    return [body.rstrip() for lang, body in _FENCE.findall(text or "") if lang.lower() not in _NOT_PYTHON and body.strip()]


def parses(code: str) -> bool:
    try:
        ast.parse(code)
        return True
    except (SyntaxError, ValueError):
        return False


def trim_to_parse(code: str) -> str:
    """Drop trailing lines (a reply cut off by max_tokens) until the code parses; else keep it whole."""
    lines = code.rstrip().split("\n")
    for cut in range(min(MAX_TRIMMED_LINES, len(lines) - 1) + 1):
        candidate = "\n".join(lines[: len(lines) - cut])
        if parses(candidate):
            return candidate
    return code


def defines(code: str, name: str) -> bool:
    return re.search(rf"^\s*(?:async\s+)?def\s+{re.escape(name)}\s*\(", code, re.MULTILINE) is not None


def _bare_code(text: str) -> str:
    """Unfenced replies: drop leading prose up to the first line that looks like code."""
    lines = (text or "").split("\n")
    for i, line in enumerate(lines):
        if _CODE_START.match(line):
            return "\n".join(lines[i:])
    return text or ""


def _header_imports(code_prompt: str) -> list[str]:
    return [line for line in code_prompt.split("\n") if line.startswith(("import ", "from "))]


def extract_code(text: str, entry_point: str = "task_func", code_prompt: str = "") -> str:
    """The solution in a reply, as a program defining `entry_point` whenever the reply allows it.

    Picks the fenced block that defines the entry point (the longest, if several), else the
    reply's bare code; a body without its signature is completed with `code_prompt`; imports of
    `code_prompt` the reply left out are added; a truncated ending is trimmed until it parses.
    """
    blocks = code_blocks(text) or [_bare_code(text)]
    defining = [b for b in blocks if defines(b, entry_point)]
    if defining:
        code = max(defining, key=len)
    else:
        code = max(blocks, key=len)
        if code_prompt and code[:1] in (" ", "\t"):  # a function body: the reply continued the signature
            code = code_prompt.rstrip("\n") + "\n" + code
    code = trim_to_parse(code.strip("\n"))
    missing = [line for line in _header_imports(code_prompt) if line not in code.split("\n")]
    if missing:
        code = "\n".join(missing) + "\n" + code
    return code + "\n"


def extract_tests(text: str, entry_point: str = "task_func") -> str:
    """Unit tests from a reply: the block(s) with test cases, minus any copy of the function under test.

    A reply that re-implements `entry_point` next to its tests would shadow the code under test,
    so top-level definitions of that name are removed. Returns "" when there are no tests.
    """
    blocks = code_blocks(text) or [_bare_code(text)]
    tests = [b for b in blocks if "unittest" in b or re.search(r"def test\w*\(", b)]
    if not tests:
        return ""
    code = trim_to_parse("\n\n".join(t.strip("\n") for t in tests))
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError):
        return code + "\n"
    kept = [n for n in tree.body if not (isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) and n.name == entry_point)]
    if len(kept) == len(tree.body):
        return code + "\n"
    tree.body = kept
    return ast.unparse(tree) + "\n"
