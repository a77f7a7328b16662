"""Local optimizers by configuration kind (Algorithm 1, step 2): the dispatch onto them.

Every optimizer has the same entry point,

    propose(component, current_value, search_inputs, lrf, ctx, cfg, *, rng=None) -> Proposal

and changes nothing itself: it returns a candidate value for ONE component, scored by that
component's local reward r_k (`lrf.score(name, inputs, outputs) -> list[float]`) on the search
sample (proposal.py: the Proposal and that scoring, which every optimizer shares); the Algorithm 1
loop forms the candidate system and runs the validation gate. `optimize_component` dispatches on
`component.kind`. The optimizer modules are imported lazily, so a run without a weights-kind
component never imports trl.
"""
from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from optimas_cli.optim.proposal import Proposal, setting
from optimas_cli.system.component import ConfigKind

if TYPE_CHECKING:
    import numpy as np

    from optimas_cli.system.component import Component
    from optimas_cli.system.context import RunContext
    from optimas_cli.system.local_reward import LocalReward


class LocalOptimizer(Protocol):
    """The entry point every local optimizer has (optim/prompt.py, choice.py, weights.py: `propose`)."""

    def __call__(self, component: Component, current_value: Any, search_inputs: Sequence[dict], lrf: LocalReward,
                 ctx: RunContext, cfg: Mapping, *, rng: np.random.Generator | None = None) -> Proposal: ...


def optimize_component(
    component: Component,
    current_value: Any,
    search_inputs: Sequence[dict],
    lrf: LocalReward,
    ctx: RunContext,
    cfg: Mapping | None = None,
    *,
    rng: np.random.Generator | None = None,
    base_model_path: str | None = None,
) -> Proposal:
    """Run the local optimizer of the component's configuration kind.

    `cfg` may hold one section per kind (`prompt:`, `choice:`, `weights:`); the section of this
    component's kind is passed on. A cfg without such a section is passed on whole.
    """
    kind = component.kind
    section = setting(cfg, kind.value, None)
    kind_cfg = section if section is not None else (cfg or {})
    propose: LocalOptimizer
    if kind is ConfigKind.PROMPT:
        from optimas_cli.optim import prompt

        propose = prompt.propose
    elif kind is ConfigKind.CHOICE:
        from optimas_cli.optim import choice

        propose = choice.propose
    elif kind is ConfigKind.WEIGHTS:
        from optimas_cli.optim import weights

        propose = functools.partial(weights.propose, base_model_path=base_model_path)
    else:
        raise ValueError(f"component {component.name!r} has nothing to optimize (kind {kind.value!r}); do not schedule it")
    return propose(component, current_value, search_inputs, lrf, ctx, kind_cfg, rng=rng)


__all__ = ["LocalOptimizer", "optimize_component"]
