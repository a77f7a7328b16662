"""The request and response shapes every component and provider of the LM layer share."""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class LMRequest:
    """One chat completion request. Fields left None take the run's LM defaults."""

    messages: list[dict]
    model: str | None = None
    temperature: float | None = None
    max_tokens: int | None = None
    n: int = 1
    stop: list[str] | None = None
    seed: int | None = None
    sample_index: int = 0  # tells repeated samples at temperature > 0 apart (and in the cache)
    adapter: str | None = None  # LoRA adapter folder on a local model (weights-kind components)
    # Set: the n completions are the n groups of one diverse beam search with this Hamming penalty
    # (local models only), not n samples; temperature is then ignored.
    diversity_penalty: float | None = None
    # Set at temperature > 0: the sample's random stream is keyed by this instead of the messages, so
    # requests with one key share their noise (paired comparisons: lm/sampling.py).
    noise_key: str | None = None


@dataclass
class LMResponse:
    texts: list[str]
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached: bool = False
    cost: float = 0.0
    extra: dict = field(default_factory=dict)
