"""The `gepa` prompt proposer: Algorithm 1's local search of one prompt component, run by the `gepa` package.

`gepa.optimize` evolves the component's instruction with its reflective mutation proposer and its own
Pareto candidate pool, over the component's search inputs and with the component's local reward r_k as
its metric: nothing but this component runs (as with the other proposers), and its metric is r_k, never
the system's. One GEPA iteration picks a parent from the Pareto front (the candidates best on at least one
search input, the dominated ones dropped), shows the reflection LM the parent's instruction with a
minibatch of the component's inputs, outputs and their r_k, and scores the rewritten child on the same
minibatch; a child whose minibatch sum is strictly higher is scored on every search input and joins the
pool. The search inputs are GEPA's training set and its Pareto set both (GEPA's own default without a
validation set): the candidate returned is the pool's highest mean r_k, as the other proposers return
theirs, kept only if it is strictly above the current instruction's.

Budget: `num_candidates x num_steps` GEPA iterations (one reflection each), the number of candidates the
OPRO search asks its LM for. An output is cached per (instruction, input), so a parent's minibatch costs
nothing (the pool's candidates were all run on every search input) and a search executes the component on
at most (1 + iterations) x search inputs, the `lm` proposer's bound.

Caps: before every execution the caps are checked with its runs ahead, and before every iteration with the
cheapest next execution's; a cap they would cross raises BudgetExhausted there (the loop then ends at its
last checkpoint, as after a search that crosses it), so a local search never crosses max_runs. Reflection
calls go through the run's LM client (optim/prompt_reflection.RunReflectionLM), cached and counted in the usage
ledger under "<component>.optimizer" like the OPRO meta-prompt's, with the prompt search's temperature,
max_tokens and `lm`; each search draws a fresh sample index, so a search repeated after a rejection samples
anew. GEPA's own reading of the reply (the text in ``` fences) is used as is.
"""
from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

import gepa
import numpy as np
from gepa import EvaluationBatch
from gepa.gepa_utils import remove_dominated_programs
from gepa.utils import MaxCandidateProposalsStopper

from optimas_cli.optim.prompt_reflection import RunReflectionLM
from optimas_cli.optim.prompt_view import NO_INSTRUCTION, clipped, lm_request
from optimas_cli.optim.proposal import Proposal, score_outputs, setting
from optimas_cli.system.caps import check_caps
from optimas_cli.system.component import Component
from optimas_cli.system.context import RunContext

log = logging.getLogger("optimas")
MINIBATCH = 3  # GEPA's reflection minibatch (its default), or every search input where there are fewer


class _Log:
    """GEPA's logger: its lines go to the run's log, not stdout."""

    def log(self, message: str) -> None:
        log.debug("gepa (local): %s", message)


class ComponentAdapter:
    """The GEPAAdapter over one component: a candidate is {component name: instruction}, a data item is the
    index of a search input, its score the r_k of the component's output on it (module docstring)."""

    propose_new_texts = None  # GEPA's own reflective proposal, through `reflection_lm`

    def __init__(self, component: Component, inputs: Sequence[dict], lrf: Any, ctx: RunContext, chars: int):
        self.component, self.inputs, self.lrf, self.ctx, self.chars = component, list(inputs), lrf, ctx, chars
        self.cache: dict[tuple[str, int], tuple[dict, float]] = {}  # (instruction, input) -> (outputs, r_k)
        self.executed = 0  # inputs the component ran on (GEPA counts a cached one as a metric call too)

    def value(self, text: str) -> str | None:
        return None if text == NO_INSTRUCTION else text

    def run_cost(self, n_inputs: int, text: str) -> float:
        """Equivalent system runs of executing the component on n inputs (the ledger's 1/K each)."""
        return n_inputs * self.component.values_per_input(self.value(text)) / self.ctx.ledger.num_components

    def evaluate(self, batch: list[int], candidate: dict[str, str], capture_traces: bool = False) -> EvaluationBatch:
        text = candidate[self.component.name]
        todo = list(dict.fromkeys(i for i in batch if (text, i) not in self.cache))  # GEPA pads with repeats
        if todo:
            check_caps(self.ctx, {"max_runs": self.run_cost(len(todo), text)})
            inputs = [self.inputs[i] for i in todo]
            outputs = self.component.execute(inputs, self.value(text), self.ctx)
            _, outputs, scores = score_outputs(self.component, self.value(text), inputs, outputs, self.lrf, self.ctx)
            self.cache.update({(text, i): (o, s) for i, o, s in zip(todo, outputs, scores, strict=True)})
            self.executed += len(todo)
        rows = [self.cache[(text, i)] for i in batch]
        return EvaluationBatch(outputs=[o for o, _ in rows], scores=[s for _, s in rows],
                               trajectories=[(self.inputs[i], *self.cache[(text, i)]) for i in batch]
                               if capture_traces else None, num_metric_calls=len(todo))

    def make_reflective_dataset(self, candidate: dict[str, str], eval_batch: EvaluationBatch,
                                components_to_update: list[str]) -> dict[str, list[dict]]:
        scores = [s for _, _, s in eval_batch.trajectories or []]
        low, high = (min(scores), max(scores)) if scores else (0.0, 0.0)
        records = [{"Inputs": {k: clipped(v, self.chars) for k, v in inputs.items()},
                    "Generated Outputs": {k: clipped(v, self.chars) for k, v in outputs.items()},
                    "Feedback": (f"A learned reward that predicts how much this output helps the whole pipeline's "
                                 f"final result scored it {score:.3f} (higher is better; on these examples the "
                                 f"scores range from {low:.3f} to {high:.3f}).")}
                   for inputs, outputs, score in eval_batch.trajectories or []]
        return {name: records for name in components_to_update if records}


