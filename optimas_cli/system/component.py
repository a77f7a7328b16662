"""A component of a compound system: declared fields, one configuration kind, a batched forward."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    from optimas_cli.system.context import RunContext


class ConfigKind(StrEnum):
    """What an optimizer may change on a component (paper Section 3)."""

    PROMPT = "prompt"  # instruction text
    CHOICE = "choice"  # one value of a finite set: a model, retriever k, aggregator weights
    WEIGHTS = "weights"  # a trainable local model: the path of a LoRA adapter (None = base model)
    NONE = "none"  # nothing to optimize (e.g. a code executor)


# A per-instance choice is configured by a routing policy instead of a single value:
# {"route": "heuristic"} uses the component's naive local metric, {"route": "lrf"} picks, for
# each input, the value whose output the component's local reward function scores highest. Both run
# every value on each input before picking. {"route": "lrf_pre"} picks before running anything: the
# local reward's value scorer ranks (input, value) (lrf/value_scorer.py), and only the pick runs.
HEURISTIC_ROUTE = {"route": "heuristic"}
LRF_ROUTE = {"route": "lrf"}
LRF_PRE_ROUTE = {"route": "lrf_pre"}
PRE_EXECUTION_ROUTES = ("lrf_pre",)  # routes that run one value per input
LRF_ROUTES = ("lrf", "lrf_pre")  # routes that read the run's local reward model (ctx.lrf)


def route_of(value: Any) -> str | None:
    return value.get("route") if isinstance(value, dict) else None


def routes_by_lrf(value: Any) -> bool:
    """Whether a configuration value is a route the local reward model picks for (it must be loaded)."""
    return route_of(value) in LRF_ROUTES


@dataclass(eq=False)
class Component:
    """One node C_k of the DAG. Subclasses implement `forward`; optimizers only set its configuration."""

    name: str
    description: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    kind: ConfigKind = ConfigKind.NONE
    default: Any = None  # the initial configuration value v_k^0
    choices: tuple = ()  # CHOICE: the finite set of values
    per_instance: bool = False  # CHOICE: picked per input by a routing policy rather than once globally
    when: Callable[[dict], bool] | None = field(default=None, repr=False)  # run only where this holds
    # Whether `forward` makes one LM call per input: `optimas plan` counts a run's calls from it.
    calls_lm: ClassVar[bool] = False
    # How the local reward model reads a field: {field: view name}, the views being defined in
    # optimas_cli/lrf/text.py (VIEWS). Fields not named are read as text. A view keeps what tells two
    # outputs apart within the reward model's token budget (a retriever's k and passage titles).
    reward_view: dict[str, str] = field(default_factory=dict)

    # PROMPT: what the pool proposer (optim/prompt.py) draws from besides the LM, so a weak LM's
    # writing is not the only source of candidates. `alternatives`: whole instructions written for
    # what the pipeline's metric rewards; `format_constraints`: sentences that add, then tighten, an
    # output-format constraint (loosest first), appended to the current instruction.
    alternatives: tuple[str, ...] = field(default=(), repr=False)
    format_constraints: tuple[str, ...] = field(default=(), repr=False)

    def __post_init__(self) -> None:
        self.inputs, self.outputs = tuple(self.inputs), tuple(self.outputs)
        self.reward_view = dict(self.reward_view)
        self.alternatives, self.format_constraints = tuple(self.alternatives), tuple(self.format_constraints)
        self.kind = ConfigKind(self.kind)
        if self.kind is ConfigKind.CHOICE and not self.choices:
            raise ValueError(f"component {self.name!r}: a choice component needs a non-empty `choices`")

    # -- to implement ---------------------------------------------------------------------------
    def forward(self, inputs: list[dict], value: Any, ctx: RunContext) -> list[dict]:
        """Map a batch of input dicts (the declared input fields) to a batch of output dicts."""
        raise NotImplementedError

    def heuristic_score(self, inputs: dict, outputs: dict) -> float:
        """The naive local metric of a per-instance choice (keyword overlap, a leaderboard, brevity)."""
        raise NotImplementedError(f"component {self.name!r} declares no heuristic local metric")

    # -- used by the system ---------------------------------------------------------------------
    def is_stochastic(self, temperature: float) -> bool:
        """Whether two runs on the same input can differ when LM calls decode at `temperature` (so
        Monte Carlo repeats are worth paying for). Prompt and weights components are LM calls, random
        only when sampled; a component with randomness of its own overrides this."""
        return temperature > 0 and self.kind in (ConfigKind.PROMPT, ConfigKind.WEIGHTS)

    def candidate_values(self) -> list[Any]:
        """The values a choice optimizer or a preference collector enumerates."""
        return list(self.choices)

    def values_per_input(self, value: Any) -> int:
        """How many values `execute` runs on each input: every candidate under a routing policy that picks
        from outputs, else one."""
        route = route_of(value)
        return len(self.candidate_values()) if route is not None and route not in PRE_EXECUTION_ROUTES else 1

    def execute(self, inputs: list[dict], value: Any, ctx: RunContext) -> list[dict]:
        """Run the component, resolving a per-instance routing policy into one value per input."""
        route = route_of(value)
        if route is None:
            outputs = self.forward(inputs, value, ctx)
        else:
            outputs = self._route(inputs, route, ctx)
        if len(outputs) != len(inputs):
            raise RuntimeError(f"component {self.name!r} returned {len(outputs)} outputs for {len(inputs)} inputs")
        for out in outputs:
            missing = [f for f in self.outputs if f not in out]
            if missing:
                raise RuntimeError(f"component {self.name!r} did not produce declared output(s) {missing}")
        return [{f: out[f] for f in self.outputs} for out in outputs]

    def _route(self, inputs: list[dict], route: str, ctx: RunContext) -> list[dict]:
        if route in PRE_EXECUTION_ROUTES:
            return self._route_before_running(inputs, ctx)
        per_value = [self.forward(inputs, v, ctx) for v in self.candidate_values()]
        if route == "heuristic":
            scores = [[self.heuristic_score(x, outs[i]) for i, x in enumerate(inputs)] for outs in per_value]
        elif route == "lrf":
            if ctx.lrf is None:
                raise RuntimeError(f"component {self.name!r} routes by its local reward, but no LRF is loaded")
            scores = [ctx.lrf.score(self.name, inputs, outs) for outs in per_value]
        else:
            raise ValueError(f"component {self.name!r}: unknown routing policy {route!r}")
        best = [max(range(len(per_value)), key=lambda j: scores[j][i]) for i in range(len(inputs))]
        return [per_value[j][i] for i, j in enumerate(best)]

    def _route_before_running(self, inputs: list[dict], ctx: RunContext) -> list[dict]:
        """Pick a value per input from the value scorer's ranking, then run each picked value once, on the
        inputs that picked it (their shared-noise rows with them)."""
        if ctx.lrf is None or not hasattr(ctx.lrf, "score_values"):
            raise RuntimeError(f"component {self.name!r} routes by its local reward's value scorer, but none is loaded")
        values = self.candidate_values()
        scores = ctx.lrf.score_values(self.name, inputs, values)
        picks = [max(range(len(values)), key=row.__getitem__) for row in scores]
        outputs: list[dict | None] = [None] * len(inputs)
        for j in sorted(set(picks)):
            rows = [i for i, p in enumerate(picks) if p == j]
            sub = ctx.replace(noise_rows=tuple(ctx.noise_rows[i] for i in rows)) if ctx.noise_rows else ctx
            for i, out in zip(rows, self.forward([inputs[i] for i in rows], values[j], sub), strict=True):
                outputs[i] = out
        return outputs
