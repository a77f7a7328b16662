"""Where a run's instruction candidates came from (its `proposer`): the report compares like with like.

lm: written by an LM (OPRO's meta-prompt, MIPROv2's grounded proposer, TextGrad's TGD); pool: the
pipeline's own instructions and edits (optim/prompt_pool.py); mixed: both; None: the method searched
no instructions (Unoptimized, Single LLM, LLMSelector, the weights methods).
"""
from __future__ import annotations

from types import SimpleNamespace

from optimas_cli.optim.prompt import resolve_proposer
from optimas_cli.report.runs import Run

# The settings that choose it (conf/config.yaml's `proposer`, fed to these): a run that differs only in
# them is the same method on another candidate space, told apart by its proposer, not by its variant.
SETTINGS = ("proposer", "method.proposer", "method.optimizer.prompt.proposer")
NONE = "—"


def proposer_of(results: dict) -> str | None:
    """The run's proposer as results.json records it; for a run recorded before it did, what that version
    searched: DSPy and TextGrad LM-written instructions only, the loop methods their configured proposer."""
    if "proposer" in results:
        return results["proposer"]
    if results.get("method") in ("dspy", "textgrad"):
        return "lm"
    config = results.get("config") or {}
    method = config.get("method") or {}
    prompt = (method.get("optimizer") or {}).get("prompt")
    if prompt is None:
        return None
    model = prompt.get("lm") or method.get("optimizer_lm") or (config.get("lm") or {}).get("model")
    return resolve_proposer(str(prompt.get("proposer", "auto")), model, SimpleNamespace(lm=None))


def proposer_label(members: list[Run]) -> str:
    return ", ".join(sorted({proposer_of(r.results) or NONE for r in members}))


def without_proposer(variant: str) -> str:
    """A variant label without the proposer settings (the proposer is shown beside it)."""
    return ", ".join(p for p in variant.split(", ") if p and p.partition("=")[0] not in SETTINGS)