class _Stop:
    """GEPA's stop rule: its iterations done, or a failed reflection (GEPA would go on past it); before any
    other iteration the caps, with the cheapest next execution ahead, raise BudgetExhausted when reached."""

    def __init__(self, iterations: int, reflection, ctx: RunContext, ahead: float):
        self.done, self.reflection, self.ctx, self.ahead = MaxCandidateProposalsStopper(iterations), reflection, ctx, ahead

    def __call__(self, state) -> bool:
        if self.done(state) or self.reflection.error is not None:
            return True
        check_caps(self.ctx, {"max_runs": self.ahead})
        return False


def propose_with_gepa(component: Component, current_value: str | None, search_inputs: Sequence[dict], lrf: Any,
                      ctx: RunContext, cfg: Mapping | None, rng: np.random.Generator) -> Proposal:
    if not search_inputs:
        raise ValueError(f"component {component.name!r}: local optimization needs at least one search input")
    if ctx.lm is None:
        raise RuntimeError(f"the prompt optimizer of {component.name!r} needs an LM, but this run has none")
    iterations = int(setting(cfg, "num_candidates", 3)) * int(setting(cfg, "num_steps", 3))
    request = lm_request(cfg)
    reflection = RunReflectionLM(ctx.replace(sample_index=int(rng.integers(1 << 30))), request["max_tokens"],
                                 request["temperature"], tag=f"{component.name}.optimizer", model=request.get("model"))
    adapter = ComponentAdapter(component, search_inputs, lrf, ctx, int(setting(cfg, "example_chars", 300)))
    minibatch = min(MINIBATCH, len(search_inputs))
    seed_text = current_value if current_value else NO_INSTRUCTION
    data = list(range(len(search_inputs)))
    result = gepa.optimize(
        seed_candidate={component.name: seed_text}, trainset=data, valset=data, adapter=adapter,
        reflection_lm=reflection, candidate_selection_strategy="pareto", reflection_minibatch_size=minibatch,
        skip_perfect_score=False,  # r_k has no perfect score
        stop_callbacks=_Stop(iterations, reflection, ctx, adapter.run_cost(minibatch, seed_text)),
        logger=_Log(), seed=int(rng.integers(1 << 31)), track_best_outputs=False,
        raise_on_exception=True)  # a cap's BudgetExhausted, or an execution's error, ends the search
    if reflection.error is not None:
        raise reflection.error

    means = list(result.val_aggregate_scores)
    best = result.best_idx
    improved = means[best] > means[0]
    front = remove_dominated_programs(result.per_val_instance_best_candidates, dict(enumerate(means)))
    return Proposal(
        value=adapter.value(result.candidates[best][component.name]) if improved else current_value,
        local_score=means[best] if improved else means[0],
        baseline_score=means[0],
        details={
            "proposer": "gepa",
            "candidates": [{"prompt": c[component.name], "score": means[i], "parents": list(result.parents[i])}
                           for i, c in enumerate(result.candidates) if i > 0],
            "pareto_front": sorted({i for programs in front.values() for i in programs}),
            "reflection_calls": reflection.calls,
            "executions": adapter.executed,
            "proposals_requested": iterations,
            "improved": improved,
        },
    )
