"""RunContext: what a component needs at run time besides its inputs and configuration."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from optimas_cli.system.ledger import RunLedger
from optimas_cli.system.local_reward import LocalReward

PAIRED_NOISE = ("shared", "independent")  # the run's `paired_noise` setting
UNPAIRED_PHASES = ("test", "test_initial")  # test scoring never shares noise between configurations
UNPAIRED_EVENT = "unpaired_noise"  # a batch whose requests could not be matched to its examples


@dataclass
class RunContext:
    """Shared services (LM, ledger, local rewards) plus per-call sampling settings.

    `temperature` overrides the LM's default (candidate sampling for preference pairs);
    `sample_index` tells repeated samples apart, so the call cache keeps them distinct.
    `charged=False` marks executions the paper's accounting does not charge (a Monte Carlo repeat).
    `paired_noise` (the run's `paired_noise=shared`): outside test scoring, a component's randomness is
    drawn from (run seed, example, component, sample index) instead of from its request, so two
    configurations compared on one example see the same random numbers (common random numbers:
    lm/sampling.py). `noise_rows` names the examples of the batch being executed (CompoundSystem sets it).
    """

    ledger: RunLedger
    lm: Any = None  # optimas_cli.lm.client.LMClient
    lrf: LocalReward | None = None  # r_k, for {"route": "lrf"} choices
    caps: Any = None  # optimas_cli.system.caps.BudgetCaps, checked at the loops' safe points
    phase: str = "run"
    temperature: float | None = None
    sample_index: int = 0
    seed: int = 0
    charged: bool = True
    traces: Any = None  # optimas_cli.system.traces.TraceSink: evaluations write per-example traces there
    paired_noise: bool = False
    noise_rows: tuple[str, ...] | None = None

    def shares_noise(self) -> bool:
        return self.paired_noise and self.phase not in UNPAIRED_PHASES

    def noise_keys(self, component: str, n: int, rows: list[int] | None = None) -> list[str | None]:
        """The shared-noise key of each of n requests of `component` (None: keyed by its request). The
        requests are the batch's rows in order, or the rows listed in `rows`; requests that cannot be
        matched to rows fall back to independent noise, and are counted."""
        if self.noise_rows is None:
            return [None] * n
        if rows is None and n == len(self.noise_rows):
            rows = list(range(n))
        if rows is None or len(rows) != n:
            self.count(component, UNPAIRED_EVENT, n)
            return [None] * n
        return [f"{component}|{self.noise_rows[r]}" for r in rows]

    def replace(self, **changes: Any) -> RunContext:
        """A copy sharing the same LM, ledger and LRF, with some settings changed."""
        return dataclasses.replace(self, **changes)

    def count(self, component: str, event: str, n: int = 1) -> None:
        """Count an event of a component in this phase (e.g. "parse_failures"); see RunLedger.note."""
        self.ledger.note(component, event, n, self.phase)

    def complete(self, component: str, messages: list[list[dict]], rows: list[int] | None = None,
                 **request: Any) -> list[str]:
        """One completion per chat in `messages`, through the run's LM layer, attributed to `component`;
        `rows`: which of the batch's inputs each chat belongs to, when not one chat per input in order."""
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
                noise_key=key,
                **request,
            )
            for m, key in zip(messages, self.noise_keys(component, len(messages), rows), strict=True)
        ]
        return [r.texts[0] for r in self.lm.complete(requests, component=component, phase=self.phase)]
