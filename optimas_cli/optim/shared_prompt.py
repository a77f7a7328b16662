"""GRPO's loss forward with each prompt computed once for all its completions.

trl scores a step's `num_generations` completions of one prompt as that many rows of prompt + completion, so
the prompt's tokens go through the forward, the recomputed forward and the backward once per completion. Here
each distinct prompt is one sequence: its tokens once, then every completion as a stream that attends to the
prompt and to itself (a 4D mask, each stream's positions continuing the prompt's). The log-probabilities and
their gradients are the same up to float rounding; an Amazon profiler step (2 prompts x 4 completions of 192
tokens) computes 2,486 tokens instead of 5,344 (docs/results/speed).
"""
from __future__ import annotations

import torch
from trl import GRPOTrainer

from optimas_cli.lm.local.decode import growing_cache

IGNORED = -100  # trl's label for a position that is not scored


class SharedPromptGRPOTrainer(GRPOTrainer):
    """trl's GRPOTrainer whose completions' log-probabilities share their prompt's forward pass."""

    def _get_per_token_logps_and_entropies(self, model, input_ids, attention_mask, logits_to_keep,
                                           batch_size=None, compute_entropy=False, compute_aux_loss=False, **extra):
        if compute_aux_loss or any(v is not None for v in extra.values()) or not streams_supported(model):
            return super()._get_per_token_logps_and_entropies(
                model, input_ids, attention_mask, logits_to_keep, batch_size=batch_size,
                compute_entropy=compute_entropy, compute_aux_loss=compute_aux_loss, **extra)
        with self.accelerator.autocast():
            logps, entropies = shared_prompt_logps(model, input_ids, attention_mask, logits_to_keep)
        return logps, entropies if compute_entropy else None, None


def streams_supported(model) -> bool:
    """A custom 4D mask replaces the model's own masking, so a model with sliding-window layers (whose window
    the mask would drop) keeps trl's rows."""
    config = getattr(model.get_base_model() if hasattr(model, "get_base_model") else model, "config", None)
    return config is not None and growing_cache(config) is not None


def prompt_groups(prompt_ids: torch.Tensor, prompt_mask: torch.Tensor) -> list[list[int]]:
    """Row indices that share one prompt (its real tokens), in order of first appearance."""
    groups: dict[tuple[int, ...], list[int]] = {}
    for row in range(prompt_ids.size(0)):
        groups.setdefault(tuple(prompt_ids[row][prompt_mask[row].bool()].tolist()), []).append(row)
    return list(groups.values())


def packed_group(prompt: torch.Tensor, completions: torch.Tensor, completion_mask: torch.Tensor):
    """One prompt and its completions as one sequence: (input_ids, 4D mask, position_ids, shift_labels), each
    with a leading batch dimension of 1, and where each completion's log-probs start in it.

    The prompt minus its last token comes once. Each completion is a stream of [last prompt token, c_0 ..
    c_{K-2}] whose position k scores c_k, so the last prompt token, which scores every completion's first
    token, is repeated once per stream.
    """
    n, k = completions.shape
    shared = prompt[:-1]
    streams = torch.cat([prompt[-1:].expand(n, 1), completions[:, :-1]], dim=1)  # [n, k]
    input_ids = torch.cat([shared, streams.reshape(-1)])
    start = len(shared)
    positions = torch.cat([torch.arange(start), torch.arange(start, start + k).repeat(n)])
    stream = torch.cat([torch.full((start,), -1), torch.arange(n).repeat_interleave(k)])
    sees = (positions[:, None] >= positions[None, :]) & ((stream[None, :] == -1) | (stream[:, None] == stream[None, :]))
    labels = torch.cat([torch.full((start,), IGNORED), completions.masked_fill(completion_mask == 0, IGNORED).reshape(-1)])
    starts = [start + j * k for j in range(n)]
    return input_ids[None], sees[None, None], positions[None], labels[None], starts


def shared_prompt_logps(model, input_ids: torch.Tensor, attention_mask: torch.Tensor, logits_to_keep: int):
    """Per-token log-probs and entropies ([rows, logits_to_keep]) of each row's last `logits_to_keep` tokens,
    as trl's GRPO computes them (0 where the completion is padded), one forward per distinct prompt."""
    k = logits_to_keep
    prompt_ids, prompt_mask = input_ids[:, :-k], attention_mask[:, :-k]
    completions, completion_mask = input_ids[:, -k:], attention_mask[:, -k:]
    logps = [None] * input_ids.size(0)
    entropies = [None] * input_ids.size(0)
    device = input_ids.device
    for rows in prompt_groups(prompt_ids, prompt_mask):
        prompt = prompt_ids[rows[0]][prompt_mask[rows[0]].bool()]
        ids, sees, positions, labels, starts = packed_group(prompt.cpu(), completions[rows].cpu(),
                                                            completion_mask[rows].cpu())
        out = model(input_ids=ids.to(device), attention_mask=sees.to(device), position_ids=positions.to(device),
                    shift_labels=labels.to(device), fused_lm_head=True)
        for row, start in zip(rows, starts, strict=True):
            logps[row] = out.log_probs[0, start:start + k]
            entropies[row] = None if out.entropy is None else out.entropy[0, start:start + k]
    return torch.stack(logps), None if entropies[0] is None else torch.stack(entropies)
