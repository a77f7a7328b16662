"""Prompt optimizer: OPRO-style instruction search scored by the component's local reward r_k.

Each step, the run's LM (tagged "<component>.optimizer" in the usage ledger) reads a meta-prompt
showing the component's description and fields, a few example inputs with the current
instruction's outputs and their r_k, and the instructions tried so far with their scores in
ASCENDING order (OPRO: the best sits last, nearest the ask), and samples `num_candidates` new
instructions. Each candidate is scored by the mean r_k of the outputs the component produces
with it on the search sample — one component execution, never a run of the whole system
(seed Chapter 7: "each one scored by average r_k over the search-size sample"). After
`num_steps` steps the best candidate is returned if it strictly beats the current instruction.

Weak models (the embedded 135M default) wrap, prefix, ramble, loop, or continue the examples
instead of answering, so the instruction is read from <prompt>...</prompt> tags with fallbacks
(an unclosed tag, a code fence, the reply's first paragraph), and empty, tiny, runaway, looping,
garbled, copied or repeated candidates are rejected without spending a search run on them;
`details["rejected"]` counts them by reason.

Where candidates come from (`proposer`): `lm` is the OPRO meta-prompt above; `pool` draws
`num_candidates` a step from what does not depend on the LM's writing (prompt_pool.py: the
pipeline's alternative instructions and structured edits of the best instruction so far); `mixed`
scores the pool's draws and the LM's proposals that pass the checks. `auto` (the default) is
`mixed` when the optimizer LM is an embedded local model and `lm` otherwise. `gepa` (Algorithm 1's
search only, `method.optimizer.prompt.proposer=gepa`) hands the search to GEPA's reflective proposer
and its Pareto pool over the search inputs, r_k the metric (prompt_gepa.py). `lm` (a model name,
`method.optimizer_lm` in the configs) sends the optimizer's calls to another model than the task's.

Settings (cfg; Table 7 defaults): proposer auto, lm null (the run's model), num_candidates 3,
num_steps 3, num_examples 3 (shown in the meta-prompt), max_history 20 (scored instructions
shown), temperature 0.7 (OPRO used 1.0 with large models; SmolLM2-135M sampled byte soup at
1.0), max_tokens 256, example_chars 300 (each shown field is cut to this), min_words 3,
max_chars 2000, seed.
"""
from __future__ import annotations

import contextlib
import re
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor

import numpy as np

from optimas_cli.errors import UserError
from optimas_cli.lm.local.registry import is_local
from optimas_cli.optim.prompt_pool import Draft, draw, pool_drafts, worked_example
from optimas_cli.optim.prompt_view import NO_INSTRUCTION, clipped, lm_request
from optimas_cli.optim.proposal import Proposal, make_rng, score_outputs, score_value, setting
from optimas_cli.system.component import Component, ConfigKind
from optimas_cli.system.context import RunContext
from optimas_cli.system.local_reward import LocalReward

SOURCES = ("auto", "lm", "pool", "mixed")  # where instruction candidates come from, for every method that searches them
PROPOSERS = (*SOURCES, "gepa")  # what Algorithm 1's prompt search takes (optimizer.prompt.proposer)

SYSTEM_MESSAGE = "You improve the instructions of one step of an AI pipeline. You answer with one instruction."

TAGGED = re.compile(r"<prompt>(.*?)</prompt>", re.IGNORECASE | re.DOTALL)
OPEN_TAG = re.compile(r"<prompt>(.*)", re.IGNORECASE | re.DOTALL)
FENCED = re.compile(r"```[a-zA-Z]*\n?(.*?)```", re.DOTALL)
THINKING = re.compile(r"<think>.*?</think>", re.IGNORECASE | re.DOTALL)
LEAD_IN = re.compile(
    r"^\s*(?:sure[,!.]?\s*)?(?:here(?: is|'s)[^:\n]*:|(?:new |improved |better )?(?:instruction|prompt)\s*:)\s*",
    re.IGNORECASE,
)
# Where a weak model starts imitating the meta-prompt instead of answering it.
TEMPLATE_ECHO = re.compile(r"^\s*(?:score\s*[:=]|example \d+ (?:input|output|score)\b)", re.IGNORECASE | re.MULTILINE)
COPY_MIN_CHARS = 15  # a shown example value at least this long, found verbatim, means a copied example
CONCURRENT_CANDIDATES = 8  # candidate instructions executed at once (a step has num_candidates, or twice that mixed)


