"""Usage ledger of the LM layer: what each component and each phase asked for and what it cost."""
from __future__ import annotations

import threading
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass


@dataclass
class ComponentUsage:
    """Counts for one component (or one phase).

    calls: completions asked for (each of n samples counts); cache_hits: those served without
    generating (from the call cache, or a duplicate of a greedy sample in the same batch);
    tokens, seconds and cost: only what was really generated or paid for. cost is in dollars for the
    calls whose price is known; `unpriced` counts generated API calls whose price is not (their cost is
    unknown, not zero). compute_seconds: generation time of local models (charged as compute).
    """

    calls: int = 0
    cache_hits: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    seconds: float = 0.0
    cost: float = 0.0
    unpriced: int = 0
    compute_seconds: float = 0.0

    def add(self, other: ComponentUsage) -> None:
        for name, value in asdict(other).items():
            setattr(self, name, getattr(self, name) + value)

    @classmethod
    def from_dict(cls, row: dict) -> ComponentUsage:
        return cls(**{k: v for k, v in row.items() if k in cls.__dataclass_fields__})

    def to_dict(self) -> dict:
        return {
            "calls": self.calls,
            "cache_hits": self.cache_hits,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "tokens": self.prompt_tokens + self.completion_tokens,
            "seconds": round(self.seconds, 3),
            "cost": round(self.cost, 6),
            "unpriced": self.unpriced,
            "compute_seconds": round(self.compute_seconds, 3),
        }


class UsageLedger:
    """Thread-safe usage by component and by phase; `to_dict()` goes into each run's results.json."""

    def __init__(self) -> None:
        self.components: dict[str, ComponentUsage] = defaultdict(ComponentUsage)
        self.phases: dict[str, ComponentUsage] = defaultdict(ComponentUsage)
        # component -> model -> calls asked for: which model each component really called
        self.models: dict[str, Counter] = defaultdict(Counter)
        self._lock = threading.Lock()

    def record(self, component: str, usage: ComponentUsage, phase: str = "-", models: Counter | None = None) -> None:
        with self._lock:
            self.components[component].add(usage)
            self.phases[phase].add(usage)
            self.models[component].update(models or {})

    def total(self) -> ComponentUsage:
        total = ComponentUsage()
        with self._lock:
            for usage in self.components.values():
                total.add(usage)
        return total

    def restore(self, saved: dict) -> None:
        """Add the usage a checkpoint recorded (`to_dict()` output) before this process started."""
        with self._lock:
            for name, row in saved.get("by_component", {}).items():
                self.components[name].add(ComponentUsage.from_dict(row))
            for name, row in saved.get("by_phase", {}).items():
                self.phases[name].add(ComponentUsage.from_dict(row))
            for name, counts in saved.get("by_model", {}).items():
                self.models[name].update(counts)

    def reset(self, saved: dict) -> None:
        """Set every count back to a `to_dict()` taken earlier."""
        with self._lock:
            self.components.clear()
            self.phases.clear()
            self.models.clear()
        self.restore(saved)

    def to_dict(self) -> dict:
        with self._lock:
            by_component = {name: usage.to_dict() for name, usage in sorted(self.components.items())}
            by_phase = {name: usage.to_dict() for name, usage in sorted(self.phases.items())}
            by_model = {name: dict(sorted(counts.items())) for name, counts in sorted(self.models.items()) if counts}
        return {"total": self.total().to_dict(), "by_component": by_component, "by_phase": by_phase,
                "by_model": by_model}
