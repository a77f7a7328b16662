"""SysDPO's loss: DPO on the final outputs of a DAG of generative models, factorized by node.

The probability of a trajectory factorizes over the DAG, p(tau | x) = prod_i p_i(y_i | Pa(y_i)), and
non-trainable nodes have no parameters (their terms are equal under policy and reference). A final
output z is scored by an estimate of log p(z | x): the log of a sum over "paths", each path a set of
node segments whose log-probs add up,

    log p^(z | x) = log sum_paths exp(sum_{i in path} log pi_i(y_i | Pa(y_i)))
    h(z)          = log p^_theta(z | x) - log p^_ref(z | x)
    loss          = -log sigmoid(beta * (h(z_chosen) - h(z_rejected)))

with z_chosen preferred by the final metric. Two estimators (methods/sysdpo.py picks one):

- SysDPO-Direct (`direct_pairs`): one path per output, the trajectory that produced it; pairs of the
  input's trajectories.
- SysDPO-Sampling (`sampling_pairs`, seed 003, Appendix B): the intermediate outputs y^1..y^k the input
  drew are shared; both outputs of a pair are scored under every one of them,
  p^(z | x) = sum_alpha p(y^alpha | x) p(z | x, y^alpha). With k = 1 the intermediate terms
  log p(y^1 | x) appear on both sides and cancel exactly; with k >= 2 they weight the final node's
  likelihood of z under each intermediate, which is how the preference reaches the upstream nodes.

trl's DPOTrainer scores one model's completion per pair; this loss needs several nodes' completions
(each under its own adapter) in one term, so it is implemented here, on the adapters of
`NodePolicies`. The reference is the base model.
"""
from __future__ import annotations

import random
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from itertools import combinations
from statistics import fmean

import torch
import torch.nn.functional as F

from optimas_cli.optim.node_policies import NodePolicies, NodeSegments


@dataclass
class OutputPair:
    """A preferred and a rejected final output of one input, each as the paths whose probabilities sum
    to its estimated p(z | x)."""

    chosen: list[NodeSegments]
    rejected: list[NodeSegments]
    gap: float  # metric(chosen) - metric(rejected) > 0


def _ranked(outputs: Sequence[tuple[float, list[NodeSegments]]]) -> list[OutputPair]:
    """Every two outputs whose scores differ, the better one chosen (ties carry no preference)."""
    pairs = []
    for (s_a, a), (s_b, b) in combinations(outputs, 2):
        if s_a != s_b:
            (win, s_win), (lose, s_lose) = sorted(((a, s_a), (b, s_b)), key=lambda o: -o[1])
            pairs.append(OutputPair(win, lose, s_win - s_lose))
    return pairs


def direct_pairs(trajectories: Sequence[NodeSegments], scores: Sequence[float]) -> list[OutputPair]:
    """SysDPO-Direct: every two of one input's trajectories whose final scores differ, each scored
    by its own path (the intermediates it happened to draw)."""
    return _ranked([(float(s), [t]) for t, s in zip(trajectories, scores, strict=True)])


def sampling_pairs(trajectories: Sequence[NodeSegments], scores: Sequence[float], final_node: str | None,
                   outputs: Sequence[Hashable] | None = None) -> list[OutputPair]:
    """SysDPO-Sampling: every two distinct final outputs of one input whose scores differ, both scored
    under the same sampled intermediates (every distinct set of the other trainable nodes' outputs
    among the input's trajectories).

    `final_node` is the trainable node whose completion is the final output: p(z | x, y^alpha) is its
    likelihood of z given the prompt it had on path alpha. None: a fixed component writes the final
    output (`outputs` holds each trajectory's); it decodes as in any run (greedy by default), so its
    output is a function of its inputs and p(z | x, y^alpha) is 1 on the paths that ended in z, else 0.
    A final output's score is the mean of its trajectories' scores.
    """
    intermediates: dict[tuple, NodeSegments] = {}  # alpha -> its intermediate segments
    final_prompt: dict[tuple, str] = {}  # alpha -> the final node's prompt on that path
    produced: dict[Hashable, tuple[list[float], list[tuple]]] = {}  # z -> (scores, the alphas that drew it)
    for i, (t, score) in enumerate(zip(trajectories, scores, strict=True)):
        shared = {n: seg for n, seg in t.items() if n != final_node}
        alpha = tuple(sorted(shared.items()))
        intermediates.setdefault(alpha, shared)
        if final_node is None:
            if outputs is None:
                raise ValueError("sampling_pairs needs each trajectory's final output when no trainable node writes it")
            z = outputs[i]
        else:
            final_prompt.setdefault(alpha, t[final_node][0])
            z = t[final_node][1]
        seen, alphas = produced.setdefault(z, ([], []))
        seen.append(float(score))
        if alpha not in alphas:
            alphas.append(alpha)

    def paths(z: Hashable, alphas: list[tuple]) -> list[NodeSegments]:
        if final_node is None:
            return [intermediates[a] for a in alphas]
        return [{**shared, final_node: (final_prompt[a], z)} for a, shared in intermediates.items()]

    return _ranked([(fmean(seen), paths(z, alphas)) for z, (seen, alphas) in produced.items()])


