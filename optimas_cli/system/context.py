"""RunContext: what a component needs at run time besides its inputs and configuration."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from optimas_cli.system.ledger import RunLedger


@dataclass
class RunContext:
    """Shared services (LM, ledger, local rewards) plus per-call sampling settings.

    `temperature` overrides the LM's default (candidate sampling for preference pairs);
    `sample_index` tells repeated samples apart, so the call cache keeps them distinct.
    `charged=False` marks executions the paper's accounting does not charge (a Monte Carlo repeat).
    """

    ledger: RunLedger
    lm: Any = None  # optimas_cli.lm.client.LMClient
    lrf: Any = None  # optimas_cli.lrf.model.LocalRewardModel, for {"route": "lrf"} choices
    caps: Any = None  # optimas_cli.system.caps.BudgetCaps, checked at the loops' safe points
    phase: str = "run"
    temperature: float | None = None
    sample_index: int = 0
    seed: int = 0
    charged: bool = True
    traces: Any = None  # optimas_cli.system.traces.TraceSink: evaluations write per-example traces there

    def replace(self, **changes: Any) -> RunContext:
        """A copy sharing the same LM, ledger and LRF, with some settings changed."""
        return dataclasses.replace(self, **changes)

    def count(self, component: str, event: str, n: int = 1) -> None:
        """Count an event of a component in this phase (e.g. "parse_failures"); see RunLedger.note."""
        self.ledger.note(component, event, n, self.phase)

    def complete(self, component: str, messages: list[list[dict]], **request: Any) -> list[str]:
        """One completion per chat in `messages`, through the run's LM layer, attributed to `component`."""
        if self.lm is None:
            raise RuntimeError(f"component {component!r} needs an LM, but this run has none configured")
        from optimas_cli.lm.types import LMRequest

        temperature = request.pop("temperature", None)
        if temperature is None:
            temperature = self.temperature
        requests = [
            LMRequest(
                messages=m,
                temperature=temperature,
                sample_index=self.sample_index,
                seed=self.seed,
                **request,
            )
            for m in messages
        ]
        return [r.texts[0] for r in self.lm.complete(requests, component=component, phase=self.phase)]
