"""RunLedger: what a run cost in equivalent full-system runs, counted two ways, plus wall time, per phase.

Two named counts, side by side:

- executed runs: every component execution that happened, divided by K (a run of m of K components
  counts m/K). Everything is in: search samples, local scoring, the GRPO generations of a weights
  component, every value a per-input router runs before it picks one, every Monte Carlo repeat.
- paper runs: the paper's accounting (Appendix G.4; the seed's Amazon decomposition
  60 x 2 = 120, 5 x 10 x 2 = 100, 20 x 7 x 2/3 ~ 93), "one run per candidate": a collection phase
  (Stage 1, each Stage 2 adaptation) charges every candidate it executed, and the downstream run
  that scored it, once, at m/K for the m of K components that ran (a candidate of the first
  component is a full run), whether or not the candidate formed a pair; its Monte Carlo repeats are
  executed, not charged. The system's own runs count one run of each component per input, with the
  caching discount of re-running only the changed component and what follows it; a validation
  pass is charged only when its proposal is accepted (the seed's 7 accepted updates x 20 inputs),
  the rejected ones stay in the executed count. Local scoring (a component run on the search sample
  for r_k to score, the search sample's own runs, RL generations) is not charged.

Beside them, the compute seconds of local training (LRF Stages 1 and 2, GRPO), charged like the LM's.
Each timed phase also records, when its outermost block ends, the process's peak RSS so far (a running
peak: getrusage's maxrss only grows) and the embedded model's prefill/decode tokens and seconds spent
inside it (lm/local/clock.py).
"""
from __future__ import annotations

import resource
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from contextlib import contextmanager
from dataclasses import asdict

from optimas_cli.lm.local.clock import ENGINE, EngineTotals

SEARCH_SAMPLE_PHASE = "search_sample"  # the loop's search inputs: local scoring's input, not charged by the paper


def _counts() -> defaultdict[str, defaultdict[str, int]]:
    return defaultdict(lambda: defaultdict(int))


