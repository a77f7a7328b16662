"""The hint generator's prompt budget: retrieved passages are cut to fit, and the cut is counted.

At k=25 the retrieved passages alone are ~6,000 tokens: on a CPU that prompt dominates the run's
time and, batched, its memory, and a 135M model's context is long past what it uses anyway. The
budget keeps whole passages, best-ranked first, while they fit; a first passage longer than the
whole budget is cut at it. Tokens are estimated at CHARS_PER_TOKEN characters each (English text
under the BPE tokenizers of SmolLM2, Llama and GPT models is 3.5-4.5): the budget works the same
whichever LM the run uses, API models included, without loading a tokenizer.
"""
from __future__ import annotations

from dataclasses import dataclass

CHARS_PER_TOKEN = 4


@dataclass(frozen=True)
class PassageBudget:
    """fit(inputs) for a PromptComponent: `field` holds one passage a line, cut to `tokens` (None: no cap)."""

    field: str
    tokens: int | None

    def __call__(self, inputs: dict) -> tuple[dict, dict[str, int]]:
        text = str(inputs.get(self.field) or "")
        if self.tokens is None or len(text) <= self.tokens * CHARS_PER_TOKEN:
            return inputs, {}
        limit = self.tokens * CHARS_PER_TOKEN
        passages = [p for p in text.split("\n") if p.strip()]
        kept: list[str] = []
        used = 0
        for passage in passages:
            if used + len(passage) > limit:
                break
            kept.append(passage)
            used += len(passage) + 1
        if not kept:  # one passage longer than the whole budget: keep its beginning
            kept = [passages[0][:limit]]
        return {**inputs, self.field: "\n".join(kept)}, {
            "prompts_cut": 1,
            "passages_cut": len(passages) - len(kept) + (1 if kept[0] != passages[0] else 0),
        }