# -- reading an instruction out of a weak model's reply --------------------------------------------
def _clean(text: str) -> str:
    text = re.sub(r"</?prompt>", "", text, flags=re.IGNORECASE)
    cut = TEMPLATE_ECHO.search(text)
    if cut:
        text = text[: cut.start()]
    text = LEAD_IN.sub("", text.strip()).strip()
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "\"'`":
        text = text[1:-1].strip()
    return text


def candidate_readings(reply: str) -> list[str]:
    """Possible instructions in a reply, from the most explicit form present only.

    Tagged blocks if any; else the text after an unclosed <prompt>; else code fences; else the
    reply's first paragraph (untagged replies of weak models ramble on after it). A lower form is
    never used when a higher one exists, so a rejected tagged answer is not rescued by reading
    the chatter around it as an instruction.
    """
    reply = THINKING.sub("", reply or "")
    opened = OPEN_TAG.search(reply)
    readings = TAGGED.findall(reply) or ([opened.group(1)] if opened else []) or FENCED.findall(reply)
    if not readings:
        paragraphs = [p for p in re.split(r"\n\s*\n", _clean(reply)) if p.strip()]
        readings = paragraphs[:1] or [""]
    out: list[str] = []
    for r in map(_clean, readings):
        if r not in out:
            out.append(r)
    return out


def normalized(text: str) -> str:
    return " ".join(text.lower().split())


def rejection_reason(
    text: str, seen: set[str], min_words: int, max_chars: int, shown: Sequence[str] = ()
) -> str | None:
    """Why a reading is not worth a search run, or None if it is a usable instruction."""
    words = text.split()
    if not words:
        return "empty"
    if len(words) < min_words:
        return "too_short"
    if len(text) > max_chars:
        return "too_long"
    if len(words) >= 12 and len(set(w.lower() for w in words)) / len(words) < 0.3:
        return "repetitive"  # a weak model stuck in a loop
    visible = "".join(words)
    if max(map(len, words)) > 40 or sum(c.isalpha() for c in visible) < 0.6 * len(visible):
        return "garbled"  # sampled byte soup, code, or tables rather than an instruction
    if any(value in text for value in shown):
        return "copied_example"  # the model continued the examples instead of writing an instruction
    if normalized(text) in seen:
        return "duplicate"
    return None


def extract_instruction(
    reply: str, seen: set[str], min_words: int = 3, max_chars: int = 2000, shown: Sequence[str] = ()
) -> tuple[str | None, str]:
    """(instruction, "ok") for the first usable reading, else (None, reason of the best reading)."""
    reasons = []
    for reading in candidate_readings(reply):
        reason = rejection_reason(reading, seen, min_words, max_chars, shown)
        if reason is None:
            return reading, "ok"
        reasons.append(reason)
    return None, reasons[0]


# -- the meta-prompt ----------------------------------------------------------------------------
def _fields(record: dict, limit: int) -> str:
    return "\n".join(f"  {k}: {clipped(v, limit)}" for k, v in record.items())


def shown_values(examples: Sequence[tuple[dict, dict, float]], limit: int) -> list[str]:
    """The example field values the meta-prompt shows, long enough that a verbatim copy is telling."""
    values = (clipped(v, limit) for inputs, outputs, _ in examples for v in (*inputs.values(), *outputs.values()))
    return sorted({v.removesuffix(" ...") for v in values if len(v) >= COPY_MIN_CHARS})


