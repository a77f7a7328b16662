"""SysDPO's loss: DPO over whole trajectories of a DAG of generative models, factorized by node.

The probability of a trajectory factorizes over the DAG, p(tau | x) = prod_i p_i(y_i | parents(y_i)),
so its log-ratio against the reference is a sum over the trainable nodes (non-trainable nodes
have no parameters: their terms are equal under policy and reference and drop out):

    h(tau) = sum_i [log pi_theta_i(y_i | Pa(y_i)) - log pi_ref(y_i | Pa(y_i))]
    loss   = -log sigmoid(beta * (h(tau_chosen) - h(tau_rejected)))

with tau_chosen preferred by the final metric. Where two trajectories share a node's output and
its parents (k = 1 at that node) that node's terms cancel. trl's DPOTrainer scores one model's
completion per pair; this loss needs several nodes' completions (each under its own adapter) in one
term, so it is implemented here, on the adapters of `NodePolicies`. The reference is the base model.
"""
from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from optimas_cli.optim.node_policies import NodePolicies, NodeSegments


@dataclass
class TrajectoryPair:
    chosen: NodeSegments
    rejected: NodeSegments
    gap: float  # metric(chosen) - metric(rejected) > 0


def preference_pairs(trajectories: Sequence[NodeSegments], scores: Sequence[float]) -> list[TrajectoryPair]:
    """Every pair of one input's trajectories whose final scores differ (ties carry no preference)."""
    pairs = []
    for i in range(len(trajectories)):
        for j in range(i + 1, len(trajectories)):
            if scores[i] == scores[j]:
                continue
            win, lose = (i, j) if scores[i] > scores[j] else (j, i)
            pairs.append(TrajectoryPair(trajectories[win], trajectories[lose], abs(scores[i] - scores[j])))
    return pairs


def sysdpo_loss(chosen_logratio: torch.Tensor, rejected_logratio: torch.Tensor, beta: float) -> torch.Tensor:
    return -F.logsigmoid(beta * (chosen_logratio - rejected_logratio)).mean()


class SysDPOTrainer:
    """AdamW on every node's adapter; the reference log-probs of the pairs are computed once."""

    def __init__(self, policies: NodePolicies, pairs: Sequence[TrajectoryPair], beta: float, learning_rate: float):
        self.policies, self.pairs, self.beta = policies, list(pairs), float(beta)
        self.ref_chosen = policies.trajectory_logprobs([p.chosen for p in pairs], reference=True)
        self.ref_rejected = policies.trajectory_logprobs([p.rejected for p in pairs], reference=True)
        self.optimizer = torch.optim.AdamW(policies.parameters, lr=learning_rate)

    def logratios(self, indices: Sequence[int]) -> tuple[torch.Tensor, torch.Tensor]:
        """h(chosen), h(rejected) of the pairs at `indices`, with gradients."""
        index = torch.tensor(list(indices))
        chosen = self.policies.trajectory_logprobs([self.pairs[i].chosen for i in indices]) - self.ref_chosen[index]
        rejected = self.policies.trajectory_logprobs([self.pairs[i].rejected for i in indices]) - self.ref_rejected[index]
        return chosen, rejected

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
                "margin_after": round(self.margin(), 5)}
