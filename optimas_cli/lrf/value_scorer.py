"""The value scorer s_k(x, v): how a choice component's value v will do on input x, before anything runs.

r_k(x, y) judges an output, so a route that picks by it must run every value on every input first
({"route": "lrf"}: the options times a run per input). s_k ranks (input, value) from the input alone, so a
route that picks by it runs one value per input ({"route": "lrf_pre"}), and a global choice is scored
without running any (optim/choice.py, optimizer.choice.route=pre).

The model is RouteLLM's matrix-factorization router (Ong et al. 2024): a Bradley-Terry logit
s(x, v) = e_v . (P z(x)) + b_v over a learned value embedding e_v (one per value of the choice), a
projection P of the input's embedding and a per-value bias b_v (the context-free part: a leaderboard). z(x)
is phi of the input text alone (the reward model's own backbone, the text it reads without the output),
standardized on the training inputs: inputs of one component share most of their text, and what tells
them apart is small against their common direction. It trains from the same preference pairs as r_k: the
collector records the value behind each candidate (PreferencePair.meta chosen_value/rejected_value), so
each pair of a choice says v+ beat v- on x, and the loss is the pairwise one, -log sigmoid(s(x, v+) -
s(x, v-)). A pair of two values was drawn on x (lrf.collect.choices=sample: a few values per input), so
s_k learns from one or two executed candidates per input and generalizes across inputs through P and e.

Settings (lrf.value_scorer; defaults here): `dim` the rank of the factorization (16: the values of a
component are few next to the backbone's width, and a low rank shares what the pairs teach across values),
`steps` and `lr` of full-batch AdamW, `weight_decay` its decoupled decay. Chosen once, not tuned on results.
"""
from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from optimas_cli.lrf.pairs import PreferencePair
from optimas_cli.settings import from_mapping

STD_FLOOR = 1e-6  # a dimension constant over the training inputs is left unscaled


@dataclass
class ValueScorerSettings:
    dim: int = 16
    steps: int = 300
    lr: float = 0.02
    weight_decay: float = 0.01
    seed: int = 0

    @classmethod
    def from_lrf(cls, lrf_cfg: Mapping) -> ValueScorerSettings:
        return from_mapping(cls, lrf_cfg.get("value_scorer"), "lrf.value_scorer")


def value_key(value: Any) -> str:
    """A choice value as a key: values may be unhashable (aggregator weight lists) and come back from JSON
    (pairs.jsonl) as lists where the pipeline declared tuples; both give one key."""
    return json.dumps(value, sort_keys=True, default=str)


class ValueHead(nn.Module):
    """s(x, v) for every value v of one component from z(x) (module docstring). The value embeddings and
    biases start at zero, so an untrained head scores every value alike (ties), not at random."""

    def __init__(self, hidden: int, keys: Sequence[str], dim: int, seed: int = 0):
        super().__init__()
        self.keys = list(keys)
        self.index = {k: i for i, k in enumerate(self.keys)}
        self.project = nn.Linear(hidden, dim, bias=False)
        self.embedding = nn.Parameter(torch.zeros(len(self.keys), dim))
        self.bias = nn.Parameter(torch.zeros(len(self.keys)))
        self.register_buffer("mean", torch.zeros(hidden))
        self.register_buffer("scale", torch.ones(hidden))
        with torch.no_grad():
            gen = torch.Generator().manual_seed(int(seed))
            self.project.weight.copy_(torch.randn(self.project.weight.shape, generator=gen) / hidden ** 0.5)

    def forward(self, embeddings: torch.Tensor) -> torch.Tensor:
        """Scores, shape (inputs, values)."""
        z = (embeddings - self.mean) / self.scale
        return self.project(z) @ self.embedding.T + self.bias

    def columns(self, values: Sequence[Any]) -> list[int]:
        missing = [v for v in values if value_key(v) not in self.index]
        if missing:
            raise KeyError(f"the value scorer was not built with value(s) {missing[:3]}")
        return [self.index[value_key(v)] for v in values]


def choice_pairs(pairs: Sequence[PreferencePair], component: str) -> list[PreferencePair]:
    """A component's pairs that name the value behind each side (a choice's)."""
    return [p for p in pairs if p.component == component and "chosen_value" in p.meta and "rejected_value" in p.meta]