def meta_prompt(
    component: Component, history: Sequence[tuple[str, float]], examples: Sequence[tuple[dict, dict, float]],
    example_chars: int,
) -> list[dict]:
    """The OPRO meta-prompt: the task, example runs, scored instructions in ascending order, the ask.

    The scored instructions come last, best one nearest the ask: a small model attends mostly to
    the end of its prompt, and one that ends on examples tends to continue the examples.
    """
    parts = [
        f"A pipeline step called '{component.name}' does this: {component.description}",
        f"It reads the fields {', '.join(component.inputs)} and writes the fields {', '.join(component.outputs)}.",
    ]
    if examples:
        parts.append("Examples of what the step receives and what it writes with the current instruction:")
        for i, (inputs, outputs, score) in enumerate(examples, 1):
            parts.append(
                f"Example {i} input:\n{_fields(inputs, example_chars)}\n"
                f"Example {i} output:\n{_fields(outputs, example_chars)}\nExample {i} score: {score:.3f}"
            )
    parts.append(
        "The step's behaviour is set by an instruction. These instructions were tried, with their scores, "
        "from lowest to highest. A higher score is better."
    )
    for text, score in sorted(history, key=lambda pair: pair[1]):
        parts.append(f"Instruction:\n{text}\nScore: {score:.3f}")
    parts.append(
        "Write a new instruction for the step that is different from the instructions above and gets a higher "
        "score. Reply with the instruction only, between <prompt> and </prompt>."
    )
    return [{"role": "system", "content": SYSTEM_MESSAGE}, {"role": "user", "content": "\n\n".join(parts)}]


# -- the search ---------------------------------------------------------------------------------
def resolve_proposer(proposer: str, optimizer_lm: str | None, ctx: RunContext, choices: Sequence[str] = SOURCES) -> str:
    """`auto`: `mixed` for an embedded local optimizer LM (it cannot write good instructions alone), else `lm`.
    `choices`: what the caller's search takes (SOURCES for any method, PROPOSERS for Algorithm 1's)."""
    if proposer not in choices:
        where = "method.optimizer.prompt.proposer" if "gepa" in choices else "proposer=... (every method's)"
        raise UserError(f"unknown prompt proposer {proposer!r}", f"set {where} to one of {', '.join(choices)}")
    if proposer != "auto":
        return proposer
    model = optimizer_lm or getattr(ctx.lm, "model", None)
    return "mixed" if isinstance(model, str) and is_local(model) else "lm"


def loop_proposer(pipeline, optimizer: Mapping | None, optimizer_lm: str | None, ctx: RunContext) -> str | None:
    """The proposer Algorithm 1's prompt search uses in this run (a method's `optimizer:` settings);
    None for a pipeline without prompt components."""
    if not any(c.kind is ConfigKind.PROMPT for c in pipeline.system.components.values()):
        return None
    prompt = dict((optimizer or {}).get("prompt") or {})
    return resolve_proposer(str(prompt.get("proposer", "auto")), prompt.get("lm") or optimizer_lm, ctx, PROPOSERS)


def sample_proposals(
    component: Component, messages: list[dict], n: int, request: dict, ctx: RunContext, rng: np.random.Generator
) -> list[str]:
    """n samples of the meta-prompt in one request, through the run's LM, tagged as the optimizer.

    This builds the request RunContext.complete would, but keeps all n texts (complete() returns
    the first). The n samples get distinct random streams (one per offset) and are batched; a
    fresh sample index per step keeps a later step, or a later Algorithm 1 iteration asking the
    same meta-prompt after a rejection, from replaying cached answers.
    """
    if ctx.lm is None:
        raise RuntimeError(f"the prompt optimizer of {component.name!r} needs an LM, but this run has none")
    from optimas_cli.lm.types import LMRequest

    lm_request = LMRequest(
        messages=messages, n=n, seed=ctx.seed, sample_index=int(rng.integers(1 << 30)), **request
    )
    return list(ctx.lm.complete([lm_request], component=f"{component.name}.optimizer", phase=ctx.phase)[0].texts)


@contextlib.contextmanager
def concurrent_executions(
    component: Component, inputs: Sequence[dict], ctx: RunContext
) -> Iterator[Callable[[str], Future]]:
    """`execute(instruction)` starts the component on `inputs` under that instruction in a thread and returns
    its Future, so the candidates of a step run at the same time: their LM calls share the embedded model's
    decode steps (one candidate's 4-8 rows alone left most of a step's cost unshared; make run's prompt search
    decoded ~34 tokens/s). The calls and their cache keys are those of one run after another; r_k then scores
    the outputs in the candidates' order, in the caller's thread."""
    workers = ThreadPoolExecutor(max_workers=CONCURRENT_CANDIDATES, thread_name_prefix="candidate")
    try:
        yield lambda instruction: workers.submit(component.execute, list(inputs), instruction, ctx)
    except BaseException:
        workers.shutdown(wait=False, cancel_futures=True)
        raise
    workers.shutdown()


