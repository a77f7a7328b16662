"""Usage ledger of the LM layer: what each component asked for and what it cost."""
from __future__ import annotations

import threading
from collections import defaultdict
from dataclasses import asdict, dataclass


@dataclass
class ComponentUsage:
    """Counts for one component.

    calls: completions asked for (each of n samples counts); cache_hits: those served without
    generating (from the call cache, or a duplicate of a greedy sample in the same batch);
    tokens, seconds and cost: only what was really generated or paid for.
    """

    calls: int = 0
    cache_hits: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    seconds: float = 0.0
    cost: float = 0.0

    def add(self, other: ComponentUsage) -> None:
        for name, value in asdict(other).items():
            setattr(self, name, getattr(self, name) + value)

    def to_dict(self) -> dict:
        return {
            "calls": self.calls,
            "cache_hits": self.cache_hits,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "tokens": self.prompt_tokens + self.completion_tokens,
            "seconds": round(self.seconds, 3),
            "cost": round(self.cost, 6),
        }


class UsageLedger:
    """Thread-safe per-component usage; `to_dict()` goes into each run's results.json."""

    def __init__(self) -> None:
        self.components: dict[str, ComponentUsage] = defaultdict(ComponentUsage)
        self._lock = threading.Lock()

    def record(self, component: str, usage: ComponentUsage) -> None:
        with self._lock:
            self.components[component].add(usage)

    def total(self) -> ComponentUsage:
        total = ComponentUsage()
        with self._lock:
            for usage in self.components.values():
                total.add(usage)
        return total

    def restore(self, saved: dict) -> None:
        """Add the usage a checkpoint recorded (`to_dict()` output) before this process started."""
        fields = ComponentUsage.__dataclass_fields__
        for name, row in saved.get("by_component", {}).items():
            self.record(name, ComponentUsage(**{k: v for k, v in row.items() if k in fields}))

    def to_dict(self) -> dict:
        with self._lock:
            by_component = {name: usage.to_dict() for name, usage in sorted(self.components.items())}
        return {"total": self.total().to_dict(), "by_component": by_component}