def fit_value_head(head: ValueHead, embed, pairs: Sequence[PreferencePair], settings: ValueScorerSettings) -> dict:
    """Train `head` from scratch on a component's choice pairs; `embed(contexts)` gives z's inputs (phi of
    each input's text). Pairs naming a value the head does not know are left out. Returns what it trained on."""
    usable = [p for p in pairs if value_key(p.meta["chosen_value"]) in head.index
              and value_key(p.meta["rejected_value"]) in head.index]
    fresh = ValueHead(head.project.in_features, head.keys, head.embedding.shape[1], settings.seed)
    head.load_state_dict(fresh.state_dict())  # refits start alike, whatever the head learned before
    if not usable:
        return {"pairs": 0}
    contexts = list({value_key(p.context): p.context for p in usable}.values())
    row = {value_key(c): i for i, c in enumerate(contexts)}
    with torch.no_grad():
        emb = embed(contexts).float().cpu()
    with torch.no_grad():
        head.mean.copy_(emb.mean(0))
        head.scale.copy_(emb.std(0, unbiased=False).clamp(min=STD_FLOOR) if len(contexts) > 1 else torch.ones_like(head.scale))
    x = torch.tensor([row[value_key(p.context)] for p in usable])
    won = torch.tensor([head.index[value_key(p.meta["chosen_value"])] for p in usable])
    lost = torch.tensor([head.index[value_key(p.meta["rejected_value"])] for p in usable])
    device = head.embedding.device
    head.to("cpu")
    optimizer = torch.optim.AdamW(head.parameters(), lr=settings.lr, weight_decay=settings.weight_decay)

    def pairwise_loss() -> torch.Tensor:
        scores = head(emb)
        return F.softplus(scores[x, lost] - scores[x, won]).mean()  # -log sigmoid(s+ - s-)

    with torch.enable_grad():
        for _ in range(settings.steps):
            optimizer.zero_grad(set_to_none=True)
            pairwise_loss().backward()
            optimizer.step()
    with torch.no_grad():
        final = float(pairwise_loss())
    head.to(device)
    return {"pairs": len(usable), "inputs": len(contexts), "final_loss": round(final, 4)}


@torch.no_grad()
def value_pair_accuracy(model, pairs: Sequence[PreferencePair]) -> dict:
    """How often s_k ranks the chosen value above the rejected one on held-out choice pairs (a tie is a
    miss), per component and macro mean, as metrics.summarize_correct gives r_k's."""
    from optimas_cli.lrf.metrics import summarize_correct

    components, correct = [], []
    for name in sorted({p.component for p in pairs}):
        group = choice_pairs(pairs, name)
        if not group or not model.scores_values(name):
            continue
        values = list({value_key(v): v for p in group for v in (p.meta["chosen_value"], p.meta["rejected_value"])}.values())
        column = {value_key(v): j for j, v in enumerate(values)}
        scores = model.score_values(name, [p.context for p in group], values)
        for p, row in zip(group, scores, strict=True):
            components.append(name)
            correct.append(float(row[column[value_key(p.meta["chosen_value"])]]
                                 > row[column[value_key(p.meta["rejected_value"])]]))
    return summarize_correct(components, correct)


def fit_value_scorers(model, system, pairs: Sequence[PreferencePair], settings: ValueScorerSettings,
                      names: Sequence[str] | None = None) -> dict:
    """Fit the value scorer of every choice component of `system` (or of those in `names`) on its pairs in
    `pairs`, giving it one first where it has none; returns what each trained on."""
    from optimas_cli.system.component import ConfigKind

    fitted = {}
    for name, comp in system.components.items():
        if comp.kind is not ConfigKind.CHOICE or (names is not None and name not in names):
            continue
        if not model.scores_values(name):
            model.add_value_head(name, [value_key(v) for v in comp.candidate_values()], settings.dim)
        fitted[name] = fit_value_head(model.value_head(name), lambda xs, n=name: model.embed_inputs(n, xs),
                                      choice_pairs(pairs, name), settings)
    return fitted
