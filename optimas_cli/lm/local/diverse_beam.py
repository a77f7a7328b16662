"""Diverse beam search (Vijayakumar et al., AAAI 2018) over a causal LM.

transformers 5 dropped group beam search from `generate` (it now lives in a hub download, which an
offline machine cannot fetch), so it is implemented here. The beams of one prompt are split into G
groups of B beams each. At every step the groups extend in order; group g's token scores are the
model's log-probabilities minus `diversity_penalty` times the number of groups before g (of the
same prompt) that picked that token at this step (Hamming diversity). Within a group it is
ordinary beam search with the penalized scores accumulated, as transformers' group beam search
did: the 2B best extensions are considered, one ending in end-of-sequence (or a stop string)
becomes a finished hypothesis scored by its sum divided by length ** length_penalty, the B best
others go on. The best hypothesis of each group is returned, best first — SysDPO's k intermediate
candidates come from k groups.

The search itself only sees a `StepScorer` (log-probs of the next token for every row), so a
hand-made scorer can check it on a toy; `CausalLMScorer` is the one over a transformers model.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import torch


@dataclass(frozen=True)
class DiverseBeamSettings:
    groups: int
    diversity_penalty: float
    max_new_tokens: int
    beams_per_group: int = 1
    length_penalty: float = 1.0

    def __post_init__(self) -> None:
        if self.groups < 1 or self.beams_per_group < 1 or self.max_new_tokens < 1:
            raise ValueError(f"diverse beam search needs groups, beams_per_group and max_new_tokens >= 1: {self}")


class StepScorer(Protocol):
    """Next-token log-probs for R = prompts * groups * beams rows (row = (prompt * G + g) * B + beam)."""

    def first(self) -> torch.Tensor:
        """(R, V) log-probs of the first new token."""

    def advance(self, origins: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
        """Row r continues row origins[r] with tokens[r]; returns the (R, V) log-probs after it."""


@dataclass
class _Group:
    """One group of one prompt: its finished hypotheses (score, tokens) and whether it is done."""

    finished: list[tuple[float, list[int]]] = field(default_factory=list)
    done: bool = False

    def add(self, score: float, tokens: list[int], keep: int) -> None:
        self.finished.append((score, tokens))
        self.finished.sort(key=lambda item: -item[0])
        del self.finished[keep:]


def diverse_beam_search(
    scorer: StepScorer,
    num_prompts: int,
    settings: DiverseBeamSettings,
    eos_ids: Sequence[int],
    stopped: Callable[[list[int]], bool] | None = None,
) -> list[list[list[int]]]:
    """Per prompt, the G best sequences (one per group, best first) as lists of new token ids.

    A sequence that ends in an end-of-sequence token keeps it (as `generate` does); `stopped(tokens)`
    marks a sequence finished when its text reached a stop string.
    """
    G, B = settings.groups, settings.beams_per_group
    eos = set(eos_ids)
    rows = num_prompts * G * B
    # Only the first beam of a group is live at step 0: the others would repeat it.
    beam_scores = torch.full((num_prompts, G, B), -1e9)
    beam_scores[:, :, 0] = 0.0
    sequences: list[list[int]] = [[] for _ in range(rows)]
    groups = [[_Group() for _ in range(G)] for _ in range(num_prompts)]

    def score_of(total: float, length: int) -> float:
        return total / (length**settings.length_penalty)

    logprobs = scorer.first()
    for step in range(settings.max_new_tokens):
        vocab = logprobs.shape[-1]
        # The search's bookkeeping (scores, tokens, origins) lives on the CPU; a scorer on a GPU returns
        # its log-probs there, and adding a CPU (B, 1) tensor to them would fail ("same device").
        logprobs = logprobs.float().cpu().view(num_prompts, G, B, vocab)
        origins = torch.arange(rows).view(num_prompts, G, B).clone()
        tokens = torch.zeros(num_prompts, G, B, dtype=torch.long)
        new_scores = beam_scores.clone()
        for p in range(num_prompts):
            picked_this_step = torch.zeros(vocab)  # tokens chosen by this prompt's earlier groups
            for g in range(G):
                group = groups[p][g]
                if group.done:
                    continue
                scores = beam_scores[p, g, :, None] + logprobs[p, g] - settings.diversity_penalty * picked_this_step
                top_scores, top_flat = scores.view(-1).topk(min(2 * B, scores.numel()))
                kept = 0
                for rank, (total, flat) in enumerate(zip(top_scores.tolist(), top_flat.tolist(), strict=True)):
                    beam, token = divmod(flat, vocab)
                    row = (p * G + g) * B + beam
                    extended = sequences[row] + [token]
                    if token in eos or (stopped is not None and stopped(extended)):
                        if rank < B:  # as in transformers: a finish ranked below the beam width is dropped
                            group.add(score_of(total, len(extended)), extended, B)
                        continue
                    tokens[p, g, kept], origins[p, g, kept], new_scores[p, g, kept] = token, row, total
                    kept += 1
                    if kept == B:
                        break
                for token in tokens[p, g, :kept].tolist():
                    picked_this_step[token] += 1
                best_running = new_scores[p, g, 0].item() if kept else float("-inf")
                # transformers' early_stopping=False test: no running beam can still beat the worst kept hypothesis
                if len(group.finished) >= B and group.finished[-1][0] >= score_of(best_running, step + 1):
                    group.done = True
                if kept < B:  # every extension finished: nothing left to run
                    new_scores[p, g, kept:] = -1e9
                    group.done = group.done or kept == 0
        flat_origins = origins.view(-1)
        sequences = [sequences[o] + [t] for o, t in zip(flat_origins.tolist(), tokens.view(-1).tolist(), strict=True)]
        beam_scores = new_scores
        if all(gr.done for per_prompt in groups for gr in per_prompt) or step == settings.max_new_tokens - 1:
            break
        logprobs = scorer.advance(flat_origins, tokens.view(-1))

    results = []
    for p in range(num_prompts):
        best: list[tuple[float, list[int]]] = []
        for g in range(G):
            group = groups[p][g]
            if not group.done:  # cut by max_new_tokens: the running beams are hypotheses too
                for beam in range(B):
                    total = beam_scores[p, g, beam].item()
                    if total > -1e8:
                        group.add(score_of(total, len(sequences[(p * G + g) * B + beam])), sequences[(p * G + g) * B + beam], B)
            best.append(group.finished[0])
        results.append([tokens for _, tokens in sorted(best, key=lambda item: -item[0])])
    return results


class CausalLMScorer:
    """Next-token log-probs from a transformers causal LM, with its KV cache reordered as beams move."""

    def __init__(self, model, input_ids: torch.Tensor, attention_mask: torch.Tensor, rows_per_prompt: int):
        self.model = model
        self.mask = attention_mask.repeat_interleave(rows_per_prompt, dim=0)
        ids = input_ids.repeat_interleave(rows_per_prompt, dim=0)
        # Left padding: positions count real tokens only, as generate computes them.
        positions = (self.mask.cumsum(-1) - 1).clamp(min=0)
        # logits of the last position only: all of them would be rows x prompt x vocabulary floats
        out = model(input_ids=ids, attention_mask=self.mask, position_ids=positions, use_cache=True, logits_to_keep=1)
        self.cache, self._first = out.cache, out.logits[:, -1]

    def first(self) -> torch.Tensor:
        return torch.log_softmax(self._first.float(), dim=-1)

    def advance(self, origins: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
        origins = origins.to(self.mask.device)
        self.cache.reorder_cache(origins)
        self.mask = torch.cat([self.mask[origins], torch.ones_like(self.mask[:, :1])], dim=1)
        positions = (self.mask.sum(-1, keepdim=True) - 1)
        out = self.model(input_ids=tokens[:, None].to(self.mask.device), attention_mask=self.mask,
                         position_ids=positions, cache=self.cache, use_cache=True)
        self.cache = out.cache
        return torch.log_softmax(out.logits[:, -1].float(), dim=-1)
