"""Amazon next-item selection: trainable local models feeding a prompted decider (paper Section 5)."""
from pipelines.amazon.system import build

__all__ = ["build"]
