"""RunLedger: component executions converted to equivalent full-system runs, plus wall time, per phase,
and the compute seconds of local training (LRF Stages 1 and 2, GRPO) charged beside the LM's."""
from __future__ import annotations

import time
from collections import defaultdict
from contextlib import contextmanager


class RunLedger:
    """Counts (component, input) executions. A partial run of m of K components counts m/K runs."""

    def __init__(self, num_components: int):
        if num_components < 1:
            raise ValueError("a system has at least one component")
        self.num_components = num_components
        self.executions: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
        self.seconds: dict[str, float] = defaultdict(float)
        self.compute: dict[str, float] = defaultdict(float)  # training seconds, by what was trained
        self._started = time.perf_counter()
        self._earlier_seconds = 0.0  # wall time of the process(es) this run resumed from

    def record(self, component: str, n_inputs: int, phase: str) -> None:
        self.executions[phase][component] += n_inputs

    @contextmanager
    def timed(self, phase: str):
        start = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[phase] += time.perf_counter() - start

    @contextmanager
    def computing(self, kind: str):
        """Charge the block's seconds as local compute (e.g. "lrf_training", "grpo_training")."""
        start = time.perf_counter()
        try:
            yield
        finally:
            self.compute[kind] += time.perf_counter() - start

    def equivalent_runs(self, phase: str | None = None) -> float:
        phases = [phase] if phase is not None else list(self.executions)
        total = sum(sum(self.executions[p].values()) for p in phases if p in self.executions)
        return total / self.num_components

    def elapsed(self) -> float:
        return self._earlier_seconds + time.perf_counter() - self._started

    def state(self) -> dict:
        """Everything counted so far, for a checkpoint: a resumed run goes on counting from here."""
        return {"executions": {p: dict(c) for p, c in self.executions.items()},
                "phase_seconds": dict(self.seconds), "compute_seconds": dict(self.compute),
                "elapsed": self.elapsed()}

    def add_seconds(self, phase: str, seconds: float) -> None:
        """Wall time spent outside this process (a killed one's, past its last checkpoint)."""
        self.seconds[phase] += seconds
        self._earlier_seconds += seconds

    def restore_executions(self, state: dict) -> None:
        """Set the execution counts back to a `state()` (wall time and compute keep counting)."""
        self.executions.clear()
        for phase, counts in state["executions"].items():
            for component, n in counts.items():
                self.executions[phase][component] = int(n)

    def restore(self, state: dict) -> None:
        self.restore_executions(state)
        self.seconds.update({p: float(s) for p, s in state["phase_seconds"].items()})
        self.compute.update({k: float(s) for k, s in state.get("compute_seconds", {}).items()})
        self._earlier_seconds = float(state["elapsed"])
        self._started = time.perf_counter()

    def to_dict(self) -> dict:
        phases = sorted(set(self.executions) | set(self.seconds))
        return {
            "runs": round(self.equivalent_runs(), 4),
            "seconds": round(self.elapsed(), 3),
            "compute_seconds": {k: round(s, 3) for k, s in sorted(self.compute.items())},
            "by_phase": {
                p: {
                    "runs": round(self.equivalent_runs(p), 4),
                    "component_executions": dict(self.executions.get(p, {})),
                    "seconds": round(self.seconds.get(p, 0.0), 3),
                }
                for p in phases
            },
        }
