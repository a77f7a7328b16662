"""Typed settings of the local optimizers, one dataclass per configuration kind.

Built from the method's `optimizer:` group (conf/method/*.yaml): `optimizer.choice.temperature`,
`optimizer.weights.steps`, ... An unknown or mistyped key is one clear error at start-up, and
each default lives here only.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TypeVar

from optimas_cli.errors import UserError
from optimas_cli.settings import from_mapping

T = TypeVar("T")
# The global choice's score scales and each one's default temperature, in its own unit (optim/choice.py
# says why): relative scores are fractions of the candidates' spread, absolute ones are r_k itself.
CHOICE_SCALES = {"relative": 0.1, "absolute": 1.0}
# When a choice is scored (optim/choice.py): post, by r_k of the outputs every value produces (run first);
# pre, by the value scorer s_k(x, v) before anything runs (lrf/value_scorer.py).
CHOICE_ROUTES = ("post", "pre")


@dataclass
class ChoiceSettings:
    scale: str = "relative"           # relative | absolute (the paper's plain exp(mean r_k / temperature))
    temperature: float | None = None  # None: the scale's default (CHOICE_SCALES)
    route: str = "post"               # CHOICE_ROUTES: score values by r_k after running them, or by s_k before
    seed: int | None = None           # used when the loop passes no random generator

    def __post_init__(self) -> None:
        if self.scale not in CHOICE_SCALES:
            raise UserError(f"unknown choice scale {self.scale!r}", f"use one of {', '.join(CHOICE_SCALES)}")
        if self.route not in CHOICE_ROUTES:
            raise UserError(f"unknown choice route {self.route!r}", f"use one of {', '.join(CHOICE_ROUTES)}")
        if self.temperature is None:
            self.temperature = CHOICE_SCALES[self.scale]
        if not self.temperature > 0:
            raise UserError(f"choice temperature must be positive, got {self.temperature!r}",
                            "set optimizer.choice.temperature to a number > 0, or null for the scale's default")


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


@dataclass
class RaceSettings:
    """Shortlist and race (optim/race.py): the loop races the top `shortlist` candidates the local reward ranks
    on paired validation minibatches, by successive halving; 0 (the default, which says why) is off."""

    shortlist: int = 0                 # contenders raced; 0 or 1: the local optimizer's pick goes to the gate alone
    reduction_factor: int = 3          # eta: each rung keeps the best 1/eta of its contenders (optuna's pruner: 4)
    min_examples: int | None = None    # the first rung's validation examples; None: sized so the last rung before
                                       # the gate's full pass has 1/eta of the validation set

    def __post_init__(self) -> None:
        if self.shortlist < 0:
            raise UserError(f"optimizer.race.shortlist={self.shortlist} is below 0",
                            "use 0 (off) or the number of candidates to race, e.g. 3")
        if self.reduction_factor < 2:
            raise UserError(f"optimizer.race.reduction_factor={self.reduction_factor} keeps every contender",
                            "use 2 or more (each rung keeps 1/reduction_factor of its contenders)")
        if self.min_examples is not None and self.min_examples < 1:
            raise UserError(f"optimizer.race.min_examples={self.min_examples} is below 1",
                            "use 1 or more, or null to size the first rung from the validation set")

    @property
    def on(self) -> bool:
        return self.shortlist >= 2


def typed(cls: type[T], cfg: T | Mapping | None, group: str) -> T:
    """`cfg` as `cls`: passed through when it already is one, else built (and checked) from a mapping."""
    return cfg if isinstance(cfg, cls) else from_mapping(cls, cfg, group)
