"""A component that is one LM call whose configuration is its instruction text (ConfigKind.PROMPT).

Only the instruction is optimized. The field layout and the reply format stay fixed, so a prompt
optimizer can never break the parsing that the downstream components rely on (as in DSPy, where the
signature's instruction is tuned and its field prefixes are not).
"""
from __future__ import annotations

import re
from collections.abc import Callable
from typing import ClassVar

from optimas_cli.system.component import Component, ConfigKind
from optimas_cli.system.parsing import PARSE_FAILURES, Unparsed

_MARKDOWN = re.compile(r"^[\s*_#>`\-]+|[\s*_`]+$")


def strip_label(text: str, labels: tuple[str, ...]) -> str:
    """Drop markdown decoration and a leading 'Label:' the model repeated (any of `labels`, any case)."""
    text = _MARKDOWN.sub("", text.strip())
    for label in labels:
        match = re.match(rf"(?i)\s*[*_]*{re.escape(label)}[*_]*\s*[:\-]\s*", text)
        if match:
            return _MARKDOWN.sub("", text[match.end():])
    return text


def content_lines(text: str, echoed_labels: tuple[str, ...]) -> list[str]:
    """Non-empty lines, minus the lines where a small model echoes an input field ('Query: ...')."""
    echo = re.compile(rf"(?i)^\W*({'|'.join(re.escape(lbl) for lbl in echoed_labels)})\s*:") if echoed_labels else None
    return [ln.strip() for ln in text.splitlines() if ln.strip() and not (echo and echo.match(ln.strip()))]


class PromptComponent(Component):
    """`inputs` maps each input field to the label it has in the prompt; `parse(raw, inputs)` -> output
    (raising `Unparsed(fallback)` for a reply with nothing readable: the fallback is used and counted).
    `fit(inputs)` cuts the inputs to the component's prompt budget before the prompt is built."""

    calls_lm: ClassVar[bool] = True

    def __init__(
        self,
        name: str,
        description: str,
        inputs: dict[str, str],
        output: str,
        instruction: str,
        reply_format: str,
        parse: Callable[[str, dict], str],
        max_tokens: int,
        alternatives: tuple[str, ...] = (),
        format_constraints: tuple[str, ...] = (),
        fit: Callable[[dict], tuple[dict, dict[str, int]]] | None = None,
    ):
        super().__init__(name, description, inputs=tuple(inputs), outputs=(output,), kind=ConfigKind.PROMPT,
                         default=instruction, alternatives=alternatives, format_constraints=format_constraints)
        self.labels, self.output, self.reply_format = dict(inputs), output, reply_format
        self.parse, self.max_tokens = parse, max_tokens
        self.fit = fit  # fit(inputs) -> (inputs cut to the prompt's budget, {event: count} of what was cut)

    def messages(self, instruction: str, inputs: dict) -> list[dict]:
        """One user message (small chat models follow a single turn best): instruction, fields, format."""
        fields = "\n".join(f"{label}: {str(inputs.get(field) or '').strip()}" for field, label in self.labels.items())
        return [{"role": "user", "content": f"{instruction.strip()}\n\n{fields}\n\n{self.reply_format}"}]

    def forward(self, inputs: list[dict], value, ctx) -> list[dict]:
        shown = inputs
        if self.fit is not None:
            fitted = [self.fit(x) for x in inputs]
            shown = [x for x, _ in fitted]
            for _, cuts in fitted:
                for event, n in cuts.items():
                    ctx.count(self.name, event, n)
        texts = ctx.complete(self.name, [self.messages(value, x) for x in shown], max_tokens=self.max_tokens)
        outputs = []
        for text, x in zip(texts, inputs, strict=True):
            try:
                outputs.append({self.output: self.parse(text or "", x)})
            except Unparsed as unparsed:
                ctx.count(self.name, PARSE_FAILURES)
                outputs.append({self.output: unparsed.fallback})
        return outputs
