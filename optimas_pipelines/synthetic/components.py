"""The simulator's components: seeded text writers whose quality marks follow spec.py's model.

A component reads the request (its input type is the request's first word) and its parents' drafts
(each names what its parent did, and holds its marks), and writes one short draft: what it did, on
which request type, then `marks` words, each "solid" or "shaky". Mark i is solid when u_i < y_k(x),
y_k as spec.Instance.share computes it from those inputs: with probability `noise` u_i is uniform on [0, 1] (an
independent draw), else u_i = (i + w) / marks for one offset w (stratified: the solid count is
y * marks rounded up or down). Either way E[solid share] = y_k(x) exactly, which is what exact.py uses.
The draws are a hash of the component, its inputs and its value, like a greedy LM's output: fixed per
input. Sampled (temperature > 0, lrf.collect's candidates) they are keyed by the run seed, the
sample index and the temperature too, as lm/sampling.py keys an LM sample, and the noise share rises
to at least the temperature (capped at 1): a sampled output varies more, as an LM's does. Under shared
noise (RunContext.paired_noise) the example's name replaces the inputs and value in the hash, as the
request leaves an LM sample's key: two configurations then draw the same uniforms on one example, so
their marks differ only where their y_k differ (common random numbers).
"""
from __future__ import annotations

import hashlib
import json

from optimas_cli.optim.prompt_pool import EXAMPLE_HEADER
from optimas_cli.system import Component, ConfigKind
from optimas_pipelines.synthetic.spec import STRATEGY_POOL, UNGUIDED, ComponentSpec, Instance

SOLID, SHAKY = "solid", "shaky"
SEPARATOR = ": "


def request_text(number: int, type_name: str) -> str:
    return f"{type_name} request {number}"  # short: the reward model reads it in every component's text


def type_of(request: str) -> str:
    return request.split(" ", 1)[0]


def solid_share(draft: str | None) -> float:
    """The share of solid marks in a draft (0 for a missing one)."""
    if not draft or SEPARATOR not in draft:
        return 0.0
    marks = draft.split(SEPARATOR, 1)[1].split()
    return sum(m == SOLID for m in marks) / len(marks) if marks else 0.0


def named_value(draft: str) -> str:
    """What the draft says was done: a strategy, an option, or `unguided`."""
    return draft.split(" on ", 1)[0]


def instruction(strategy: str) -> str:
    return f"Draft the reply with the {strategy} strategy. Keep the draft short."


def strategy_of(text: str | None) -> str:
    """The strategy an instruction names first (before any worked example the pool's `example` edit
    appends); `unguided` when it names none. Any text, edited or written by an LM, maps to one."""
    head = (text or "").split(EXAMPLE_HEADER, 1)[0].lower()
    found = [(head.find(s), s) for s in STRATEGY_POOL if s in head]
    return min(found)[1] if found else UNGUIDED


def uniforms(key: str, n: int) -> list[float]:
    """n uniforms in [0, 1) from a stable hash (Python's hash() is salted per process)."""
    digest = hashlib.shake_256(key.encode()).digest(8 * n)
    return [int.from_bytes(digest[8 * i: 8 * i + 8], "little") / 2.0 ** 64 for i in range(n)]


class SimulatedComponent(Component):
    def __init__(self, spec: ComponentSpec, instance: Instance, instance_seed: int):
        kinds = {"prompt": ConfigKind.PROMPT, "choice": ConfigKind.CHOICE, "route": ConfigKind.CHOICE}
        parents = tuple(instance.components[p].field for p in spec.parents)
        extra = {}
        if spec.kind == "prompt":
            extra = {"default": instruction(spec.default), "alternatives": tuple(instruction(v) for v in spec.values)}
        elif spec.kind == "choice":
            extra = {"default": spec.default, "choices": spec.values}
        else:  # a router starts on the leaderboard's top value, run alone: what its heuristic route picks for
            # every input (the leaderboard is context-free), without running every value to find it
            extra = {"default": spec.default, "choices": spec.values, "per_instance": True}
        what = {"prompt": "as instructed", "choice": "with its model", "route": "with a model per request"}[spec.kind]
        super().__init__(spec.name, f"Drafts {what}.", inputs=("request", *parents),
                         outputs=(spec.field,), kind=kinds[spec.kind], **extra)
        self.spec, self.instance, self.instance_seed = spec, instance, int(instance_seed)
        self.type_index = {t: i for i, t in enumerate(instance.types)}

    def is_stochastic(self, temperature: float) -> bool:
        return temperature > 0  # a sample redraws the marks (module docstring)

    def forward(self, inputs, value, ctx):
        name = strategy_of(value) if self.spec.kind == "prompt" else str(value)
        temperature = ctx.temperature if ctx.temperature is not None else getattr(ctx.lm, "temperature", 0.0)
        temperature = float(temperature or 0.0)
        sampled = [ctx.seed, ctx.sample_index, temperature] if temperature > 0 else None
        noise = max(self.instance.noise, min(1.0, temperature)) if sampled else self.instance.noise
        n = self.instance.marks
        rows = ctx.noise_rows or [None] * len(inputs)
        out = []
        for x, row in zip(inputs, rows, strict=True):
            type_name = type_of(x["request"])
            received = [(named_value(x[f] or ""), solid_share(x[f])) for f in self.inputs[1:]]
            y = self.instance.share(self.spec, name, self.type_index[type_name], received)
            drawn_from = [x, value] if row is None else ["shared", row]
            key = json.dumps([self.instance_seed, self.name, *drawn_from, sampled], sort_keys=True, default=str)
            u = uniforms(key, 2 * n + 1)
            offset, marks = u[0], []
            for i in range(n):
                draw = u[1 + 2 * i + 1] if u[1 + 2 * i] < noise else (i + offset) / n
                marks.append(SOLID if draw < y else SHAKY)
            out.append({self.spec.field: f"{name} on {type_name}{SEPARATOR}{' '.join(marks)}"})
        return out

    def heuristic_score(self, inputs, outputs):
        """Naive local metric of a router: the option's context-free leaderboard score, whatever the request."""
        return self.spec.leaderboard.get(named_value(outputs[self.spec.field]), 0.0)