def propose(
    component: Component,
    current_value: str | None,
    search_inputs: Sequence[dict],
    lrf: LocalReward,
    ctx: RunContext,
    cfg: Mapping | None = None,
    *,
    rng: np.random.Generator | None = None,
) -> Proposal:
    num_candidates = int(setting(cfg, "num_candidates", 3))
    num_steps = int(setting(cfg, "num_steps", 3))
    num_examples = int(setting(cfg, "num_examples", 3))
    max_history = int(setting(cfg, "max_history", 20))
    example_chars = int(setting(cfg, "example_chars", 300))
    min_words, max_chars = int(setting(cfg, "min_words", 3)), int(setting(cfg, "max_chars", 2000))
    request = lm_request(cfg)
    proposer = resolve_proposer(str(setting(cfg, "proposer", "auto")), request.get("model"), ctx, PROPOSERS)
    rng = make_rng(rng, cfg, ctx)
    if proposer == "gepa":
        from optimas_cli.optim.prompt_gepa import propose_with_gepa

        return propose_with_gepa(component, current_value, search_inputs, lrf, ctx, cfg, rng)

    baseline, outputs, per_input = score_value(component, current_value, search_inputs, lrf, ctx)
    shown = rng.choice(len(search_inputs), size=min(num_examples, len(search_inputs)), replace=False)
    examples = [(search_inputs[i], outputs[i], per_input[i]) for i in sorted(shown)]
    top = int(np.argmax(per_input))  # the search input whose output r_k scores highest: the worked example
    example = worked_example(component, search_inputs[top], outputs[top], example_chars)

    current_text = current_value if current_value else NO_INSTRUCTION
    history: list[tuple[str, float]] = [(current_text, baseline)]
    seen = {normalized(current_text)}
    candidates: list[dict] = []
    rejected: Counter[str] = Counter()
    shown = shown_values(examples, example_chars)

    def usable_draft(text: str) -> bool:  # the LM's checks, minus the copy check (a worked example copies)
        if rejection_reason(text, seen, min_words, max_chars) is not None:
            return False
        seen.add(normalized(text))
        return True

    for step in range(num_steps):
        best_so_far = sorted(history, key=lambda pair: pair[1])[-max_history:]
        drafts: list[Draft] = []
        with concurrent_executions(component, search_inputs, ctx) as execute:
            if proposer in ("pool", "mixed"):
                best_text = best_so_far[-1][0] if best_so_far[-1][0] != NO_INSTRUCTION else ""
                drafts += draw(pool_drafts(component, best_text, example), usable_draft, num_candidates, rng)
            runs = [execute(draft.text) for draft in drafts]  # they run while the LM writes its proposals
            if proposer in ("lm", "mixed"):
                for reply in sample_proposals(component, meta_prompt(component, best_so_far, examples, example_chars),
                                              num_candidates, request, ctx, rng):
                    text, reason = extract_instruction(reply, seen, min_words, max_chars, shown)
                    if text is None:
                        rejected[reason] += 1
                        continue
                    seen.add(normalized(text))
                    drafts.append(Draft(text, "lm"))
                    runs.append(execute(text))
            for draft, run in zip(drafts, runs, strict=True):
                score = score_outputs(component, draft.text, search_inputs, run.result(), lrf, ctx)[0]
                history.append((draft.text, score))
                candidates.append({"step": step, "prompt": draft.text, "score": score, "source": draft.source})

    best = max(candidates, key=lambda c: c["score"], default=None)
    improved = best is not None and best["score"] > baseline
    return Proposal(
        value=best["prompt"] if improved else current_value,
        local_score=best["score"] if improved else baseline,
        baseline_score=baseline,
        details={
            "candidates": candidates,
            "rejected": dict(rejected),
            "proposer": proposer,
            "proposals_requested": num_candidates * num_steps * (2 if proposer == "mixed" else 1),
            "improved": improved,
        },
    )
