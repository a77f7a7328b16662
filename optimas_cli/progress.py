"""Progress of every long phase: a rich bar with counts and ETA on a terminal, one line per phase elsewhere.

    with phase("test evaluation", total=3, lm=ctx.lm) as step:
        for r in range(3):
            ...
            step()
    for name in track(names, "collecting pairs"):   # the same, for a plain loop
        ...

On a terminal every open phase is one row of a single live display (rich allows one at a time, and
phases nest: an iteration's validation runs inside the optimize phase). Elsewhere (CI, SLURM logs,
a pipe) nothing is redrawn: each phase prints and logs one line when it ends, with its item count,
wall time and, when an LM client is given, the tokens and dollars it spent.
"""
from __future__ import annotations

import logging
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

log = logging.getLogger("optimas")
T = TypeVar("T")

_lock = threading.Lock()
_live: dict[str, Any] = {"bar": None, "open": 0}


def on_terminal() -> bool:
    return sys.stderr.isatty()


def _usage(lm: Any) -> tuple[int, float] | None:
    """(tokens, dollars) the LM layer has counted so far, or None without an LM that keeps accounts."""
    usage = getattr(lm, "usage", None)
    if not callable(usage):
        return None
    total = (usage() or {}).get("total", {})
    return int(total.get("tokens", 0)), float(total.get("cost", 0.0))


def summary_line(label: str, done: int, total: int | None, seconds: float,
                 spent: tuple[int, float] | None = None) -> str:
    """`label: 3/3 in 12.4 s`, or `label: in 12.4 s` for a phase without counted steps, plus
    ` · 1,234 tokens · $0.0021` (tokens and dollars only when some were spent)."""
    count = f"{done}/{total} " if total is not None else (f"{done} " if done else "")
    line = f"{label}: {count}in {seconds:.1f} s"
    if spent and spent[0]:
        line += f" · {spent[0]:,} tokens"
    if spent and spent[1]:
        line += f" · ${spent[1]:.4f}"
    return line


def _start_bar():
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                   TextColumn("eta"), TimeRemainingColumn(), console=Console(stderr=True), transient=True)
    bar.start()
    return bar


@contextmanager
def phase(label: str, total: int | None = None, lm: Any = None) -> Iterator[Callable[[int], None]]:
    """Yields `advance(n=1)`; see the module docstring for what is shown where."""
    before, started, done = _usage(lm), time.perf_counter(), [0]
    terminal = on_terminal()
    task = None
    if terminal:
        with _lock:
            if _live["bar"] is None:
                _live["bar"] = _start_bar()
            _live["open"] += 1
            bar = _live["bar"]
            task = bar.add_task(label, total=total)

    def advance(n: int = 1) -> None:
        done[0] += n
        if task is not None:
            bar.advance(task, n)

    try:
        yield advance
    finally:
        seconds = time.perf_counter() - started
        after = _usage(lm)
        spent = (after[0] - before[0], after[1] - before[1]) if before and after else None
        line = summary_line(label, done[0], total, seconds, spent)
        log.info("%s", line)
        if terminal:
            with _lock:
                bar.remove_task(task)
                _live["open"] -= 1
                if _live["open"] == 0:
                    bar.stop()
                    _live["bar"] = None
        else:
            print(line, flush=True)


def track(items: Iterable[T], label: str, total: int | None = None, lm: Any = None) -> Iterator[T]:
    """Iterate `items` inside one phase, one step per item."""
    if total is None and hasattr(items, "__len__"):
        total = len(items)  # type: ignore[arg-type]
    with phase(label, total, lm) as advance:
        for item in items:
            yield item
            advance()
