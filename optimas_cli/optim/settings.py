"""Typed settings of the local optimizers, one dataclass per configuration kind.

Built from the method's `optimizer:` group (conf/method/*.yaml): `optimizer.choice.temperature`,
`optimizer.weights.steps`, ... An unknown or mistyped key is one clear error at start-up, and
each default lives here only.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TypeVar

from optimas_cli.settings import from_mapping

T = TypeVar("T")


@dataclass
class ChoiceSettings:
    temperature: float = 1.0   # sample a global choice with p ∝ exp(mean r_k / temperature)
    seed: int | None = None    # used when the loop passes no random generator


@dataclass
class WeightsSettings:
    """GRPO on the component's LoRA adapter (see optim/weights.py)."""

    work_dir: str | None = None          # adapters are saved in fresh folders under it (the loop sets it)
    # The same CPU-sized values as conf/optimizer/default.yaml (every run gets those; these serve code that
    # builds the settings without Hydra).
    steps: int = 2
    prompts_per_step: int = 1
    num_generations: int = 2
    max_completion_length: int | None = None  # None: the component's own max_tokens (what it is deployed with)
    learning_rate: float = 1e-4
    beta: float = 0.0                    # KL coefficient; 0 loads no reference model
    temperature: float = 1.0
    lora_r: int = 8
    lora_alpha: int = 16
    lora_dropout: float = 0.0
    bf16: bool | None = None             # None: on a CUDA GPU that supports it
    score_on_search: bool = True         # score new and current adapters by mean r_k, like the other optimizers
    held_out_fraction: float = 0.25      # the last share of the search inputs GRPO does not train on: r_k
                                         # before/after there says whether the adapter learned (history details)
    seed: int | None = None


def typed(cls: type[T], cfg: T | Mapping | None, group: str) -> T:
    """`cfg` as `cls`: passed through when it already is one, else built (and checked) from a mapping."""
    return cfg if isinstance(cfg, cls) else from_mapping(cls, cfg, group)
