"""REINFORCE on the trainable nodes' adapters with the global reward of full-system rollouts.

    loss = -mean_tau (R(tau) - b) * sum_i log pi_theta_i(y_i | Pa(y_i)),   b = mean R over the batch

The shared mean baseline (one b for all rollouts of the batch) reduces variance without a value
network; no local reward function is involved, the global metric of each rollout is the reward.
"""
from __future__ import annotations

from collections.abc import Sequence

import torch

from optimas_cli.optim.node_policies import NodePolicies, NodeSegments


def reinforce_step(policies: NodePolicies, optimizer: torch.optim.Optimizer, trajectories: Sequence[NodeSegments],
                   rewards: Sequence[float]) -> dict:
    """One policy-gradient step; none when every rollout got the same reward (all advantages are 0)."""
    reward = torch.tensor([float(r) for r in rewards])
    if bool((reward == reward.mean()).all()):
        return {"rollouts": len(rewards), "baseline": float(reward.mean()), "loss": None}
    # One trajectory's graph at a time: the loss is a mean over trajectories, so the gradients of its
    # terms add up to the batch's; the whole batch's activations at once took Amazon past 24 GB.
    advantages = reward - reward.mean()
    optimizer.zero_grad()
    total = 0.0
    for i, trajectory in enumerate(trajectories):
        loss = -(advantages[i] * policies.trajectory_logprobs([trajectory])[0]) / len(trajectories)
        loss.backward()
        total += loss.item()
    optimizer.step()
    return {"rollouts": len(rewards), "baseline": round(float(reward.mean()), 5), "loss": round(total, 5)}
