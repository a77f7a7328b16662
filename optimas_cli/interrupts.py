"""SIGTERM (what SLURM, `timeout` and `kill` send) ends a run the way Ctrl-C does: the work so far stays
checkpointed and the user gets the `resume=` line, instead of Python's silent default death (exit 143)."""
from __future__ import annotations

import signal
import threading
from contextlib import contextmanager

SIGTERM_EXIT = 128 + signal.SIGTERM  # the shell's code for "ended by SIGTERM": schedulers read it as such


class Terminated(KeyboardInterrupt):
    """Raised in the main thread on SIGTERM; a KeyboardInterrupt, so every Ctrl-C path handles it."""


@contextmanager
def sigterm_as_interrupt():
    """Inside the block, SIGTERM raises Terminated once; a second SIGTERM kills at once (the default)."""
    if threading.current_thread() is not threading.main_thread():  # signals can only be set from there
        yield
        return

    def terminate(signum, frame):
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        raise Terminated()

    previous = signal.signal(signal.SIGTERM, terminate)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