class RunLedger:
    """Counts (component, input) executions and collected preference pairs, per phase."""

    def __init__(self, num_components: int):
        if num_components < 1:
            raise ValueError("a system has at least one component")
        self.num_components = num_components
        self.executions = _counts()  # everything that ran
        self.charged = _counts()  # what the paper charges
        self.pairs = _counts()  # preference pairs collected (reported; the charge is per candidate run)
        self._pending: defaultdict | None = None  # charges of a validation pass awaiting its gate (provisional)
        self.seconds: dict[str, float] = defaultdict(float)
        self.compute: dict[str, float] = defaultdict(float)  # training seconds, by what was trained
        # phase -> component -> event -> count: what a component could not do cleanly (an output it
        # could not parse, retrieved text cut to fit its prompt budget), beside how often it ran
        self.events: dict[str, dict[str, dict[str, int]]] = defaultdict(lambda: defaultdict(lambda: defaultdict(int)))
        self._events_lock = threading.Lock()
        self.peak_rss_at_end: dict[str, float] = {}  # phase -> the process's peak RSS when the phase last ended
        self.engine: dict[str, EngineTotals] = defaultdict(EngineTotals)  # phase -> embedded model's prefill/decode
        self._open_seconds: dict[str, float] = {}  # phase -> start of its timed block still running
        self._open_engine: dict[str, EngineTotals] = {}  # phase -> ENGINE's totals when its block started
        self._open_compute: dict[str, float] = {}
        self._started = time.perf_counter()
        self._earlier_seconds = 0.0  # wall time of the process(es) this run resumed from
        self.after_record: Callable[[], None] | None = None  # system/caps.stops_mid_phase checks the caps here

    def record(self, component: str, n_inputs: int, phase: str, *, values_run: int = 1,
               charged: bool = True) -> None:
        """`n_inputs` executions of `component`. A per-input router runs `values_run` values on each
        input (all executed, one charged by the paper); uncharged runs (local scoring, a Monte Carlo
        repeat) are executed only."""
        self.executions[phase][component] += n_inputs * values_run
        if charged and phase != SEARCH_SAMPLE_PHASE:
            (self.charged if self._pending is None else self._pending)[phase][component] += n_inputs
        if self.after_record is not None:
            self.after_record()

    @contextmanager
    def provisional(self):
        """Charges recorded inside the block are kept only if `keep()` is called on what it yields,
        after the runs it covers (a validation pass is charged when its proposal is accepted);
        executions always count."""
        self._pending = _counts()
        try:
            yield _Provisional(self, self._pending)
        finally:
            self._pending = None

    def record_pairs(self, component: str, n_pairs: int, phase: str) -> None:
        """Pairs collected for `component` (0 too: the phase is still a collection phase)."""
        self.pairs[phase][component] += n_pairs

    def note(self, component: str, event: str, n: int, phase: str) -> None:
        if n:
            with self._events_lock:  # components running concurrently count their events (optim/prompt.py)
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
        outer = phase not in self._open_seconds  # a nested block of the same phase is counted by the outer one
        if outer:
            self._open_engine[phase] = ENGINE.totals()
        try:
            with self._counting(self.seconds, self._open_seconds, phase):
                yield
        finally:
            if outer:
                self.engine[phase] = self.engine[phase].plus(ENGINE.totals().minus(self._open_engine.pop(phase)))
                self.peak_rss_at_end[phase] = max(self.peak_rss_at_end.get(phase, 0.0), peak_rss_mib())

    def _engine_so_far(self) -> dict[str, EngineTotals]:
        """The embedded model's prefill/decode by phase, including the phases still running."""
        now, live = ENGINE.totals(), dict(self.engine)
        for phase, start in self._open_engine.items():
            live[phase] = live.get(phase, EngineTotals()).plus(now.minus(start))
        return live

    @contextmanager
    def computing(self, kind: str):
        """Charge the block's seconds as local compute (e.g. "lrf_training", "grpo_training")."""
        with self._counting(self.compute, self._open_compute, kind):
            yield

    @contextmanager
    def _counting(self, totals: dict, open_blocks: dict, key: str):
        """Add the block's seconds to totals[key] when it ends; until then open_blocks holds its start,
        so a checkpoint or a cap check inside a long block (the whole loop, an LRF training) sees
        the time spent in it so far."""
        start = time.perf_counter()
        outer = key in open_blocks  # a nested block of the same key is counted by the outer one
        if not outer:
            open_blocks[key] = start
        try:
            yield
        finally:
            if not outer:
                del open_blocks[key]
                totals[key] += time.perf_counter() - start

    @staticmethod
    def _with_open(totals: dict, open_blocks: dict) -> dict[str, float]:
        now = time.perf_counter()
        live = dict(totals)
        for key, start in open_blocks.items():
            live[key] = live.get(key, 0.0) + now - start
        return live

    def compute_so_far(self) -> dict[str, float]:
        """Compute seconds by kind, including the blocks still running."""
        return self._with_open(self.compute, self._open_compute)

    def _phases(self, phase: str | None) -> list[str]:
        return [phase] if phase is not None else sorted(set(self.executions) | set(self.pairs))

    def equivalent_runs(self, phase: str | None = None) -> float:
        """Executed runs: every component execution / K."""
        total = sum(sum(self.executions[p].values()) for p in self._phases(phase) if p in self.executions)
        return total / self.num_components

    def paper_runs(self, phase: str | None = None) -> float:
        """The paper's accounting (module docstring)."""
        total = sum(sum(self.charged[p].values()) for p in self._phases(phase) if p in self.charged)
        return total / self.num_components

    def elapsed(self) -> float:
        return self._earlier_seconds + time.perf_counter() - self._started

    def state(self) -> dict:
        """Everything counted so far, for a checkpoint: a resumed run goes on counting from here."""
        return {"num_components": self.num_components,
                "executions": _plain(self.executions), "charged": _plain(self.charged), "pairs": _plain(self.pairs),
                "events": self._events_dict(), "phase_seconds": self._with_open(self.seconds, self._open_seconds),
                "compute_seconds": self.compute_so_far(), "elapsed": self.elapsed(),
                "peak_rss_mib": {**self.peak_rss_at_end, **dict.fromkeys(self._open_engine, peak_rss_mib())},
                "engine": {p: asdict(t) for p, t in self._engine_so_far().items()}}

    def add_seconds(self, phase: str, seconds: float) -> None:
        """Wall time spent outside this process (a killed one's, past its last checkpoint)."""
        self.seconds[phase] += seconds
        self._earlier_seconds += seconds

    def restore_executions(self, state: dict) -> None:
        """Set the counts (executions, charged runs, pairs, events) back to a `state()`; wall time and
        compute keep counting."""
        for key, counts in (("executions", self.executions), ("charged", self.charged), ("pairs", self.pairs)):
            counts.clear()
            for phase, by_component in state.get(key, {}).items():
                for component, n in by_component.items():
                    counts[phase][component] = int(n)
        self.events.clear()
        for phase, comps in state.get("events", {}).items():  # absent in checkpoints written before events
            for component, events in comps.items():
                for event, n in events.items():
                    self.events[phase][component][event] = int(n)

    def _events_dict(self) -> dict:
        return {p: {c: dict(e) for c, e in comps.items()} for p, comps in self.events.items()}

    def restore(self, state: dict) -> None:
        self.restore_executions(state)
        self.seconds.update({p: float(s) for p, s in state["phase_seconds"].items()})
        self.compute.update({k: float(s) for k, s in state.get("compute_seconds", {}).items()})
        self.peak_rss_at_end.update(state.get("peak_rss_mib", {}))  # absent in checkpoints written before them
        self.engine.update({p: EngineTotals(**t) for p, t in state.get("engine", {}).items()})
        self._earlier_seconds = float(state["elapsed"])
        self._started = time.perf_counter()

    def to_dict(self) -> dict:
        phases = sorted(set(self.executions) | set(self.pairs) | set(self.seconds) | set(self.events))
        by_phase = {}
        for p in phases:
            by_phase[p] = {
                "runs": round(self.equivalent_runs(p), 4),
                "paper_runs": round(self.paper_runs(p), 4),
                "component_executions": dict(self.executions.get(p, {})),
                "events": {c: dict(e) for c, e in self.events.get(p, {}).items()},
                "seconds": round(self.seconds.get(p, 0.0), 3),
            }
            if p in self.pairs:
                by_phase[p]["pairs"] = dict(self.pairs[p])
            if p in self.peak_rss_at_end:  # timed phases
                by_phase[p]["peak_rss_mib_so_far"] = round(self.peak_rss_at_end[p], 1)
                by_phase[p]["engine"] = _rounded(asdict(self.engine[p]))
        return {"runs": round(self.equivalent_runs(), 4), "paper_runs": round(self.paper_runs(), 4),
                "seconds": round(self.elapsed(), 3),
                # the process's peak RSS so far (a resumed run's: the highest of its processes')
                "peak_rss_mib": round(max([peak_rss_mib(), *self.peak_rss_at_end.values()]), 1),
                "compute_seconds": {k: round(v, 3) for k, v in sorted(self.compute.items())}, "by_phase": by_phase}


class _Provisional:
    """What `RunLedger.provisional` yields: `keep()` charges the runs recorded so far in its block."""

    def __init__(self, ledger: RunLedger, pending: defaultdict):
        self._ledger, self._pending = ledger, pending

    def keep(self) -> None:
        for phase, by_component in self._pending.items():
            for component, n in by_component.items():
                self._ledger.charged[phase][component] += n
        self._pending.clear()


def peak_rss_mib() -> float:
    """The process's peak resident set size so far, in MiB (maxrss is in KiB on Linux, bytes on macOS)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / (1 << 20) if sys.platform == "darwin" else peak / 1024


def _rounded(row: dict) -> dict:
    return {k: round(v, 3) if isinstance(v, float) else v for k, v in row.items()}


def _plain(counts: dict) -> dict:
    return {p: dict(c) for p, c in counts.items()}
