"""RunLedger: component executions converted to equivalent full-system runs, plus wall time, per phase."""
from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Sequence
from contextlib import contextmanager


class RunLedger:
    """Counts (component, input) executions. A partial run of m of K components counts m/K runs."""

    def __init__(self, num_components: int):
        if num_components < 1:
            raise ValueError("a system has at least one component")
        self.num_components = num_components
        self.executions: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
        self.seconds: dict[str, float] = defaultdict(float)
        # phase -> component -> event -> count: what a component could not do cleanly (an output it
        # could not parse, retrieved text cut to fit its prompt budget), beside how often it ran
        self.events: dict[str, dict[str, dict[str, int]]] = defaultdict(lambda: defaultdict(lambda: defaultdict(int)))
        self._started = time.perf_counter()
        self._earlier_seconds = 0.0  # wall time of the process(es) this run resumed from

    def record(self, component: str, n_inputs: int, phase: str) -> None:
        self.executions[phase][component] += n_inputs

    def note(self, component: str, event: str, n: int, phase: str) -> None:
        if n:
            self.events[phase][component][event] += int(n)

    def event_rates(self, event: str, components: Sequence[str] | None = None) -> dict[str, dict[str, dict]]:
        """{component: {phase: {"count", "executions", "rate"}}} for one event, for `components` (None: all)."""
        out: dict[str, dict[str, dict]] = {}
        for phase, counts in self.executions.items():
            for component, runs in counts.items():
                if components is not None and component not in components:
                    continue
                n = self.events.get(phase, {}).get(component, {}).get(event, 0)
                out.setdefault(component, {})[phase] = {"count": n, "executions": runs,
                                                        "rate": round(n / runs, 4) if runs else 0.0}
        return out

    @contextmanager
    def timed(self, phase: str):
        start = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[phase] += time.perf_counter() - start

    def equivalent_runs(self, phase: str | None = None) -> float:
        phases = [phase] if phase is not None else list(self.executions)
        total = sum(sum(self.executions[p].values()) for p in phases if p in self.executions)
        return total / self.num_components

    def elapsed(self) -> float:
        return self._earlier_seconds + time.perf_counter() - self._started

    def state(self) -> dict:
        """Everything counted so far, for a checkpoint: a resumed run goes on counting from here."""
        return {"executions": {p: dict(c) for p, c in self.executions.items()},
                "events": self._events_dict(),
                "phase_seconds": dict(self.seconds), "elapsed": self.elapsed()}

    def _events_dict(self) -> dict:
        return {p: {c: dict(e) for c, e in comps.items()} for p, comps in self.events.items()}

    def restore(self, state: dict) -> None:
        for phase, counts in state["executions"].items():
            for component, n in counts.items():
                self.executions[phase][component] = int(n)
        for phase, comps in state.get("events", {}).items():  # absent in checkpoints written before events
            for component, events in comps.items():
                for event, n in events.items():
                    self.events[phase][component][event] = int(n)
        self.seconds.update({p: float(s) for p, s in state["phase_seconds"].items()})
        self._earlier_seconds = float(state["elapsed"])
        self._started = time.perf_counter()

    def to_dict(self) -> dict:
        phases = sorted(set(self.executions) | set(self.seconds) | set(self.events))
        return {
            "runs": round(self.equivalent_runs(), 4),
            "seconds": round(self.elapsed(), 3),
            "by_phase": {
                p: {
                    "runs": round(self.equivalent_runs(p), 4),
                    "component_executions": dict(self.executions.get(p, {})),
                    "events": {c: dict(e) for c, e in self.events.get(p, {}).items()},
                    "seconds": round(self.seconds.get(p, 0.0), 3),
                }
                for p in phases
            },
        }