def sysdpo_loss(chosen_logratio: torch.Tensor, rejected_logratio: torch.Tensor, beta: float) -> torch.Tensor:
    return -F.logsigmoid(beta * (chosen_logratio - rejected_logratio)).mean()


def optimizer_steps(optimizer: torch.optim.Optimizer) -> int:
    """How many steps an Adam-family optimizer has taken (its per-parameter step counts)."""
    return max((int(state["step"]) for state in optimizer.state.values() if "step" in state), default=0)


class SysDPOTrainer:
    """DPO steps with the caller's optimizer over every node's adapter (kept across iterations, so its
    moment estimates carry over); the reference estimates of the pairs are computed once."""

    def __init__(self, policies: NodePolicies, pairs: Sequence[OutputPair], beta: float,
                 optimizer: torch.optim.Optimizer):
        self.policies, self.pairs, self.beta, self.optimizer = policies, list(pairs), float(beta), optimizer
        self.reference = self.estimates(range(len(self.pairs)), reference=True)

    def estimates(self, indices: Sequence[int], reference: bool = False) -> torch.Tensor:
        """log p^(chosen | x), log p^(rejected | x) of the pairs at `indices`: one row per pair.

        All their paths are scored in one call, so segments that paths share are scored once."""
        sides = [side for i in indices for side in (self.pairs[i].chosen, self.pairs[i].rejected)]
        values = self.policies.trajectory_logprobs([path for side in sides for path in side], reference=reference)
        sizes = [len(side) for side in sides]
        totals = [torch.logsumexp(part, dim=0) for part in torch.split(values, sizes)]
        return torch.stack(totals).reshape(len(indices), 2)

    def logratios(self, indices: Sequence[int]) -> tuple[torch.Tensor, torch.Tensor]:
        """h(chosen), h(rejected) of the pairs at `indices`, with gradients."""
        h = self.estimates(indices) - self.reference[torch.tensor(list(indices))]
        return h[:, 0], h[:, 1]

    def margin(self) -> float:
        """Mean h(chosen) - h(rejected): how much more than the reference the policy favours the winners."""
        with torch.no_grad():
            chosen, rejected = self.logratios(range(len(self.pairs)))
        return float((chosen - rejected).mean())

    def train(self, steps: int, batch_size: int, seed: int = 0) -> dict:
        order = list(range(len(self.pairs)))
        random.Random(seed).shuffle(order)
        size = min(batch_size, len(order))
        before, losses = self.margin(), []
        for step in range(steps):
            batch = [order[(step * size + i) % len(order)] for i in range(size)]
            # One pair's graph at a time (the loss is a mean over pairs, so the gradients add up to the
            # batch's): a batch of Amazon trajectory pairs at once took 22 GB of activations.
            self.optimizer.zero_grad()
            loss = 0.0
            for pair in batch:
                term = sysdpo_loss(*self.logratios([pair]), self.beta) / len(batch)
                term.backward()
                loss += term.item()
            self.optimizer.step()
            losses.append(round(loss, 5))
        return {"pairs": len(self.pairs), "losses": losses, "margin_before": round(before, 5),
                "margin_after": round(self.margin(), 5), "optimizer_steps": optimizer_steps(self.optimizer)}
